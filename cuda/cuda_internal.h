// Shared by the CUDA backend's files: the context behind Backend.ctx, error recording, and
// the kernels' entry points that backend_cuda.cu puts into the Backend table.
#ifndef FGPIPE_CUDA_INTERNAL_H
#define FGPIPE_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

extern "C" {
#include "backend.h"
}
#include "attention_math.h"

// Scratch buffers of the layers, one per use, so that no two live uses share one.
enum { WORK_ROWS, WORK_GEMM_A, WORK_GEMM_B, WORK_TEMP, WORK_HEAD_Z, WORK_HEAD_ZD, WORK_HEAD_ROWS,
       WORK_SUMS, WORK_ATT_P, WORK_ATT_D, WORK_ATT_P16, WORK_ATT_D16, WORK_TOKENS, CUDA_WORK_SLOTS };

// One way to compute causal attention (after the carried columns): the tiled FP32 kernels
// (attention_cuda.cu) or scores through tensor-core GEMMs (attention_gemm.cu).
typedef struct {
    void (*forward)(const Backend *be, const AttnShape *s, const float *x, float *y);
    void (*jvp)(const Backend *be, const AttnShape *s, const float *x, const float *xdot, float *ydot, int K);
    void (*backward)(const Backend *be, const AttnShape *s, const float *x, const float *dy, float *dx);
} AttentionKernels;
extern const AttentionKernels attention_tiled, attention_gemm;

typedef struct {
    int device;
    cudaStream_t stream;      // all compute of the stage, in order
    cudaStream_t copy_stream; // a streamed stage's layers to and from page-locked host slots
    cublasHandle_t blas;
    cublasLtHandle_t lt;      // the GEMMs with a fused bias (gemm_lt.cu)
    void *lt_work;            // cuBLASLt's workspace, owned here: no hidden per-stream one
    size_t lt_work_bytes;
    long unfused_bias;        // GEMMs with a bias cuBLASLt had no kernel for (a count for tests)
    double *partial;          // reductions: per-block partial sums, summed on the host
    double *host_partial;     // pinned mirror of partial
    size_t partial_cap;       // doubles
    float *coeff;             // tangent coefficients [n_mb * K] on the device
    size_t coeff_cap;
    void *work[CUDA_WORK_SLOTS];       // scratch of the layers (cuda_workspace)
    size_t work_cap[CUDA_WORK_SLOTS];  // bytes
    int precision;            // Precision (config.h): the GEMMs' inputs, FP32 / TF32 / BF16
    const AttentionKernels *attention;  // chosen with the precision
    char error[256];          // the first failure since the last sync, "" when none
} CudaCtx;

static inline CudaCtx *cuda_ctx(const Backend *be) { return (CudaCtx *)be->ctx; }

// Records the first failure (the op it happened in and CUDA's words for it); sync reports it.
void cuda_note(const Backend *be, const char *what, const char *why);
static inline void cuda_check(const Backend *be, cudaError_t e, const char *what) {
    if (e != cudaSuccess) cuda_note(be, what, cudaGetErrorString(e));
}
static inline void cublas_check(const Backend *be, cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) cuda_note(be, what, cublasGetStatusString(s));
}
static inline void cublaslt_check(const Backend *be, cublasStatus_t s, const char *what) {
    if (s != CUBLAS_STATUS_SUCCESS) cuda_note(be, what, cublasLtGetStatusString(s));
}
// After a kernel launch: a bad launch configuration shows up here, a fault at the next sync.
static inline void launch_check(const Backend *be, const char *what) {
    cuda_check(be, cudaGetLastError(), what);
}

// Grid for n items of `threads` per block, capped (kernels loop over the rest).
static inline unsigned grid_for(size_t n, unsigned threads, unsigned cap) {
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g < 1 ? 1 : g > cap ? cap : g);
}

// A device buffer of at least n doubles for partial sums, and the pinned host mirror.
double *cuda_partials(const Backend *be, size_t n);
// Copies the first n partials to the host (waits for the stream) and returns them.
const double *cuda_download_partials(const Backend *be, size_t n);
// Copies n host floats into a device scratch buffer (stream-ordered) and returns it.
const float *cuda_upload_coeff(const Backend *be, const float *host, size_t n);

// At least `bytes` of scratch in slot `slot` (grows, never shrinks: grown on a model's first step).
void *cuda_workspace(const Backend *be, int slot, size_t bytes);

// rows of `width` floats from src (rows src_ld floats apart) to dst (dst_ld apart), queued.
static inline void copy_rows(const Backend *be, float *dst, size_t dst_ld, const float *src,
                             size_t src_ld, size_t width, size_t rows, const char *what) {
    if (!width || !rows) return;
    cuda_check(be, cudaMemcpy2DAsync(dst, dst_ld * sizeof(float), src, src_ld * sizeof(float),
                                     width * sizeof(float), rows, cudaMemcpyDeviceToDevice,
                                     cuda_ctx(be)->stream), what);
}

