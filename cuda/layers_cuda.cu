// Layers on the GPU: linear through cuBLAS (row-major data seen as column-major transposes),
// elementwise activations and bias sums as kernels. Same shapes and contracts as layer.h.
#include "cuda_internal.h"
#include "activation_math.h"

// ---------------------------------------------------------------------------------------------
// Linear: y = x W^T + b with W [out, in] row-major, then b [out].

// y [rows, out] = x [rows, in] W^T (+ beta y). Row-major y is column-major y^T = W x^T, and
// row-major W [out, in] is column-major W^T [in, out]: hence op(A) = T.
static void matmul_wt(const Backend *be, const float *x, const float *W, float *y, int rows,
                      int in, int out, float beta) {
    const float one = 1.0f;
    cublas_check(be, cublasSgemm(cuda_ctx(be)->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &one,
                                 W, in, x, in, &beta, y, out), "linear: cublasSgemm");
}

// y[r, j] += b[j] for every block k: the bias of block k at b + k * b_stride.
__global__ void add_bias_kernel(float *y, const float *b, size_t b_stride, int rows, int out,
                                int blocks) {
    size_t n = (size_t)blocks * rows * out;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t k = i / ((size_t)rows * out);
        y[i] += b[k * b_stride + i % out];
    }
}

static void add_bias(const Backend *be, float *y, const float *b, size_t b_stride, int rows,
                     int out, int blocks) {
    size_t n = (size_t)blocks * rows * out;
    add_bias_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(y, b, b_stride, rows, out, blocks);
    launch_check(be, "linear: bias");
}

static void linear_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                           float *y, int B) {
    matmul_wt(be, x, p, y, B, L->in, L->out, 0.0f);
    add_bias(be, y, p + (size_t)L->in * L->out, 0, B, L->out, 1);
}

// ydot_k = xdot_k W^T + x Wdot_k^T + bdot_k: one GEMM over all K blocks of xdot, one strided
// batched GEMM for the K parameter tangents (x shared: stride 0), one bias kernel.
static void linear_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                       const float *x, const float *xdot, float *y, float *ydot, int B, int K) {
    int in = L->in, out = L->out;
    linear_forward(be, L, p, x, y, B);
    if (xdot) matmul_wt(be, xdot, p, ydot, K * B, in, out, 0.0f);
    if (!pdot) {
        if (!xdot) cuda_check(be, cudaMemsetAsync(ydot, 0, (size_t)K * B * out * sizeof(float), cuda_ctx(be)->stream), "linear jvp: zero");
        return;
    }
    const float one = 1.0f, beta = xdot ? 1.0f : 0.0f;
    cublas_check(be, cublasSgemmStridedBatched(cuda_ctx(be)->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, B, in,
                                               &one, pdot, in, (long long)L->param_count, x, in, 0,
                                               &beta, ydot, out, (long long)B * out, K),
                 "linear jvp: cublasSgemmStridedBatched");
    add_bias(be, ydot, pdot + (size_t)in * out, L->param_count, B, out, K);
}

// db[j] += sum over rows of dy[r, j]: one thread per column, rows walked in order.
__global__ void column_sums_kernel(const float *dy, float *db, int rows, int out) {
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out) return;
    float s = 0.0f;
    for (int r = 0; r < rows; r++) s += dy[(size_t)r * out + j];
    db[j] += s;
}

// dx = dy W;  dW += dy^T x;  db += column sums of dy. dx == NULL: W is not read (p may be
// NULL); dp == NULL: no parameter gradient.
static void linear_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                            const float *dy, float *dx, float *dp, int B) {
    int in = L->in, out = L->out;
    cublasHandle_t h = cuda_ctx(be)->blas;
    const float one = 1.0f, zero = 0.0f;
    if (dx)
        cublas_check(be, cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, B, out, &one, p, in, dy, out,
                                     &zero, dx, in), "linear backward: dx");
    if (!dp) return;
    cublas_check(be, cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, B, &one, x, in, dy, out, &one,
                                 dp, in), "linear backward: dW");
    column_sums_kernel<<<(out + 255) / 256, 256, 0, cuda_ctx(be)->stream>>>(dy, dp + (size_t)in * out, B, out);
    launch_check(be, "linear backward: db");
}

