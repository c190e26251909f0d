// Layers on the GPU: linear through cuBLAS (row-major data seen as column-major transposes),
// elementwise activations and bias sums as kernels, and the dispatch by layer kind (the GPT's
// sequence layers are in sequence_cuda.cu and attention_cuda.cu). Same shapes and contracts as
// layer.h.
#include "cuda_internal.h"
#include "activation_math.h"
#include "linear_shape.h"

// ---------------------------------------------------------------------------------------------
// Linear on every token (linear_shape.h): the branch h [rows, k] is read with the token's
// stride (ld = in), its output written with the output token's (ld = out); the carried x is a
// strided copy, and a residual layer's GEMM adds into it (beta = 1). Row-major y = h W^T is
// column-major y^T = W h^T, and row-major W [n, k] is column-major W^T [k, n]: hence
// op(A) = T, and the bias is per row of the column-major result (cuBLASLt's BIAS epilogue).

// The branch of y[r] += b for every block j: the bias of block j at b + j * b_stride.
__global__ void add_bias_kernel(float *y, size_t ld, const float *b, size_t b_stride, int rows,
                                int n, int blocks) {
    size_t count = (size_t)blocks * rows * n;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / n, k = row / rows;
        y[row * ld + i % n] += b[k * b_stride + i % n];
    }
}

// A linear layer's tail (a LoRA adapter's delta, layer_linear.c's add_tail): rows of `width`
// floats, y[r * ld_y + j] += x[r * ld_x + j].
__global__ void add_columns_kernel(float *y, size_t ld_y, const float *x, size_t ld_x, int width,
                                   size_t rows) {
    size_t n = rows * (size_t)width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / width, j = i % width;
        y[r * ld_y + j] += x[r * ld_x + j];
    }
}

void cuda_add_columns(const Backend *be, float *y, size_t ld_y, const float *x, size_t ld_x,
                      int width, size_t rows, const char *what) {
    size_t n = rows * (size_t)width;
    if (!n) return;
    add_columns_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(y, ld_y, x, ld_x, width, rows);
    launch_check(be, what);
}

// `batch` blocks of `rows` tokens, block j's output at y + j * rows * out:
// y's branch (+)= h W_j^T + b_j, W_j at W.p + j * W.stride, b_j at b + j * b_stride (b NULL:
// no bias, the tied head). With a bias, one cuBLASLt GEMM with the bias as its epilogue; where
// cuBLASLt has no kernel for the call, the plain GEMM, then the bias kernel.
static void linear_gemm(const Backend *be, const LinearShape *s, GemmArg W, const float *h,
                        float beta, float *y, int rows, int batch, const float *b,
                        size_t b_stride, const char *what) {
    GemmArg H = {h + s->c, s->in, 0};
    float *branch = y + s->out_offset;
    long long y_stride = (long long)rows * s->out;
    if (b && cuda_gemm_bias(be, what, CUBLAS_OP_T, CUBLAS_OP_N, s->n, rows, s->k, W, H, beta, branch,
                            s->out, y_stride, batch, b, (long long)b_stride))
        return;
    cuda_gemm(be, what, CUBLAS_OP_T, CUBLAS_OP_N, s->n, rows, s->k, W, H, beta, branch, s->out,
              y_stride, batch);
    if (!b) return;
    cuda_ctx(be)->unfused_bias++;
    size_t count = (size_t)batch * rows * s->n;
    add_bias_kernel<<<grid_for(count, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(
        branch, s->out, b, b_stride, rows, s->n, batch);
    launch_check(be, "linear: bias");
}

static const float *linear_bias(const Layer *L, const LinearShape *s, const float *p) {
    return L->no_bias ? NULL : p + (size_t)s->n * s->k;
}

// The weights W [n, k] as a GEMM operand, with their BF16 copy where the call has one
// (Layer.params16, bf16 runs: the BF16 GEMM reads it as it lies).
static GemmArg linear_weights(const Layer *L, const LinearShape *s, const float *p) {
    GemmArg W = {p, s->k, 0, L->params16};
    return W;
}

static void linear_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                           float *y, int B) {
    LinearShape s = linear_shape(L, B);
    GemmArg W = linear_weights(L, &s, p);
    copy_rows(be, y, s.out, x, s.in, s.c, s.rows, "linear: carry");
    linear_gemm(be, &s, W, x, L->residual ? 1.0f : 0.0f, y, s.rows, 1, linear_bias(L, &s, p), 0,
                "linear: GEMM");
    cuda_add_columns(be, y + s.out_offset, s.out, x + s.c + s.k, s.in, L->tail, s.rows, "linear: tail");
}

