// cuda/lora_cuda.cu's GEMM calls checked on the CPU (no GPU needed): the file is compiled as
// host C++ against a mock of cuda_internal.h whose GEMM is CBLAS in cuBLAS's column-major
// convention (op, ld, batch strides, alpha, beta) and whose copies are loops, then run against
// layer_lora.c on every adapter of four tiny Llamas (fused q/k/v with one, two or three parts
// adapted, gate/up, o, down; ranks 1 to 3): forward, jvp with and without each tangent,
// backward fused and dp alone, within 1e-5 relative. What it cannot check: the kernels, the
// copies' CUDA calls and cuBLAS itself (test_cuda_lora, on a GPU).
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "model.h"
}

// ---- the mock of cuda_internal.h (its include guard keeps the real one out) ----
#define FGPIPE_CUDA_INTERNAL_H
typedef enum { CUBLAS_OP_N, CUBLAS_OP_T } cublasOperation_t;
typedef int cudaError_t;
enum { WORK_TEMP };
typedef struct {
    const float *p;
    int ld;
    long long stride;
} GemmArg;
struct MockCtx { int stream; };
static MockCtx *cuda_ctx(const Backend *) { static MockCtx c; return &c; }
static void cuda_check(const Backend *, cudaError_t, const char *) {}
static cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int v, size_t width, size_t height, int) {
    for (size_t r = 0; r < height; r++) memset((char *)p + r * pitch, v, width);
    return 0;
}
static void copy_rows(const Backend *, float *dst, size_t dst_ld, const float *src, size_t src_ld,
                      size_t width, size_t rows, const char *) {
    for (size_t r = 0; r < rows; r++) memmove(dst + r * dst_ld, src + r * src_ld, width * sizeof(float));
}
static void zero_floats(const Backend *, float *dst, size_t n, const char *) { memset(dst, 0, n * sizeof(float)); }
static void *g_work;  // filled with NaN when grown: a read before a write shows
static size_t g_work_cap;
static void *cuda_workspace(const Backend *, int, size_t bytes) {
    if (bytes > g_work_cap) {
        free(g_work);
        g_work = malloc(bytes), g_work_cap = bytes;
        for (size_t i = 0; i < bytes / sizeof(float); i++) ((float *)g_work)[i] = NAN;
    }
    return g_work;
}
static void cuda_gemm_scaled(const Backend *, const char *, cublasOperation_t ta, cublasOperation_t tb,
                             int m, int n, int k, float alpha, GemmArg A, GemmArg B, float beta,
                             float *C, int ldc, long long stride_c, int batch) {
    for (int b = 0; b < batch; b++) {
        float *c = C + b * stride_c;
        if (beta == 0.0f)  // cuBLAS does not read C then (NaN or not)
            for (int j = 0; j < n; j++) memset(c + (size_t)j * ldc, 0, (size_t)m * sizeof(float));
        cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_T ? CblasTrans : CblasNoTrans,
                    tb == CUBLAS_OP_T ? CblasTrans : CblasNoTrans, m, n, k, alpha, A.p + b * A.stride,
                    A.ld, B.p + b * B.stride, B.ld, beta, c, ldc);
    }
}
static void cuda_gemm(const Backend *be, const char *what, cublasOperation_t ta, cublasOperation_t tb,
                      int m, int n, int k, GemmArg A, GemmArg B, float beta, float *C, int ldc,
                      long long stride_c, int batch) {
    cuda_gemm_scaled(be, what, ta, tb, m, n, k, 1.0f, A, B, beta, C, ldc, stride_c, batch);
}

#include "lora_cuda.cu"

// ---- the check ----
static double g_worst;
static int g_failed;

static void expect(const float *got, const float *want, size_t n, const char *layer, const char *what) {
    double worst = 0.0, scale = 1.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
    worst /= scale;  // NaN stays NaN: a failure
    g_worst = fmax(g_worst, worst);
    if (!(worst <= 1e-5)) printf("FAIL %s %s: %.3g relative\n", layer, what, worst), g_failed++;
}

static float *uniform(size_t n, uint64_t seed) {
    float *v = fg_alloc_floats(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(seed >> 40) / 8388608.0 - 1.0);
    }
    return v;
}

