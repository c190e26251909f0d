// A LoRA adapter on the GPU, with layer_lora.c's contract and shapes (lora_shape.h): a token
// [x (C), h (k)] becomes [x, h, delta], delta_j = s U_j B_j^T with U = h A^T and s = alpha / r.
// Every product is a cuBLAS GEMM on row-major data seen as column-major transposes (as the
// linear layer's in layers_cuda.cu): row-major Y = X W^T is column-major Y^T = W X^T, op(W) = T.
// Host code only (GEMMs, copies, cuda_workspace): tests/lora_cuda_host.cpp compiles it against
// a host mock of cuda_internal.h and checks it against layer_lora.c on a machine without a GPU.
#include "cuda_internal.h"
#include "lora_shape.h"

// y = [x, 0] over `rows` tokens (x NULL: all 0): the input passed ahead, the delta cleared
// (an unadapted part's stays 0).
static void pass_input(const Backend *be, const LoraShape *s, size_t rows, const float *x, float *y,
                       const char *what) {
    if (!x) {
        zero_floats(be, y, rows * s->out, what);
        return;
    }
    copy_rows(be, y, s->out, x, s->in, s->in, rows, what);
    cuda_check(be, cudaMemset2DAsync(y + s->in, s->out * sizeof(float), 0,
                                     (size_t)(s->out - s->in) * sizeof(float), rows,
                                     cuda_ctx(be)->stream), what);
}

// U (+)= h A^T [rows, P r] for `batch` A's (a_stride apart; 0: one), h shared by the batch,
// the U's u_stride apart.
static void lora_down(const Backend *be, const LoraShape *s, const float *x, size_t rows,
                      const float *A, long long a_stride, float beta, float *U, long long u_stride,
                      int batch, const char *what) {
    int w = s->P * s->r;
    GemmArg a = {A, s->k, a_stride}, h = {x + s->C, s->in, 0};
    cuda_gemm(be, what, CUBLAS_OP_T, CUBLAS_OP_N, w, (int)rows, s->k, a, h, beta, U, w, u_stride, batch);
}

// delta_j (+)= s U_j B_j^T into the tokens' delta (stride out), for `batch` triples of U
// (u_stride apart; 0: shared), parameters (p_stride apart) and outputs (y_stride apart).
static void lora_up(const Backend *be, const Layer *L, const LoraShape *s, const float *U,
                    long long u_stride, size_t rows, const float *p, long long p_stride, float beta,
                    float *y, long long y_stride, int batch, const char *what) {
    int w = s->P * s->r;
    for (int j = 0; j < s->P; j++) {
        GemmArg b = {p + lora_b_offset(s, j), s->r, p_stride}, u = {U + (size_t)j * s->r, w, u_stride};
        cuda_gemm_scaled(be, what, CUBLAS_OP_T, CUBLAS_OP_N, s->n[j], (int)rows, s->r, L->lora_scale,
                         b, u, beta, y + s->in + s->off[j], s->out, y_stride, batch);
    }
}

void cuda_lora_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y,
                       int B) {
    LoraShape s = lora_shape(L, B);
    float *U = (float *)cuda_workspace(be, WORK_TEMP, s.rows * s.P * s.r * sizeof(float));
    pass_input(be, &s, s.rows, x, y, "lora: the input passed ahead");
    lora_down(be, &s, x, s.rows, p, 0, 0.0f, U, 0, 1, "lora: U = h A^T");
    lora_up(be, L, &s, U, 0, s.rows, p, 0, 0.0f, y, 0, 1, "lora: delta = s U B^T");
}