// ydot_k = xdot_k's carry (+) xdot_k W^T + x Wdot_k^T + bdot_k: one GEMM over all K blocks of
// xdot, one strided batched GEMM for the K parameter tangents (x shared: stride 0) with the
// K bias tangents as its epilogue.
static void linear_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                       const float *x, const float *xdot, float *y, float *ydot, int B, int K) {
    LinearShape s = linear_shape(L, B);
    linear_forward(be, L, p, x, y, B);
    if (xdot) {
        GemmArg W = linear_weights(L, &s, p);
        copy_rows(be, ydot, s.out, xdot, s.in, s.c, (size_t)K * s.rows, "linear jvp: carry");
        linear_gemm(be, &s, W, xdot, L->residual ? 1.0f : 0.0f, ydot, K * s.rows, 1, NULL, 0,
                    "linear jvp: GEMM");
        cuda_add_columns(be, ydot + s.out_offset, s.out, xdot + s.c + s.k, s.in, L->tail,
                         (size_t)K * s.rows, "linear jvp: tail");
    } else {
        zero_floats(be, ydot, (size_t)K * s.rows * s.out, "linear jvp: zero");
    }
    if (!pdot) return;
    GemmArg Wdot = {pdot, s.k, (long long)L->param_count};
    linear_gemm(be, &s, Wdot, x, 1.0f, ydot, s.rows, K, linear_bias(L, &s, pdot), L->param_count,
                "linear jvp: parameter tangents' GEMM");
}

// out[j] += sum of a[r, j] (b[r, j]) over rows, in two passes so that the whole GPU works on it
// (one block per 32 columns left an H100 mostly idle: 10% of a GPT-2 step): a block per 32
// columns and chunk of SUM_CHUNK rows, 16 row lanes walking the chunk's rows 16 apart, their
// partial sums added in lane order into the chunk's row of part; then each column's chunks
// added in chunk order. The same order every run.
enum { SUM_COLS = 32, SUM_LANES = 16, SUM_CHUNK = 256 };

__global__ void column_chunk_sums_kernel(const float *a, size_t lda, const float *b, size_t ldb,
                                         int rows, int n, float *part) {
    __shared__ float lanes[SUM_LANES][SUM_COLS + 1];
    int j = blockIdx.x * SUM_COLS + threadIdx.x, r0 = blockIdx.y * SUM_CHUNK;
    int r1 = min(rows, r0 + SUM_CHUNK);
    float s = 0.0f;
    for (int r = r0 + threadIdx.y; j < n && r < r1; r += SUM_LANES)
        s += b ? a[(size_t)r * lda + j] * b[(size_t)r * ldb + j] : a[(size_t)r * lda + j];
    lanes[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y || j >= n) return;
    float total = 0.0f;
    for (int l = 0; l < SUM_LANES; l++) total += lanes[l][threadIdx.x];
    part[(size_t)blockIdx.y * n + j] = total;
}

__global__ void column_add_chunks_kernel(const float *part, int chunks, int n, float *out) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    float total = 0.0f;
    for (int c = 0; c < chunks; c++) total += part[(size_t)c * n + j];
    out[j] += total;
}

void cuda_column_sums(const Backend *be, const float *a, size_t lda, const float *b, size_t ldb,
                      int rows, int n, float *out, const char *what) {
    int chunks = FG_MAX((rows + SUM_CHUNK - 1) / SUM_CHUNK, 1);
    float *part = (float *)cuda_workspace(be, WORK_SUMS, (size_t)chunks * n * sizeof(float));
    if (!part) return;  // cuda_workspace noted the failure
    cudaStream_t st = cuda_ctx(be)->stream;
    dim3 block(SUM_COLS, SUM_LANES), grid((n + SUM_COLS - 1) / SUM_COLS, chunks);
    column_chunk_sums_kernel<<<grid, block, 0, st>>>(a, lda, b, ldb, rows, n, part);
    launch_check(be, what);
    column_add_chunks_kernel<<<(n + 255) / 256, 256, 0, st>>>(part, chunks, n, out);
    launch_check(be, what);
}

