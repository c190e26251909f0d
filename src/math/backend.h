// Where a stage's numbers live and what computes on them: the CPU (backend_cpu.c, the
// reference, OpenBLAS) or a GPU (cuda/backend_cuda.cu: cuBLAS and own kernels).
//
// Stage and pipeline touch their buffers only through these functions. Buffers from alloc()
// belong to the backend (device memory on a GPU) and reach the host only through download();
// host-side results (losses, directional derivatives, dot products) come back as return
// values or through explicit host arrays. The shapes are those of layer.h and tangent.h.
// Calls may be queued (a GPU stream); sync() waits for them and reports a failure among them.
#ifndef FGPIPE_BACKEND_H
#define FGPIPE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "head_loss.h"
#include "layer.h"
#include "optimizer.h"
#include "tangent.h"

// What a backend's GEMMs compute in (config key `precision`): FP32 everywhere, TF32 tensor
// cores (GPU only), or BF16 inputs with FP32 accumulation (the GPU; the CPU where it has
// AVX512-BF16, gemm.h). A bf16 run on either backend also keeps a BF16 copy of the weights for
// its GEMMs and BF16 activations, tangents and adjoints between layers, made with the BF16 ops
// below (docs/core.md, "BF16 on the CPU"; docs/gpu.md, "precision"); master weights, optimizer
// state and gradients stay FP32.
typedef enum { PRECISION_FP32, PRECISION_TF32, PRECISION_BF16 } Precision;

// How Backend.narrow16 rounds and runs (bits to or): BF16_KEEP_DENORMALS rounds denormals
// rather than flushing them (bf16_round_keep: a base kept in BF16 goes back to its own bits);
// BF16_WEIGHTS marks a layer's weights, one long stretch that the CPU converts with its threads
// (values between layers are converted serially there: on a shared machine a parallel region's
// barrier can cost more than it saves). Neither changes which bits a value rounds to where the
// other is set.
enum { BF16_KEEP_DENORMALS = 1, BF16_WEIGHTS = 2 };

// A device backend's two streams: the compute stream runs every op above in order; the copy
// stream moves a streamed stage's layers beside it (device_lanes.h).
enum { BACKEND_COMPUTE_STREAM = 0, BACKEND_COPY_STREAM = 1 };

typedef struct Backend Backend;
struct Backend {
    const char *name;  // "cpu", "cuda"
    int on_device;     // 1: buffers are not host memory
    void *ctx;

    // Memory. alloc returns zeroed memory and aborts when out of memory, like fg_alloc_*.
    void *(*alloc)(const Backend *be, size_t bytes);
    void (*free)(const Backend *be, void *buf);
    void (*upload)(const Backend *be, void *dst, const void *host_src, size_t bytes);
    void (*download)(const Backend *be, void *host_dst, const void *src, size_t bytes);
    void (*copy)(const Backend *be, void *dst, const void *src, size_t bytes);
    void (*zero)(const Backend *be, void *dst, size_t bytes);

    // A device's page-locked host memory and its copy stream (NULL on the CPU, whose slots are
    // its memory). host_alloc: 4 KiB-aligned host memory the device copies at the link's speed
    // without the host waiting; copy_async: bytes between it and device memory on the copy
    // stream. A fence marks the point a stream has reached (fence_mark); the other stream
    // (fence_wait) or the host (fence_sync: FG_OK or the error of a queued op) waits for it.
    void *(*host_alloc)(const Backend *be, size_t bytes);
    void (*host_free)(const Backend *be, void *p);
    void (*copy_async)(const Backend *be, void *dst, const void *src, size_t bytes, int to_device);
    void *(*fence_new)(const Backend *be);
    void (*fence_free)(const Backend *be, void *fence);
    void (*fence_mark)(const Backend *be, void *fence, int stream);
    void (*fence_wait)(const Backend *be, void *fence, int stream);
    int (*fence_sync)(const Backend *be, void *fence, FgError *err);

    // BF16 numbers in this backend's memory, rounded by bf16_math.h's one formula on every
    // backend (the same bits): narrow16, y[i] = x[i]'s BF16 bits (bf16_round: denormals to a
    // signed zero; `how`: BF16_KEEP_DENORMALS, BF16_WEIGHTS, above); widen16, x[i] = the float
    // of h[i] (exact); round16, x's n floats rounded to BF16 values in place, the count of those
    // not finite added to *not_finite (backend memory, a double; NULL: not counted), so a device
    // counts without the host waiting: the caller downloads the count when it reads its other
    // results. x and y, h and x do not overlap.
    void (*narrow16)(const Backend *be, const float *x, uint16_t *y, size_t n, int how);
    void (*widen16)(const Backend *be, const uint16_t *h, float *x, size_t n);
    void (*round16)(const Backend *be, float *x, size_t n, double *not_finite);

    // Vectors: y = a x (y may be x); y += a x; a . b accumulated in double.
    void (*scale)(const Backend *be, float *y, float a, const float *x, size_t n);
    void (*axpy)(const Backend *be, float *y, float a, const float *x, size_t n);
    double (*dot)(const Backend *be, const float *a, const float *b, size_t n);

