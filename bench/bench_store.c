// One round of the layer store benchmark (bench/bench_store.sh runs rounds and prints medians).
//
//   fgpipe-bench-store DIR [STORE_MiB=1024] [LAYER_MiB=32]
//
// On a fresh store (the HDF5 file of io/layer_store.h, one O_DIRECT request per layer) of
// STORE_MiB of layers (params + Adam m + v, LAYER_MiB per layer):
//   create   create + reserve the file (2 slots per layer)
//   write    every layer written as a new version (data, fdatasync, stamp, fdatasync)
//   read     every layer read
//   stream   one fg-like iteration through the layer stream (2 slots): every layer read ahead,
//            acquired, released dirty and written back; bandwidth counts read + written bytes
// Prints "store 1 <op> <GB/s> <seconds>" lines (1: requests in flight, as dd's block count).
// A raw-file format and 4 I/O threads of 1 MiB chunks were measured against this and dropped:
// docs/out-of-core.md has the numbers.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "direct_io.h"
#include "layer_store.h"
#include "layer_stream_store.h"
#include "progress.h"  // wall_seconds

static void die(const FgError *err) {
    fprintf(stderr, "bench_store: %s\n", err->msg);
    exit(1);
}

// Every layer through the stream once, as an fg step does; returns the seconds taken.
static double stream_pass(LayerStore *s, int n) {
    FgError err = {0};
    LayerStream ls;
    if (layer_stream_store_open(&ls, s, 2, 0, 0, &err)) die(&err);  // owns s from here
    double t0 = wall_seconds();
    for (int i = 0; i < n; i++) {
        LayerView v;
        if ((i + 1 < n && ls.prefetch(&ls, i + 1, &err)) || ls.acquire(&ls, i, &v, &err)) die(&err);
        v.buf[0][0] += 1.0f;  // the "update"
        if (ls.release(&ls, i, 1, &err)) die(&err);
    }
    if (ls.close(&ls, &err)) die(&err);
    return wall_seconds() - t0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [STORE_MiB=1024] [LAYER_MiB=32]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    size_t store_mib = argc > 2 ? (size_t)atol(argv[2]) : 1024, layer_mib = argc > 3 ? (size_t)atol(argv[3]) : 32;
    int n = (int)(store_mib / layer_mib);
    if (n < 2 || n > MODEL_MAX_LAYERS) {
        fprintf(stderr, "bench_store: %d layers (2..%d)\n", n, MODEL_MAX_LAYERS);
        return 2;
    }
    StoreLayer layers[MODEL_MAX_LAYERS];
    for (int i = 0; i < n; i++) {
        memset(&layers[i], 0, sizeof layers[i]);
        snprintf(layers[i].name, sizeof layers[i].name, "fc%d", i + 1);
        layers[i].layer = i;
        layers[i].count = layer_mib * (1 << 20) / 3 / sizeof(float);
    }
    StoreOptions o = {.n_bufs = 3, .preallocate = 1};
    FgError err = {0};
    LayerStore *s;
    double t0 = wall_seconds();
    if (layer_store_create(&s, dir, "bench", n, layers, &o, &err)) die(&err);
    double t_create = wall_seconds() - t0;
    if (layer_store_note(s)[0]) fprintf(stderr, "bench_store: %s\n", layer_store_note(s));
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    memset(mem, 0x3c, layer_store_max_slot_bytes(s));
    double bytes = 0;
    for (int i = 0; i < n; i++) bytes += (double)layer_store_slot_bytes(s, i);
    t0 = wall_seconds();
    for (int i = 0; i < n; i++)
        if (layer_store_write(s, i, 0, mem, &err)) die(&err);
    double t_write = wall_seconds() - t0;
    t0 = wall_seconds();
    for (int i = 0; i < n; i++)
        if (layer_store_read(s, i, mem, &err)) die(&err);
    double t_read = wall_seconds() - t0;
    fg_free(mem);
    double t_stream = stream_pass(s, n);
    printf("store 1 create %.3f %.3f\n", 2 * bytes / t_create / 1e9, t_create);
    printf("store 1 write %.3f %.3f\n", bytes / t_write / 1e9, t_write);
    printf("store 1 read %.3f %.3f\n", bytes / t_read / 1e9, t_read);
    printf("store 1 stream %.3f %.3f\n", 2 * bytes / t_stream / 1e9, t_stream);
    char path[1200];
    snprintf(path, sizeof path, "%s/bench.h5", dir);
    unlink(path);
    return 0;
}
