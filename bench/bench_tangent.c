// Tangent generation against memory bandwidth: how fast the regenerated tangents of one layer
// are made (fill), made and dotted with a reference (fill+dot, op F of cv), added into an
// update (axpy, op U of weight perturbation; axpy by rows, a coefficient per sample row: op U
// of activity perturbation) and dotted without being kept (dot, low-rank F), next to memset
// and memcpy of the same bytes, on one thread and on all.
// Prints one table. Usage: fgpipe-bench-tangent [MILLION_VALUES] (default 16: past the caches).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "progress.h"
#include "tangent.h"

enum { REPS = 5 };

typedef enum { FILL, FILL_DOT, AXPY, AXPY_ROWS, DOT, MEMSET, MEMCPY, N_KINDS } Kind;
static const char *const NAMES[N_KINDS] = {"tangent fill", "fill + dot", "tangent axpy",
                                           "axpy by rows", "tangent dot", "memset", "memcpy"};
// Bytes each kind moves per value: written, read, or read and written.
static const double BYTES[N_KINDS] = {4, 8, 8, 8, 4, 4, 8};
enum { ROW_WIDTH = 1024 };  // axpy by rows: a hidden layer's width

// The Philox path tangent.c picks with these same compile flags.
#if defined(__AVX512F__)
#define PHILOX_PATH "AVX-512"
#elif defined(__AVX2__)
#define PHILOX_PATH "AVX2"
#else
#define PHILOX_PATH "scalar"
#endif

static void run(Kind kind, size_t n, float *a, float *b, double *sink) {
    TangentKey key = tangent_key(1, 7, 3, 2);
    switch (kind) {
    case FILL: tangent_fill(key, 0, n, a); break;
    case FILL_DOT: *sink += tangent_fill_dot(key, 0, n, a, b); break;
    case AXPY: tangent_axpy(key, 0, n, 0.5f, a); break;
    case AXPY_ROWS: tangent_axpy_rows(key, n / ROW_WIDTH, ROW_WIDTH, b, a); break;
    case DOT: *sink += tangent_dot(key, 0, n, b); break;
    case MEMSET:
    case MEMCPY: {
        // In chunks over the threads, as the tangent walker splits its range.
        const size_t chunk = 1 << 20, chunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static)
        for (size_t c = 0; c < chunks; c++) {
            size_t lo = c * chunk, len = FG_MIN(chunk, n - lo) * sizeof(float);
            if (kind == MEMSET) memset(a + lo, 0, len);
            else memcpy(a + lo, b + lo, len);
        }
        break;
    }
    case N_KINDS: break;
    }
}

// Best of REPS, in seconds.
static double best_seconds(Kind kind, size_t n, float *a, float *b, double *sink) {
    double best = 1e300;
    for (int r = 0; r < REPS; r++) {
        double t = wall_seconds();
        run(kind, n, a, b, sink);
        t = wall_seconds() - t;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    double millions = argc > 1 ? atof(argv[1]) : 16.0;
    if (!(millions > 0)) {
        fprintf(stderr, "usage: %s [MILLION_VALUES > 0]\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)(millions * 1e6);
    float *a = fg_alloc_floats(n), *b = fg_alloc_floats(n);
    for (size_t i = 0; i < n; i++) b[i] = (float)(i % 97) * 0.01f;
    double sink = 0.0;
    int threads[2] = {1, omp_get_max_threads()};
    printf("fgpipe tangent bench: %zu values (%.0f MiB per buffer), best of %d, %s Philox\n", n,
           n * 4.0 / 1048576, REPS, PHILOX_PATH);
    printf("%-14s %8s %12s %12s %12s\n", "op", "threads", "ns/value", "GB/s", "x memset");
    for (int t = 0; t < (threads[1] > 1 ? 2 : 1); t++) {
        omp_set_num_threads(threads[t]);
        double memset_s = best_seconds(MEMSET, n, a, b, &sink);
        for (int k = 0; k < N_KINDS; k++) {
            double s = k == MEMSET ? memset_s : best_seconds((Kind)k, n, a, b, &sink);
            printf("%-14s %8d %12.3f %12.2f %12.2f\n", NAMES[k], threads[t], 1e9 * s / n,
                   BYTES[k] * n / s / 1e9, s / memset_s);
        }
    }
    printf("\nGB/s counts the bytes each op must move (fill, memset: written; dot: read; the others:\n"
           "read and written); x memset: its time over memset's on the same threads. (checksum %g)\n",
           sink);
    fg_free(a);
    fg_free(b);
    return 0;
}