// n floats of 0 at dst, queued (a jvp's tangent output without any tangent in).
static inline void zero_floats(const Backend *be, float *dst, size_t n, const char *what) {
    cuda_check(be, cudaMemsetAsync(dst, 0, n * sizeof(float), cuda_ctx(be)->stream), what);
}

// Warp-wide sum and max by butterfly: every lane ends with the same bits, in a fixed order.
static __device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// gemm_cuda.cu: one operand of a GEMM, column-major as cuBLAS sees it: ld, and the stride
// between the matrices of a batch (0: one matrix shared by the batch). p16: the same matrix in
// BF16 (the same ld and stride: a layer's weights copy, Layer.params16), which a BF16 GEMM reads
// where it lies instead of rounding p per call; NULL: none (every other operand).
typedef struct {
    const float *p;
    int ld;
    long long stride;
    const uint16_t *p16;
} GemmArg;
// The same in bf16 (gemm_cuda.cu's converted operands and BF16 copies), or of either type
// (gemm_lt.cu).
typedef struct {
    const void *p;
    int ld;
    long long stride;
} GemmArg16;
// Both operands of a GEMM in bf16: an operand with a BF16 copy (p16) as it lies, any other
// rounded (bf16_math.h's bf16_round, the CPU's) into the scratch slots WORK_GEMM_A and
// WORK_GEMM_B, packed (ld = rows of the stored matrix), one copy of an operand the batch shares.
void cuda_gemm_operands_bf16(const Backend *be, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int n, int k, GemmArg A, GemmArg B, int batch, GemmArg16 *a,
                             GemmArg16 *b);
// C = op(A) op(B) + beta C, [m, n] column-major, for `batch` matrices, FP32 in and out, the
// products at the backend's precision. `what` names the op in errors.
void cuda_gemm(const Backend *be, const char *what, cublasOperation_t ta, cublasOperation_t tb,
               int m, int n, int k, GemmArg A, GemmArg B, float beta, float *C, int ldc,
               long long stride_c, int batch);
// The same with C = alpha op(A) op(B) + beta C (a LoRA adapter's scale, lora_cuda.cu).
void cuda_gemm_scaled(const Backend *be, const char *what, cublasOperation_t ta,
                      cublasOperation_t tb, int m, int n, int k, float alpha, GemmArg A, GemmArg B,
                      float beta, float *C, int ldc, long long stride_c, int batch);
// gemm_lt.cu: the same plus bias[i] on row i of every C (matrix j's bias at bias + j *
// bias_stride), the bias fused as cuBLASLt's BIAS epilogue. Returns 0, having queued nothing,
// when cuBLASLt has no kernel for the call (the caller then runs cuda_gemm and a bias kernel).
int cuda_gemm_bias(const Backend *be, const char *what, cublasOperation_t ta, cublasOperation_t tb,
                   int m, int n, int k, GemmArg A, GemmArg B, float beta, float *C, int ldc,
                   long long stride_c, int batch, const float *bias, long long bias_stride);

// layers_cuda.cu
// out[j] += sum over rows r, in a fixed order, of a[r * lda + j] (times b[r * ldb + j] when b).
void cuda_column_sums(const Backend *be, const float *a, size_t lda, const float *b, size_t ldb,
                      int rows, int n, float *out, const char *what);
void cuda_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y,
                  int B);
void cuda_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
              const float *x, const float *xdot, float *y, float *ydot, int B, int K);
void cuda_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                   const float *dy, float *dx, float *dp, int B);
void cuda_matmul(const Backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
// sequence_cuda.cu: the GPT's embedding and LayerNorm; attention_cuda.cu: causal attention.
void cuda_embedding_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                            float *y, int B);
void cuda_embedding_jvp(const Backend *be, const Layer *L, const float *pdot, const float *x,
                        float *ydot, int B, int K);
void cuda_embedding_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                             float *dx, float *dp, int B);
void cuda_norm_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y,
                       int B);
void cuda_norm_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                   const float *x, const float *xdot, float *ydot, int B, int K);
void cuda_norm_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                        const float *dy, float *dx, float *dp, int B);
// llama_cuda.cu: Llama's RMSNorm, q/k norms, rotary embedding and SwiGLU.
void cuda_rmsnorm_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                          float *y, int B);
void cuda_rmsnorm_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                      const float *x, const float *xdot, float *ydot, int B, int K);
void cuda_rmsnorm_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                           const float *dy, float *dx, float *dp, int B);
void cuda_qknorm_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                         float *y, int B);
void cuda_qknorm_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                     const float *x, const float *xdot, float *ydot, int B, int K);
void cuda_qknorm_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                          const float *dy, float *dx, float *dp, int B);
void cuda_rope_forward(const Backend *be, const Layer *L, const float *x, float *y, int B);
void cuda_rope_jvp(const Backend *be, const Layer *L, const float *xdot, float *ydot, int B, int K);
void cuda_rope_backward(const Backend *be, const Layer *L, const float *dy, float *dx, int B);
void cuda_swiglu_forward(const Backend *be, const Layer *L, const float *x, float *y, int B);
void cuda_swiglu_jvp(const Backend *be, const Layer *L, const float *x, const float *xdot,
                     float *ydot, int B, int K);
