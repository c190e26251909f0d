// Device copies of a streamed stage's layers (device_lanes.h).
#include "device_lanes.h"

enum { ON_COMPUTE = BACKEND_COMPUTE_STREAM, ON_COPY = BACKEND_COPY_STREAM };

double device_lanes_bytes(int n_lanes, size_t floats) {
    return (double)n_lanes * floats * sizeof(float);
}

void device_lanes_open(DeviceLanes *d, const Backend *be, int n_lanes, size_t floats) {
    *d = (DeviceLanes){.be = be, .floats = floats, .n_lanes = n_lanes, .held = -1};
    if (!floats) return;
    for (int i = 0; i < n_lanes; i++) {
        d->lane[i] = backend_alloc_floats(be, floats);
        d->loaded[i] = be->fence_new(be);
        d->freed[i] = be->fence_new(be);
    }
    d->saved = be->fence_new(be);
}

void device_lanes_close(DeviceLanes *d) {
    const Backend *be = d->be;
    if (!be || !d->floats) return;
    for (int i = 0; i < d->n_lanes; i++) {
        be->free(be, d->lane[i]);
        be->fence_free(be, d->loaded[i]);
        be->fence_free(be, d->freed[i]);
    }
    be->fence_free(be, d->saved);
    *d = (DeviceLanes){0};
}

void device_lanes_begin(DeviceLanes *d) {
    d->held = d->next;
    d->next = (d->next + 1) % d->n_lanes;
    d->be->fence_wait(d->be, d->freed[d->held], ON_COPY);
}

// Bytes of buffer b of v that cross the link: a BF16 slot's buffer 0 holds count BF16 values.
static size_t buffer_bytes(const LayerView *v, int b) {
    return v->count * (v->bf16 && b == 0 ? sizeof(uint16_t) : sizeof(float));
}

float *device_lanes_in(DeviceLanes *d, const LayerView *v, int b) {
    float *dev = d->lane[d->held] + (size_t)b * v->count;
    d->be->copy_async(d->be, dev, v->buf[b], buffer_bytes(v, b), 1);
    d->bytes_in += (double)buffer_bytes(v, b);
    return dev;
}

void device_lanes_ready(DeviceLanes *d) {
    d->be->fence_mark(d->be, d->loaded[d->held], ON_COPY);
    d->be->fence_wait(d->be, d->loaded[d->held], ON_COMPUTE);
}

int device_lanes_release(DeviceLanes *d, const LayerView *v, int dirty, FgError *err) {
    const Backend *be = d->be;
    int lane = d->held;
    if (lane < 0) return FG_OK;
    d->held = -1;
    be->fence_mark(be, d->freed[lane], ON_COMPUTE);
    if (!dirty) return be->fence_sync(be, d->loaded[lane], err);  // the slot's upload is done
    be->fence_wait(be, d->freed[lane], ON_COPY);
    for (int b = 0; b < v->n_bufs; b++) {
        be->copy_async(be, v->buf[b], d->lane[lane] + (size_t)b * v->count, buffer_bytes(v, b), 0);
        d->bytes_out += (double)buffer_bytes(v, b);
    }
    be->fence_mark(be, d->saved, ON_COPY);
    return be->fence_sync(be, d->saved, err);
}
