// Random tangents for forward gradients, regenerated on demand and never stored.
//
// A tangent element is a pure function of (seed, stream, step, micro-batch, layer, k, index):
// any stage, on any backend, in any order, gets the same value. The key names the *global*
// layer index, not the pipeline stage, so a model cut into M stages sees exactly the tangents
// of the same model on one stage.
#ifndef FGPIPE_TANGENT_H
#define FGPIPE_TANGENT_H

#include <stddef.h>
#include <stdint.h>

// Low-rank weight tangents take their factors and bias from three streams of their own; the
// fixed heads of local losses (local_loss.h) from another.
enum { STREAM_TANGENT = 0, STREAM_INIT = 1, STREAM_SHUFFLE = 2, STREAM_ACTIVITY = 3,
       STREAM_LOWRANK_OUT = 4, STREAM_LOWRANK_IN = 5, STREAM_LOWRANK_BIAS = 6,
       STREAM_LOCAL_HEAD = 7 };

// Where the random direction lives (docs/design.md section 4): `weight` perturbs every parameter
// (v over the stage's weights); `activity` perturbs every linear layer's output, one tangent
// per sample, and never touches parameter tangents.
typedef enum { PERTURB_WEIGHT, PERTURB_ACTIVITY } Perturbation;

typedef struct {
    uint32_t seed;
    uint32_t stream;      // STREAM_*: independent sequences from one seed
    uint32_t step;        // optimizer step (iteration k)
    uint32_t microbatch;  // micro-batch within the step (global across replicas)
    uint32_t layer;       // global layer index
    uint32_t k;           // which of the K tangents
} TangentKey;

// The key of the training tangents of a step's (global) micro-batch in one layer.
static inline TangentKey tangent_key(uint32_t seed, long step, int microbatch, int layer) {
    return (TangentKey){.seed = seed, .stream = STREAM_TANGENT, .step = (uint32_t)step,
                        .microbatch = (uint32_t)microbatch, .layer = (uint32_t)layer};
}

// The key of the activity tangents of a micro-batch in one layer: a [rows, out] block, one
// row per sample, from their own stream (never equal to a weight tangent).
static inline TangentKey activity_key(uint32_t seed, long step, int microbatch, int layer) {
    TangentKey key = tangent_key(seed, step, microbatch, layer);
    key.stream = STREAM_ACTIVITY;
    return key;
}

// out[i] = v[first + i], i < n, with v ~ N(0, 1) elementwise.
void tangent_fill(TangentKey key, size_t first, size_t n, float *out);
// The same, returning sum_i x[i] * v[first + i] (in double) taken as the values are made.
double tangent_fill_dot(TangentKey key, size_t first, size_t n, float *out, const float *x);
// y[i] += alpha * v[first + i]
void tangent_axpy(TangentKey key, size_t first, size_t n, float alpha, float *y);
// sum_i x[i] * v[first + i], accumulated in double
double tangent_dot(TangentKey key, size_t first, size_t n, const float *x);
// y[r, j] += row_alpha[r] * v[r * width + j] for r < rows, j < width
void tangent_axpy_rows(TangentKey key, size_t rows, size_t width, const float *row_alpha,
                       float *y);

#endif