    // C [m, n] = alpha op(A) op(B) + beta C, row-major, with op(A) [m, k] (A stored [k, m] when
    // trans_a) and op(B) [k, n] (B stored [n, k] when trans_b); lda, ldb, ldc: floats between
    // the stored rows (a token's branch inside a wider row): low-rank tangents' GEMMs.
    void (*matmul)(const Backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc);

    // Layers: the LayerOps of layer.h, on this backend's memory.
    void (*forward)(const Backend *be, const Layer *L, const float *p, const float *x, float *y,
                    int B);
    void (*jvp)(const Backend *be, const Layer *L, const float *p, const float *pdot,
                const float *x, const float *xdot, float *y, float *ydot, int B, int K);
    void (*backward)(const Backend *be, const Layer *L, const float *p, const float *x,
                     const float *dy, float *dx, float *dp, int B);

    // Softmax cross-entropy (layer.h): logits, zdot, dz and labels in backend memory; the
    // loss, d [K] and *correct on the host.
    float (*loss_forward)(const Backend *be, const float *logits, const Label *labels, int B,
                          LogitRows C, int *correct);
    // loss_jvp per sample (activity perturbation): d_rows[k*B + r] (host) = the directional
    // derivative of row r's own loss along tangent block k.
    float (*loss_jvp_rows)(const Backend *be, const float *logits, const float *zdot,
                           const Label *labels, int B, LogitRows C, int K, float *d_rows);
    float (*loss_jvp)(const Backend *be, const float *logits, const float *zdot,
                      const Label *labels, int B, LogitRows C, int K, float *d);
    float (*loss_backward)(const Backend *be, const float *logits, const Label *labels, int B,
                           LogitRows C, float *dz);
    // The head fused with the loss (head_loss.h; its backward is the layer's): W, x, xdot,
    // Wdot, labels and rec in backend memory, the loss, *correct and d [K] on the host. NULL
    // where the backend has none (the run then keeps the head unfused).
    float (*head_forward)(const Backend *be, const Layer *L, const float *W, const float *x,
                          const Label *labels, int B, float weight, float *rec, int *correct);
    // t: the logits' tangents besides xdot's (head_loss.h; with activity ones, d per row).
    float (*head_jvp)(const Backend *be, const Layer *L, const float *W, const float *x,
                      const float *xdot, const Label *labels, int B, int K, float weight,
                      const HeadTangents *t, float *rec, float *d);
    // head_loss_activity_grad (coeff on the host, x and dW in backend memory).
    void (*head_activity_grad)(const Backend *be, const Layer *L, TangentKey key, int K, int n_mb,
                               int B, const float *coeff, const float *x, float *dW);

    // Tangents of one tensor of n elements (tangent.h), for micro-batches key.microbatch + b,
    // b < n_mb, and k < K, in the order (b, k): coeff and dots are host arrays [n_mb * K].
    // out = v; with ref (else NULL), returns ref . v, taken while the values are at hand.
    double (*tangent_fill)(const Backend *be, TangentKey key, size_t n, float *out,
                           const float *ref);
    // y += sum over (b, k) of coeff[b*K + k] v_{b,k}
    void (*tangent_axpy)(const Backend *be, TangentKey key, int n_mb, int K, const float *coeff,
                         size_t n, float *y);
    // dots[b*K + k] += v_{b,k} . x
    void (*tangent_dot)(const Backend *be, TangentKey key, int n_mb, int K, size_t n,
                        const float *x, double *dots);
    // Activity tangents, one row per sample (or token): for k < K, y + k * y_stride +=
    // diag(coeff_k) v_k with v_k tangent k of key as [rows, width], coeff_k = coeff + k * rows
    // (host), or 1 when coeff is NULL; y's rows are ld floats apart (ld >= width). y_stride 0
    // adds every k into one y, in order of k.
    void (*tangent_add_rows)(const Backend *be, TangentKey key, int K, int rows, int width,
                             const float *coeff, float *y, size_t y_stride, size_t ld);

    // optimizer.h's optimizer_step on this backend's memory.
    void (*optimizer_step)(const Backend *be, const OptimizerConfig *c, long step, double lr,
                           float *params, const float *from, const float *g, float g_scale,
                           float *state, size_t state_stride, size_t n);

    // Waits for queued work; FG_OK, or an error naming what failed.
    int (*sync)(const Backend *be, FgError *err);
};

// The CPU backend: host memory, the functions of layer.h, tangent.h and optimizer.h; FP32
// (its BF16 ops round with bf16.h's scalar loop).
extern const Backend backend_cpu;
// backend_cpu with its GEMMs at `precision` (fp32 or bf16; bf16 refused by name where the CPU
// lacks AVX512-BF16, and its BF16 ops then round with the vector loop: the same bits);
// backend_cpu_destroy frees what it made.
int backend_cpu_create(int precision, Backend *out, FgError *err);
void backend_cpu_destroy(Backend *be);

static inline float *backend_alloc_floats(const Backend *be, size_t n) {
    return (float *)be->alloc(be, n * sizeof(float));
}

#endif