static void check_adapter(const Layer *L) {
    const LayerOps *ops = layer_ops(L);
    int B = 2, K = 3;
    size_t np = L->param_count, nx = (size_t)B * L->in, ny = (size_t)B * L->out;
    float *p = uniform(np, 1), *pdot = uniform(np * K, 2), *x = uniform(nx, 3), *xdot = uniform(nx * K, 4);
    float *dy = uniform(ny, 5), *dp[2] = {uniform(np, 6), uniform(np, 6)};
    float *y[2], *ydot[2], *dx[2];
    for (int i = 0; i < 2; i++)
        y[i] = fg_alloc_floats(ny), ydot[i] = fg_alloc_floats(ny * K), dx[i] = fg_alloc_floats(nx);
    ops->forward(L, p, x, y[0], B);
    cuda_lora_forward(NULL, L, p, x, y[1], B);
    expect(y[1], y[0], ny, L->name, "forward");
    for (int v = 0; v < 4; v++) {  // both tangents, no xdot, no pdot, neither
        const float *xd = v & 1 ? NULL : xdot, *pd = v & 2 ? NULL : pdot;
        for (size_t i = 0; i < ny * K; i++) ydot[1][i] = NAN;
        ops->jvp(L, p, pd, x, xd, y[0], ydot[0], B, K);
        cuda_lora_jvp(NULL, L, p, pd, x, xd, y[1], ydot[1], B, K);
        char what[32];
        snprintf(what, sizeof what, "jvp variant %d", v);
        expect(ydot[1], ydot[0], ny * K, L->name, what);
        expect(y[1], y[0], ny, L->name, what);
    }
    ops->backward(L, p, x, dy, dx[0], dp[0], B);
    cuda_lora_backward(NULL, L, p, x, dy, dx[1], dp[1], B);
    expect(dx[1], dx[0], nx, L->name, "backward dx");
    expect(dp[1], dp[0], np, L->name, "backward dp");
    ops->backward(L, p, x, dy, NULL, dp[0], B);  // the weight half alone: dp accumulates
    cuda_lora_backward(NULL, L, p, x, dy, NULL, dp[1], B);
    expect(dp[1], dp[0], np, L->name, "backward dp alone");
    float *all[] = {p, pdot, x, xdot, dy, dp[0], dp[1], y[0], y[1], ydot[0], ydot[1], dx[0], dx[1]};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) fg_free(all[i]);
}

int main(void) {
    // n_embd, n_head, n_kv_head, head_dim, intermediate, ctx, rank, targets: test_cuda_lora's
    const int shapes[][8] = {{8, 2, 1, 4, 12, 1, 1, LORA_Q},
                             {16, 4, 2, 6, 24, 5, 2, LORA_Q | LORA_V | LORA_DOWN},
                             {32, 4, 1, 16, 40, 40, 3, 127},
                             {24, 3, 3, 8, 64, 33, 2, LORA_K | LORA_O | LORA_GATE}};
    int adapters = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int *v = shapes[s];
        LlamaShape g;
        memset(&g, 0, sizeof g);
        g.n_layer = 1, g.n_embd = v[0], g.n_head = v[1], g.n_kv_head = v[2], g.head_dim = v[3];
        g.intermediate = v[4], g.ctx = v[5], g.vocab = 256, g.pad_vocab = 1, g.rms_eps = 1e-5f;
        g.rope.theta = 10000, g.qk_norm = 1, g.tie_embeddings = 1;
        g.lora_rank = v[6], g.lora_alpha = 3.0f, g.lora_targets = v[7];
        Model m;
        FgError err = {};
        if (model_build_llama(&m, g, &err)) {
            printf("FAIL model_build_llama: %s\n", err.msg);
            return 1;
        }
        for (int l = 0; l < m.n_layers; l++)
            if (m.layers[l].kind == LAYER_LORA) check_adapter(&m.layers[l]), adapters++;
    }
    printf("%d adapters: cuda/lora_cuda.cu's GEMMs (host mock) against layer_lora.c, largest "
           "difference %.3g relative (bound 1e-5)\n", adapters, g_worst);
    if (adapters != 10) printf("FAIL: %d adapters, expected 10\n", adapters), g_failed++;
    free(g_work);
    return g_failed != 0;
}