// dx = [dy's carry (residual: all of dy), dy_branch W, dy_branch (the tail's)];  dW += dy_branch^T h;
// db += column sums of dy_branch. dx == NULL: W is not read (p may be NULL); dp == NULL: no
// parameter gradient.
static void linear_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                            const float *dy, float *dx, float *dp, int B) {
    LinearShape s = linear_shape(L, B);
    const float *dy_branch = dy + s.out_offset;
    if (dx) {
        copy_rows(be, dx, s.in, dy, s.out, s.c, s.rows, "linear backward: carry");
        GemmArg W = linear_weights(L, &s, p), G = {dy_branch, s.out, 0};
        cuda_gemm(be, "linear backward: dx", CUBLAS_OP_N, CUBLAS_OP_N, s.k, s.rows, s.n, W, G, 0.0f,
                  dx + s.c, s.in, 0, 1);
        copy_rows(be, dx + s.c + s.k, s.in, dy_branch, s.out, L->tail, s.rows, "linear backward: tail");
    }
    if (!dp) return;
    GemmArg H = {x + s.c, s.in, 0}, G = {dy_branch, s.out, 0};
    cuda_gemm(be, "linear backward: dW", CUBLAS_OP_N, CUBLAS_OP_T, s.k, s.n, s.rows, H, G, 1.0f, dp,
              s.k, 0, 1);
    // Not cuBLASLt's BGRADB epilogue on the dW GEMM: it stores the bias gradient where dp must
    // accumulate (a scratch vector and an add would remain), and cuBLAS documents no order for
    // its sum; the column sums' order is fixed (deterministic, docs/gpu.md).
    if (!L->no_bias)
        cuda_column_sums(be, dy_branch, s.out, NULL, 0, s.rows, s.n, dp + (size_t)s.n * s.k, "linear backward: db");
}

// ---------------------------------------------------------------------------------------------
// Activations: y = f(x), ydot = f'(x) xdot, dx = f'(x) dy, with f and f' from
// activation_math.h (the CPU's own). With carry (layer.h) the first `carry` floats of each
// token of `width` pass through: f = identity there, f' = 1 (an exact product).

enum { ACT_FORWARD, ACT_JVP, ACT_BACKWARD };

// One kernel per activation and direction; `what` picks: y = f(x); ydot[k] = f'(x) xdot[k]
// (xdot NULL: 0); out = f'(x) in.
template <bool GELU, int WHAT>
__global__ void activation_kernel(const float *x, const float *in, float *out, size_t n, int K,
                                  int width, int carry) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float xi = x[i];
        bool pass = (int)(i % width) < carry;
        if (WHAT == ACT_FORWARD) {
            out[i] = pass ? xi : GELU ? fg_gelu(xi) : fg_relu(xi);
        } else {
            float g = pass ? 1.0f : GELU ? fg_gelu_grad(xi) : fg_relu_grad(xi);
            for (int k = 0; k < K; k++) out[k * n + i] = in ? g * in[k * n + i] : 0.0f;
        }
    }
}

template <bool GELU, int WHAT>
static void activation(const Backend *be, const Layer *L, const float *x, const float *in,
                       float *out, int B, int K) {
    size_t n = (size_t)B * L->in;
    activation_kernel<GELU, WHAT><<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(
        x, in, out, n, K, layer_in_token(L), L->carry);
    launch_check(be, GELU ? "gelu" : "relu");
}

template <bool GELU>
static void activation_jvp(const Backend *be, const Layer *L, const float *x, const float *xdot,
                           float *y, float *ydot, int B, int K) {
    activation<GELU, ACT_FORWARD>(be, L, x, NULL, y, B, 0);
    activation<GELU, ACT_JVP>(be, L, x, xdot, ydot, B, K);
}

// ---------------------------------------------------------------------------------------------
// Dispatch by layer kind (the Backend's forward, jvp, backward).

void cuda_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y, int B) {
    switch (L->kind) {
    case LAYER_LINEAR: linear_forward(be, L, p, x, y, B); return;
    case LAYER_RELU: activation<false, ACT_FORWARD>(be, L, x, NULL, y, B, 0); return;
    case LAYER_GELU: activation<true, ACT_FORWARD>(be, L, x, NULL, y, B, 0); return;
    case LAYER_EMBEDDING: cuda_embedding_forward(be, L, p, x, y, B); return;
    case LAYER_LAYERNORM: cuda_norm_forward(be, L, p, x, y, B); return;
    case LAYER_ATTENTION: cuda_attention_forward(be, L, x, y, B); return;
    case LAYER_RMSNORM: cuda_rmsnorm_forward(be, L, p, x, y, B); return;
    case LAYER_QKNORM: cuda_qknorm_forward(be, L, p, x, y, B); return;
    case LAYER_ROPE: cuda_rope_forward(be, L, x, y, B); return;
    case LAYER_SWIGLU: cuda_swiglu_forward(be, L, x, y, B); return;
    case LAYER_LORA: cuda_lora_forward(be, L, p, x, y, B); return;
    case LAYER_HEAD_LOSS: cuda_note(be, "forward", "a fused head takes labels: head_forward"); return;
    default: cuda_note(be, "forward", "unknown layer kind");
    }
}

