#include "tangent.h"

#include <math.h>

#include "common.h"
#include "philox.h"

// Normals are made in batches of 256 from 64 Philox blocks, laid out so that every loop below
// runs over contiguous arrays (and vectorises): element i of a tensor lives in batch i/256;
// at position r = i%256 it is Box-Muller output r/64 of block 64*(i/256) + r%64, where
// outputs 0,1 come from the block's words (0,1) and outputs 2,3 from words (2,3).
// The counter carries the block number and (layer, k, micro-batch, step); the key carries
// (seed, stream). A GPU kernel reproduces exactly this layout.
#define BATCH 256
#define BLOCKS (BATCH / 4)

static void normals_batch(TangentKey key, size_t batch, float *restrict out) {
    uint32_t c0[BLOCKS], c1[BLOCKS], c2[BLOCKS], c3[BLOCKS];
    const uint32_t first_block = (uint32_t)(batch * BLOCKS), coords = (key.layer << 12) ^ key.k;
    for (int i = 0; i < BLOCKS; i++) {
        c0[i] = first_block + (uint32_t)i;
        c1[i] = coords;
        c2[i] = key.microbatch;
        c3[i] = key.step;
    }
    uint32_t k0 = key.seed, k1 = key.stream;
    for (int round = 0; round < 10; round++) {
#pragma omp simd
        for (int i = 0; i < BLOCKS; i++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[i], p1 = (uint64_t)PHILOX_M1 * c2[i];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[i] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[i] ^ k1;
            c0[i] = n0;
            c1[i] = (uint32_t)p1;
            c2[i] = n2;
            c3[i] = (uint32_t)p0;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
#pragma omp simd
    for (int i = 0; i < BLOCKS; i++) {
        fg_box_muller(c0[i], c1[i], &out[i], &out[BLOCKS + i]);
        fg_box_muller(c2[i], c3[i], &out[2 * BLOCKS + i], &out[3 * BLOCKS + i]);
    }
}

// The three entry points share one walker. The range is cut into fixed groups of GROUP
// elements, the iterations of one OpenMP parallel for (so the split never depends on the
// thread count); dot products are summed per group, then across groups in order on the
// calling thread: bitwise reproducible on any number of threads.
#define GROUP 65536

typedef enum { OP_FILL, OP_AXPY, OP_DOT, OP_FILL_DOT, OP_AXPY_ROWS } TangentOp;

// What a walk does with the values: y, x and alpha as in the entry points; OP_AXPY_ROWS scales
// element i by x[(i - first) / width] (a coefficient per row of `width` elements).
typedef struct {
    TangentOp op;
    float alpha;
    float *y;
    const float *x;
    size_t width;
} Walk;

static double walk_group(TangentKey key, size_t lo, size_t hi, size_t first, const Walk *w) {
    const TangentOp op = w->op;
    const float alpha = w->alpha, *x = w->x;
    float *y = w->y;
    double sum = 0.0;
    float v[BATCH];
    for (size_t blo = lo / BATCH * BATCH; blo < hi; blo += BATCH) {
        normals_batch(key, blo / BATCH, v);
        size_t a = FG_MAX(blo, lo), b = FG_MIN(blo + BATCH, hi);
        const float *vv = v + (a - blo);
        size_t len = b - a, off = a - first;
        if (op == OP_FILL) {
            for (size_t i = 0; i < len; i++) y[off + i] = vv[i];
        } else if (op == OP_AXPY) {
            for (size_t i = 0; i < len; i++) y[off + i] += alpha * vv[i];
        } else if (op == OP_AXPY_ROWS) {
            for (size_t i = 0; i < len; i++) y[off + i] += x[(off + i) / w->width] * vv[i];
        } else if (op == OP_DOT) {
            for (size_t i = 0; i < len; i++) sum += (double)x[off + i] * vv[i];
        } else {
            for (size_t i = 0; i < len; i++) y[off + i] = vv[i];
            sum += fg_dot_f64(x + off, vv, len);
        }
    }
    return sum;
}

static double tangent_walk(TangentKey key, size_t first, size_t n, const Walk *w) {
    size_t groups = (n + GROUP - 1) / GROUP;
    double small[64];
    double *partial = groups <= 64 ? small : fg_alloc_bytes(groups * sizeof(double));
#pragma omp parallel for schedule(static) if (groups > 1)
    for (size_t g = 0; g < groups; g++) {
        size_t lo = first + g * GROUP, hi = FG_MIN(lo + GROUP, first + n);
        partial[g] = walk_group(key, lo, hi, first, w);
    }
    double total = 0.0;
    for (size_t g = 0; g < groups; g++) total += partial[g];
    if (partial != small) fg_free(partial);
    return total;
}

void tangent_fill(TangentKey key, size_t first, size_t n, float *out) {
    tangent_walk(key, first, n, &(Walk){.op = OP_FILL, .y = out});
}

double tangent_fill_dot(TangentKey key, size_t first, size_t n, float *out, const float *x) {
    return tangent_walk(key, first, n, &(Walk){.op = OP_FILL_DOT, .y = out, .x = x});
}

void tangent_axpy(TangentKey key, size_t first, size_t n, float alpha, float *y) {
    tangent_walk(key, first, n, &(Walk){.op = OP_AXPY, .alpha = alpha, .y = y});
}

double tangent_dot(TangentKey key, size_t first, size_t n, const float *x) {
    return tangent_walk(key, first, n, &(Walk){.op = OP_DOT, .x = x});
}

void tangent_axpy_rows(TangentKey key, size_t rows, size_t width, const float *row_alpha,
                       float *y) {
    tangent_walk(key, 0, rows * width, &(Walk){.op = OP_AXPY_ROWS, .y = y, .x = row_alpha, .width = width});
}
