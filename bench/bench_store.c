// One round of the layer store benchmark (bench/bench_store.sh runs rounds and prints medians).
//
//   fgpipe-bench-store DIR [STORE_MiB=1024] [LAYER_MiB=32]
//
// For each format (hdf5: aligned datasets read at H5Dget_offset; raw: raw file + HDF5 index) and
// I/O threads (1: one request per layer; 4: 1 MiB chunks from 4 threads), on a fresh store of
// STORE_MiB of layers (params + Adam m + v, LAYER_MiB per layer):
//   create   create + reserve the file (2 slots per layer)
//   write    every layer written as a new version (data, fdatasync, stamp, fdatasync)
//   read     every layer read
//   stream   one fg-like iteration through the layer stream (2 slots): every layer read ahead,
//            acquired, released dirty and written back; bandwidth counts read + written bytes
// Prints "<format> <threads> <op> <GB/s> <seconds>" lines.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "direct_io.h"
#include "layer_store.h"
#include "layer_stream_store.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const FgError *err) {
    fprintf(stderr, "bench_store: %s\n", err->msg);
    exit(1);
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
    const StoreFormat formats[2] = {STORE_HDF5, STORE_RAW};
    const int threads[2] = {1, 4};
    for (int f = 0; f < 2; f++)
        for (int t = 0; t < 2; t++) {
            const char *fname = formats[f] == STORE_HDF5 ? "hdf5" : "raw";
            StoreOptions o = {.format = formats[f], .n_bufs = 3, .io_threads = threads[t],
                              .chunk_bytes = 1 << 20, .preallocate = 1};
            FgError err = {0};
            LayerStore *s;
            double t0 = now();
            if (layer_store_create(&s, dir, "bench", n, layers, &o, &err)) die(&err);
            double t_create = now() - t0;
            if (layer_store_note(s)[0]) fprintf(stderr, "bench_store: %s\n", layer_store_note(s));
            unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
            memset(mem, 0x3c, layer_store_max_slot_bytes(s));
            double bytes = 0;
            for (int i = 0; i < n; i++) bytes += (double)layer_store_slot_bytes(s, i);
            t0 = now();
            for (int i = 0; i < n; i++)
                if (layer_store_write(s, i, 0, mem, &err)) die(&err);
            double t_write = now() - t0;
            t0 = now();
            for (int i = 0; i < n; i++)
                if (layer_store_read(s, i, mem, &err)) die(&err);
            double t_read = now() - t0;
            fg_free(mem);
            LayerStream ls;
            if (layer_stream_store_open(&ls, s, 2, &err)) die(&err);
            t0 = now();
            for (int i = 0; i < n; i++) {
                LayerView v;
                if ((i + 1 < n && ls.prefetch(&ls, i + 1, &err)) || ls.acquire(&ls, i, &v, &err)) die(&err);
                v.buf[0][0] += 1.0f;  // the "update"
                if (ls.release(&ls, i, 1, &err)) die(&err);
            }
            if (ls.close(&ls, &err)) die(&err);
            double t_stream = now() - t0;
            printf("%s %d create %.3f %.3f\n", fname, threads[t], 2 * bytes / t_create / 1e9, t_create);
            printf("%s %d write %.3f %.3f\n", fname, threads[t], bytes / t_write / 1e9, t_write);
            printf("%s %d read %.3f %.3f\n", fname, threads[t], bytes / t_read / 1e9, t_read);
            printf("%s %d stream %.3f %.3f\n", fname, threads[t], 2 * bytes / t_stream / 1e9, t_stream);
            fflush(stdout);
            char path[1200];
            snprintf(path, sizeof path, "%s/bench.%s", dir, formats[f] == STORE_HDF5 ? "h5" : "raw");
            unlink(path);
            snprintf(path, sizeof path, "%s/bench.idx.h5", dir);
            unlink(path);
        }
    return 0;
}