void cuda_swiglu_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                          float *dx, int B);
// lora_cuda.cu: a LoRA adapter (layer_lora.c).
void cuda_lora_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y,
                       int B);
void cuda_lora_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                   const float *x, const float *xdot, float *y, float *ydot, int B, int K);
void cuda_lora_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                        const float *dy, float *dx, float *dp, int B);
// layers_cuda.cu: rows of `width` floats, y[r * ld_y + j] += x[r * ld_x + j] (a linear layer's tail).
void cuda_add_columns(const Backend *be, float *y, size_t ld_y, const float *x, size_t ld_x,
                      int width, size_t rows, const char *what);
void cuda_attention_forward(const Backend *be, const Layer *L, const float *x, float *y, int B);
void cuda_attention_jvp(const Backend *be, const Layer *L, const float *x, const float *xdot,
                        float *ydot, int B, int K);
void cuda_attention_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                             float *dx, int B);
// loss_cuda.cu
float cuda_loss_forward(const Backend *be, const float *logits, const Label *labels, int B,
                        LogitRows C, int *correct);
float cuda_loss_jvp(const Backend *be, const float *logits, const float *zdot,
                    const Label *labels, int B, LogitRows C, int K, float *d);
float cuda_loss_jvp_rows(const Backend *be, const float *logits, const float *zdot,
                         const Label *labels, int B, LogitRows C, int K, float *d_rows);
float cuda_loss_backward(const Backend *be, const float *logits, const Label *labels, int B,
                         LogitRows C, float *dz);
// head_cuda.cu: the head fused with the loss (head_loss.h)
float cuda_head_forward(const Backend *be, const Layer *L, const float *W, const float *x,
                        const Label *labels, int B, float weight, float *rec, int *correct);
float cuda_head_jvp(const Backend *be, const Layer *L, const float *W, const float *x,
                    const float *xdot, const Label *labels, int B, int K, float weight,
                    const HeadTangents *t, float *rec, float *d);
void cuda_head_backward(const Backend *be, const Layer *L, const float *W, const float *x,
                        const float *rec, float *dx, float *dW, int B);
void cuda_head_activity_grad(const Backend *be, const Layer *L, TangentKey key, int K, int n_mb,
                             int B, const float *coeff, const float *x, float *dW);
// tangent_cuda.cu
double cuda_tangent_fill(const Backend *be, TangentKey key, size_t n, float *out, const float *ref);
void cuda_tangent_axpy(const Backend *be, TangentKey key, int n_mb, int K, const float *coeff,
                       size_t n, float *y);
void cuda_tangent_dot(const Backend *be, TangentKey key, int n_mb, int K, size_t n,
                      const float *x, double *dots);
void cuda_tangent_add_rows(const Backend *be, TangentKey key, int K, int rows, int width,
                           const float *coeff, float *y, size_t y_stride, size_t ld);
// Columns [j0, j0 + nb) of the rows of `width` elements: y + k*y_stride [rows, nb] +=
// coeff[k*coeff_rows + r / coeff_div] u_k (device coeff, or NULL: 1), k in order.
void cuda_tangent_add_columns(const Backend *be, TangentKey key, int K, int rows, size_t width,
                              int j0, int nb, const float *coeff, int coeff_rows, int coeff_div,
                              float *y, size_t y_stride);
// bf16_cuda.cu: Backend.narrow16, widen16, round16.
void cuda_narrow16(const Backend *be, const float *x, uint16_t *y, size_t n, int how);
void cuda_widen16(const Backend *be, const uint16_t *h, float *x, size_t n);
void cuda_round16(const Backend *be, float *x, size_t n, double *not_finite);
// vector_cuda.cu
void cuda_scale(const Backend *be, float *y, float a, const float *x, size_t n);
void cuda_axpy(const Backend *be, float *y, float a, const float *x, size_t n);
double cuda_dot(const Backend *be, const float *a, const float *b, size_t n);
void cuda_optimizer_step(const Backend *be, const OptimizerConfig *c, long step, double lr,
                         float *params, const float *from, const float *g, float g_scale,
                         float *state, size_t state_stride, size_t n);

#endif