// ---------------------------------------------------------------------------------------------
// Activations: y = f(x), ydot = f'(x) xdot, dx = f'(x) dy, with f and f' from
// activation_math.h (the CPU's own).

enum { ACT_FORWARD, ACT_JVP, ACT_BACKWARD };

// One kernel per activation and direction; `what` picks: y = f(x); ydot[k] = f'(x) xdot[k]
// (xdot NULL: 0); out = f'(x) in.
template <bool GELU, int WHAT>
__global__ void activation_kernel(const float *x, const float *in, float *out, size_t n, int K) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float xi = x[i];
        if (WHAT == ACT_FORWARD) {
            out[i] = GELU ? fg_gelu(xi) : fg_relu(xi);
        } else {
            float g = GELU ? fg_gelu_grad(xi) : fg_relu_grad(xi);
            for (int k = 0; k < K; k++) out[k * n + i] = in ? g * in[k * n + i] : 0.0f;
        }
    }
}

template <bool GELU, int WHAT>
static void activation(const Backend *be, const float *x, const float *in, float *out, size_t n, int K) {
    activation_kernel<GELU, WHAT><<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(x, in, out, n, K);
    launch_check(be, GELU ? "gelu" : "relu");
}

// ---------------------------------------------------------------------------------------------
// Dispatch by layer kind (the Backend's forward, jvp, backward). The GPT's sequence layers
// (tokens, carried residual streams, a head without bias: layer.h) are CPU-only for now.

static bool unsupported(const Backend *be, const Layer *L, const char *what) {
    if (L->tokens <= 1 && !L->carry && !L->no_bias) return false;
    cuda_note(be, what, "the GPT's sequence layers do not run on the GPU yet");
    return true;
}

void cuda_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y, int B) {
    if (unsupported(be, L, "forward")) return;
    size_t n = (size_t)B * L->in;
    switch (L->kind) {
    case LAYER_LINEAR: linear_forward(be, L, p, x, y, B); break;
    case LAYER_RELU: activation<false, ACT_FORWARD>(be, x, NULL, y, n, 0); break;
    case LAYER_GELU: activation<true, ACT_FORWARD>(be, x, NULL, y, n, 0); break;
    default: cuda_note(be, "forward", "unknown layer kind");
    }
}

void cuda_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
              const float *x, const float *xdot, float *y, float *ydot, int B, int K) {
    if (unsupported(be, L, "jvp")) return;
    size_t n = (size_t)B * L->in;
    switch (L->kind) {
    case LAYER_LINEAR: linear_jvp(be, L, p, pdot, x, xdot, y, ydot, B, K); return;
    case LAYER_RELU:
        activation<false, ACT_FORWARD>(be, x, NULL, y, n, 0);
        activation<false, ACT_JVP>(be, x, xdot, ydot, n, K);
        return;
    case LAYER_GELU:
        activation<true, ACT_FORWARD>(be, x, NULL, y, n, 0);
        activation<true, ACT_JVP>(be, x, xdot, ydot, n, K);
        return;
    default: cuda_note(be, "jvp", "unknown layer kind");
    }
}

void cuda_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                   const float *dy, float *dx, float *dp, int B) {
    if (unsupported(be, L, "backward")) return;
    size_t n = (size_t)B * L->in;
    switch (L->kind) {
    case LAYER_LINEAR: linear_backward(be, L, p, x, dy, dx, dp, B); return;
    case LAYER_RELU: if (dx) activation<false, ACT_BACKWARD>(be, x, dy, dx, n, 1); return;
    case LAYER_GELU: if (dx) activation<true, ACT_BACKWARD>(be, x, dy, dx, n, 1); return;
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