// Every kind's jvp writes y too (layer.h).
void cuda_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
              const float *x, const float *xdot, float *y, float *ydot, int B, int K) {
    switch (L->kind) {
    case LAYER_LINEAR: linear_jvp(be, L, p, pdot, x, xdot, y, ydot, B, K); return;
    case LAYER_RELU: activation_jvp<false>(be, L, x, xdot, y, ydot, B, K); return;
    case LAYER_GELU: activation_jvp<true>(be, L, x, xdot, y, ydot, B, K); return;
    case LAYER_EMBEDDING:
        cuda_embedding_forward(be, L, p, x, y, B);
        cuda_embedding_jvp(be, L, pdot, x, ydot, B, K);
        return;
    case LAYER_LAYERNORM:
        cuda_norm_forward(be, L, p, x, y, B);
        cuda_norm_jvp(be, L, p, pdot, x, xdot, ydot, B, K);
        return;
    case LAYER_ATTENTION:
        cuda_attention_forward(be, L, x, y, B);
        cuda_attention_jvp(be, L, x, xdot, ydot, B, K);
        return;
    case LAYER_RMSNORM:
        cuda_rmsnorm_forward(be, L, p, x, y, B);
        cuda_rmsnorm_jvp(be, L, p, pdot, x, xdot, ydot, B, K);
        return;
    case LAYER_QKNORM:
        cuda_qknorm_forward(be, L, p, x, y, B);
        cuda_qknorm_jvp(be, L, p, pdot, x, xdot, ydot, B, K);
        return;
    case LAYER_ROPE:
        cuda_rope_forward(be, L, x, y, B);
        cuda_rope_jvp(be, L, xdot, ydot, B, K);
        return;
    case LAYER_SWIGLU:
        cuda_swiglu_forward(be, L, x, y, B);
        cuda_swiglu_jvp(be, L, x, xdot, ydot, B, K);
        return;
    case LAYER_LORA: cuda_lora_jvp(be, L, p, pdot, x, xdot, y, ydot, B, K); return;
    case LAYER_HEAD_LOSS: cuda_note(be, "jvp", "a fused head takes labels: head_jvp"); return;
    default: cuda_note(be, "jvp", "unknown layer kind");
    }
}

void cuda_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                   const float *dy, float *dx, float *dp, int B) {
    switch (L->kind) {
    case LAYER_LINEAR: linear_backward(be, L, p, x, dy, dx, dp, B); return;
    case LAYER_HEAD_LOSS: cuda_head_backward(be, L, p, x, dy, dx, dp, B); return;  // dy: its records
    case LAYER_RELU: if (dx) activation<false, ACT_BACKWARD>(be, L, x, dy, dx, B, 1); return;
    case LAYER_GELU: if (dx) activation<true, ACT_BACKWARD>(be, L, x, dy, dx, B, 1); return;
    case LAYER_EMBEDDING: cuda_embedding_backward(be, L, x, dy, dx, dp, B); return;
    case LAYER_LAYERNORM: cuda_norm_backward(be, L, p, x, dy, dx, dp, B); return;
    case LAYER_ATTENTION: if (dx) cuda_attention_backward(be, L, x, dy, dx, B); return;
    case LAYER_RMSNORM: cuda_rmsnorm_backward(be, L, p, x, dy, dx, dp, B); return;
    case LAYER_QKNORM: cuda_qknorm_backward(be, L, p, x, dy, dx, dp, B); return;
    case LAYER_ROPE: if (dx) cuda_rope_backward(be, L, dy, dx, B); return;
    case LAYER_SWIGLU: if (dx) cuda_swiglu_backward(be, L, x, dy, dx, B); return;
    case LAYER_LORA: cuda_lora_backward(be, L, p, x, dy, dx, dp, B); return;
    default: cuda_note(be, "backward", "unknown layer kind");
    }
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B and A swap places.
void cuda_matmul(const Backend *be, int trans_a, int trans_b, int m, int n, int k, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    cublas_check(be, cublasSgemm(cuda_ctx(be)->blas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, ldb, A,
                                 lda, &beta, C, ldc),
                 "matmul: cublasSgemm");
}
