// A streamed stage on a device computes on device copies of the layer it holds (docs/gpu.md,
// "Out of core on the GPU"). The host slots are page-locked and the copies run on the
// backend's copy stream, so they overlap the compute stream's work: with two lanes (two
// device copies of a layer's buffers) the next layer uploads while the compute stream still
// works on the one before. Fences order the two streams; the host waits only where a host
// slot is handed back to the store (the upload from it done, a dirty layer downloaded into it).
#ifndef FGPIPE_DEVICE_LANES_H
#define FGPIPE_DEVICE_LANES_H

#include <stddef.h>

#include "backend.h"
#include "common.h"
#include "layer_stream.h"

enum { DEVICE_LANES_MAX = 2 };

typedef struct {
    const Backend *be;
    size_t floats;            // of a lane: a layer's buffers one after the other
    int n_lanes;
    float *lane[DEVICE_LANES_MAX];       // device memory
    void *loaded[DEVICE_LANES_MAX];      // the copy stream filled the lane
    void *freed[DEVICE_LANES_MAX];       // the compute stream is done with the lane
    void *saved;                         // a dirty lane's download is done
    int next;                 // the lane the next layer loads into
    int held;                 // the lane of the layer held (-1: none)
    double bytes_in, bytes_out;  // copied to and from the device so far
} DeviceLanes;

// Device bytes of n_lanes lanes of that many floats (slot_plan.c counts them).
double device_lanes_bytes(int n_lanes, size_t floats);

// Lanes of floats each (0: none, the part is never on the device).
void device_lanes_open(DeviceLanes *d, const Backend *be, int n_lanes, size_t floats);
void device_lanes_close(DeviceLanes *d);

// Starts a layer in the next lane: its uploads wait until the compute stream is done with the
// lane's last layer. Then device_lanes_in uploads buffer b of v, device_lanes_ready makes the
// compute stream wait for the uploads. A BF16 slot's buffer 0 (LayerView.bf16) crosses as it
// lies, 2 bytes a value, both ways (bytes_in, bytes_out count what crossed).
void device_lanes_begin(DeviceLanes *d);
float *device_lanes_in(DeviceLanes *d, const LayerView *v, int b);  // at b * v->count floats
void device_lanes_ready(DeviceLanes *d);

// The held layer is done: dirty, its buffers come back into v's host slot; either way the host
// slot is the store's again when this returns FG_OK.
int device_lanes_release(DeviceLanes *d, const LayerView *v, int dirty, FgError *err);

#endif