// Udot_k = hdot_k A^T + h Adot_k^T;  deltadot_k = s (Udot_k B^T + U Bdot_k^T): the xdot terms
// as one GEMM over the K blocks' tokens, the parameter tangents' as strided batches of K.
void cuda_lora_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                   const float *x, const float *xdot, float *y, float *ydot, int B, int K) {
    LoraShape s = lora_shape(L, B);
    size_t w = (size_t)s.P * s.r, Krows = (size_t)K * s.rows;
    long long pc = (long long)L->param_count, ublock = (long long)(s.rows * w);
    float *U = (float *)cuda_workspace(be, WORK_TEMP, (1 + (size_t)K) * s.rows * w * sizeof(float));
    float *Udot = U + s.rows * w;
    pass_input(be, &s, s.rows, x, y, "lora jvp: the input passed ahead");
    lora_down(be, &s, x, s.rows, p, 0, 0.0f, U, 0, 1, "lora jvp: U = h A^T");
    lora_up(be, L, &s, U, 0, s.rows, p, 0, 0.0f, y, 0, 1, "lora jvp: delta = s U B^T");
    pass_input(be, &s, Krows, xdot, ydot, "lora jvp: the tangents passed ahead");
    if (!xdot && !pdot) return;  // ydot = 0
    if (xdot) lora_down(be, &s, xdot, Krows, p, 0, 0.0f, Udot, 0, 1, "lora jvp: hdot A^T");
    if (pdot) lora_down(be, &s, x, s.rows, pdot, pc, xdot ? 1.0f : 0.0f, Udot, ublock, K, "lora jvp: h Adot^T");
    lora_up(be, L, &s, Udot, 0, Krows, p, 0, 0.0f, ydot, 0, 1, "lora jvp: s Udot B^T");
    if (pdot)
        lora_up(be, L, &s, U, 0, s.rows, pdot, pc, 1.0f, ydot, (long long)(s.rows * s.out), K,
                "lora jvp: s U Bdot^T");
}

// dU_j = s ddelta_j B_j;  dh = dy_h + dU A;  dA += dU^T h;  dB_j += s ddelta_j^T U_j.
void cuda_lora_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                        const float *dy, float *dx, float *dp, int B) {
    LoraShape s = lora_shape(L, B);
    int w = s.P * s.r, rows = (int)s.rows;
    float *U = (float *)cuda_workspace(be, WORK_TEMP, 2 * s.rows * w * sizeof(float));
    float *dU = U + s.rows * w;
    for (int j = 0; j < s.P; j++) {
        GemmArg b = {p + lora_b_offset(&s, j), s.r, 0}, d = {dy + s.in + s.off[j], s.out, 0};
        cuda_gemm_scaled(be, "lora backward: dU", CUBLAS_OP_N, CUBLAS_OP_N, s.r, rows, s.n[j],
                         L->lora_scale, b, d, 0.0f, dU + (size_t)j * s.r, w, 0, 1);
    }
    GemmArg a = {p, s.k, 0}, du = {dU, w, 0}, h = {x + s.C, s.in, 0};
    if (dx) {
        copy_rows(be, dx, s.in, dy, s.out, s.in, s.rows, "lora backward: dy's input part");
        cuda_gemm(be, "lora backward: dh", CUBLAS_OP_N, CUBLAS_OP_N, s.k, rows, w, a, du, 1.0f,
                  dx + s.C, s.in, 0, 1);
    }
    if (!dp) return;
    cuda_gemm(be, "lora backward: dA", CUBLAS_OP_N, CUBLAS_OP_T, s.k, w, rows, h, du, 1.0f, dp, s.k, 0, 1);
    lora_down(be, &s, x, s.rows, p, 0, 0.0f, U, 0, 1, "lora backward: U = h A^T");
    for (int j = 0; j < s.P; j++) {
        GemmArg u = {U + (size_t)j * s.r, w, 0}, d = {dy + s.in + s.off[j], s.out, 0};
        cuda_gemm_scaled(be, "lora backward: dB", CUBLAS_OP_N, CUBLAS_OP_T, s.r, s.n[j], rows,
                         L->lora_scale, u, d, 1.0f, dp + lora_b_offset(&s, j), s.r, 0, 1);
    }
}
