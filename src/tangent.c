#include "tangent.h"

#include <math.h>

#include "common.h"
#include "philox.h"

// Element i comes from Philox block i/4, lane i%4; lanes (0,1) and (2,3) are Box-Muller
// pairs. The counter carries the element block and the (layer, k, micro-batch, step)
// coordinates; the key carries (seed, stream).
static inline Philox4 block_counter(TangentKey key, uint32_t block) {
    Philox4 c = {{block, (key.layer << 12) ^ key.k, key.microbatch, key.step}};
    return c;
}

static inline void normals4(TangentKey key, uint32_t block, float z[4]) {
    Philox4 r = philox4x32_10(block_counter(key, block), key.seed, key.stream);
    fg_box_muller(r.v[0], r.v[1], &z[0], &z[1]);
    fg_box_muller(r.v[2], r.v[3], &z[2], &z[3]);
}

// The three entry points share one walker. The range is cut into fixed groups of
// GROUP elements (one OpenMP task each, so the work split never depends on the thread
// count), each group is generated in 4-wide blocks of CHUNK normals, and dot products are
// summed per group, then across groups in order: bitwise reproducible on any thread count.
#define CHUNK 256
#define GROUP 65536

typedef enum { OP_FILL, OP_AXPY, OP_DOT } TangentOp;

static double walk_group(TangentKey key, size_t lo, size_t hi, size_t first, TangentOp op,
                         float alpha, float *y, const float *x) {
    double sum = 0.0;
    float v[CHUNK + 8];
    for (size_t clo = lo; clo < hi; clo += CHUNK) {
        size_t chi = FG_MIN(clo + CHUNK, hi);
        size_t b0 = clo / 4, b1 = (chi + 3) / 4;
        for (size_t b = b0; b < b1; b++) normals4(key, (uint32_t)b, &v[(b - b0) * 4]);
        const float *vv = v + (clo - b0 * 4);
        size_t len = chi - clo, off = clo - first;
        if (op == OP_FILL) {
            for (size_t i = 0; i < len; i++) y[off + i] = vv[i];
        } else if (op == OP_AXPY) {
            for (size_t i = 0; i < len; i++) y[off + i] += alpha * vv[i];
        } else {
            for (size_t i = 0; i < len; i++) sum += (double)x[off + i] * vv[i];
        }
    }
    return sum;
}

static double tangent_walk(TangentKey key, size_t first, size_t n, TangentOp op, float alpha,
                           float *y, const float *x) {
    size_t groups = (n + GROUP - 1) / GROUP;
    double small[64];
    double *partial = groups <= 64 ? small : fg_alloc_bytes(groups * sizeof(double));
#pragma omp parallel for schedule(static) if (groups > 1)
    for (size_t g = 0; g < groups; g++) {
        size_t lo = first + g * GROUP, hi = FG_MIN(lo + GROUP, first + n);
        partial[g] = walk_group(key, lo, hi, first, op, alpha, y, x);
    }
    double total = 0.0;
    for (size_t g = 0; g < groups; g++) total += partial[g];
    if (partial != small) fg_free(partial);
    return total;
}

void tangent_fill(TangentKey key, size_t first, size_t n, float *out) {
    tangent_walk(key, first, n, OP_FILL, 0.0f, out, NULL);
}

void tangent_axpy(TangentKey key, size_t first, size_t n, float alpha, float *y) {
    tangent_walk(key, first, n, OP_AXPY, alpha, y, NULL);
}

double tangent_dot(TangentKey key, size_t first, size_t n, const float *x) {
    return tangent_walk(key, first, n, OP_DOT, 0.0f, NULL, x);
}
