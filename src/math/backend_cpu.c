// The CPU backend: host memory and the reference implementations (layer.h, tangent.h,
// optimizer.h). Every other backend is tested against this one. backend_cpu computes in FP32;
// backend_cpu_create makes one whose GEMMs run at a chosen precision (gemm.h), handed to the
// layers on the copy of the Layer each call runs.
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "gemm.h"
#include "backend.h"
#include "head_loss.h"

// What backend_cpu_create chose; backend_cpu has none (FP32 through fg_sgemm, the scalar BF16
// rounding).
typedef struct {
    Gemm gemm;
    Bf16Convert convert;  // the BF16 rounding: the vector loop where the CPU has it
} CpuCtx;

static const Gemm *cpu_gemm(const Backend *be) {
    return be->ctx ? &((const CpuCtx *)be->ctx)->gemm : NULL;
}

static Bf16Convert cpu_convert(const Backend *be) {
    return be->ctx ? ((const CpuCtx *)be->ctx)->convert : bf16_convert_scalar;
}

// L with this backend's products: the layers reach their GEMMs through L->gemm, and its
// weights' BF16 copy only where those products are BF16.
static Layer with_gemm(const Backend *be, const Layer *L) {
    Layer l = *L;
    l.gemm = cpu_gemm(be);
    if (!l.gemm || l.gemm->precision != PRECISION_BF16) l.params16 = NULL;
    return l;
}

static void *cpu_alloc(const Backend *be, size_t bytes) {
    (void)be;
    return fg_alloc_bytes(bytes);
}

static void cpu_free(const Backend *be, void *buf) {
    (void)be;
    fg_free(buf);
}

static void cpu_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    if (dst != src) memcpy(dst, src, bytes);
}

static void cpu_zero(const Backend *be, void *dst, size_t bytes) {
    (void)be;
    memset(dst, 0, bytes);
}

// bf16.h's loops: a layer's weights through bf16_convert_rows (more than 256 Ki values in
// parallel), values between layers serially (BF16_WEIGHTS says why).
static void cpu_narrow16(const Backend *be, const float *x, uint16_t *y, size_t n, int how) {
    Bf16Convert convert = how & BF16_KEEP_DENORMALS ? bf16_narrow : cpu_convert(be);
    if (how & BF16_WEIGHTS) bf16_convert_rows(convert, x, 1, (int)n, (int)n, y);
    else convert(x, y, n);
}

static void cpu_widen16(const Backend *be, const uint16_t *h, float *x, size_t n) {
    (void)be;
    bf16_widen(h, x, n);
}

static void cpu_round16(const Backend *be, float *x, size_t n, double *not_finite) {
    size_t bad = bf16_round_floats(cpu_convert(be), x, n);
    if (bad && not_finite) *not_finite += (double)bad;
}

static void cpu_scale(const Backend *be, float *y, float a, const float *x, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) y[i] = a * x[i];
}

static void cpu_axpy(const Backend *be, float *y, float a, const float *x, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void cpu_matmul(const Backend *be, int trans_a, int trans_b, int m, int n, int k,
                       float alpha, const float *A, int lda, const float *B, int ldb, float beta,
                       float *C, int ldc) {
    fg_gemm(cpu_gemm(be), trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Blocks of a fixed size summed in parallel, then the block sums in order: the same bits
// whatever the number of threads, and no serial pass over a whole stage.
static double cpu_dot(const Backend *be, const float *a, const float *b, size_t n) {
    (void)be;
    enum { BLOCK = 4096 };
    size_t n_blocks = (n + BLOCK - 1) / BLOCK;
    double *part = malloc(FG_MAX(n_blocks, 1) * sizeof(double)), s = 0.0;
#pragma omp parallel for if (n_blocks > 16)
    for (size_t k = 0; k < n_blocks; k++)
        part[k] = fg_dot_f64(a + k * BLOCK, b + k * BLOCK, FG_MIN(n, (k + 1) * BLOCK) - k * BLOCK);
    for (size_t k = 0; k < n_blocks; k++) s += part[k];
    free(part);
    return s;
}

static void cpu_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                        float *y, int B) {
    Layer l = with_gemm(be, L);
    layer_ops(&l)->forward(&l, p, x, y, B);
}

static void cpu_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                    const float *x, const float *xdot, float *y, float *ydot, int B, int K) {
    Layer l = with_gemm(be, L);
    layer_ops(&l)->jvp(&l, p, pdot, x, xdot, y, ydot, B, K);
}

static void cpu_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                         const float *dy, float *dx, float *dp, int B) {
    Layer l = with_gemm(be, L);
    layer_ops(&l)->backward(&l, p, x, dy, dx, dp, B);
}

static float cpu_loss_forward(const Backend *be, const float *logits, const Label *labels,
                              int B, LogitRows C, int *correct) {
    (void)be;
    return loss_forward(logits, labels, B, C, correct);
}

static float cpu_loss_jvp(const Backend *be, const float *logits, const float *zdot,
                          const Label *labels, int B, LogitRows C, int K, float *d) {
    (void)be;
    return loss_jvp(logits, zdot, labels, B, C, K, d);
}

static float cpu_loss_jvp_rows(const Backend *be, const float *logits, const float *zdot,
                               const Label *labels, int B, LogitRows C, int K, float *d_rows) {
    (void)be;
    return loss_jvp_rows(logits, zdot, labels, B, C, K, d_rows);
}

static float cpu_loss_backward(const Backend *be, const float *logits, const Label *labels,
                               int B, LogitRows C, float *dz) {
    (void)be;
    return loss_backward(logits, labels, B, C, dz);
}

static float cpu_head_forward(const Backend *be, const Layer *L, const float *W, const float *x,
                              const Label *labels, int B, float weight, float *rec, int *correct) {
    Layer l = with_gemm(be, L);
    return head_loss_forward(&l, W, x, labels, B, weight, rec, correct);
}

static float cpu_head_jvp(const Backend *be, const Layer *L, const float *W, const float *x,
                          const float *xdot, const Label *labels, int B, int K, float weight,
                          const HeadTangents *t, float *rec, float *d) {
    Layer l = with_gemm(be, L);
    return head_loss_jvp(&l, W, x, xdot, labels, B, K, weight, t, rec, d);
}

static void cpu_head_activity_grad(const Backend *be, const Layer *L, TangentKey key, int K,
                                   int n_mb, int B, const float *coeff, const float *x, float *dW) {
    Layer l = with_gemm(be, L);
    head_loss_activity_grad(&l, key, K, n_mb, B, coeff, x, dW);
}

static double cpu_tangent_fill(const Backend *be, TangentKey key, size_t n, float *out,
                               const float *ref) {
    (void)be;
    if (ref) return tangent_fill_dot(key, 0, n, out, ref);
    tangent_fill(key, 0, n, out);
    return 0.0;
}

// The key of tangent k of the b-th micro-batch after key's.
static TangentKey key_at(TangentKey key, int b, int k) {
    key.microbatch += (uint32_t)b;
    key.k = (uint32_t)k;
    return key;
}

static void cpu_tangent_axpy(const Backend *be, TangentKey key, int n_mb, int K,
                             const float *coeff, size_t n, float *y) {
    (void)be;
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < K; k++) tangent_axpy(key_at(key, b, k), 0, n, coeff[b * K + k], y);
}

static void cpu_tangent_dot(const Backend *be, TangentKey key, int n_mb, int K, size_t n,
                            const float *x, double *dots) {
    (void)be;
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < K; k++) dots[b * K + k] += tangent_dot(key_at(key, b, k), 0, n, x);
}

static void cpu_tangent_add_rows(const Backend *be, TangentKey key, int K, int rows, int width,
                                 const float *coeff, float *y, size_t y_stride, size_t ld) {
    (void)be;
    size_t n = (size_t)rows * width;
    for (int k = 0; k < K; k++) {
        TangentKey kk = key_at(key, 0, k);
        const float *ck = coeff ? coeff + (size_t)k * rows : NULL;
        float *yk = y + k * y_stride;
        if (ld != (size_t)width) {  // strided rows (a branch of wider tokens): made at once,
            float *v = fg_alloc_floats(n);  // then added row by row, as the walk would
            tangent_fill(kk, 0, n, v);
            for (int r = 0; r < rows; r++) {
                const float *vr = v + (size_t)r * width;
                float *yr = yk + r * ld, c = ck ? ck[r] : 1.0f;
                for (int j = 0; j < width; j++) yr[j] += c * vr[j];
            }
            fg_free(v);
        } else if (ck) {
            tangent_axpy_rows(kk, (size_t)rows, (size_t)width, ck, yk);
        } else {
            tangent_axpy(kk, 0, n, 1.0f, yk);
        }
    }
}

static void cpu_optimizer_step(const Backend *be, const OptimizerConfig *c, long step, double lr,
                               float *params, const float *from, const float *g, float g_scale,
                               float *state, size_t state_stride, size_t n) {
    (void)be;
    optimizer_step(c, step, lr, params, from, g, g_scale, state, state_stride, n);
}

static int cpu_sync(const Backend *be, FgError *err) {
    (void)be, (void)err;
    return FG_OK;
}

const Backend backend_cpu = {
    .name = "cpu",
    .on_device = 0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .narrow16 = cpu_narrow16,
    .widen16 = cpu_widen16,
    .round16 = cpu_round16,
    .scale = cpu_scale,
    .axpy = cpu_axpy,
    .dot = cpu_dot,
    .matmul = cpu_matmul,
    .forward = cpu_forward,
    .jvp = cpu_jvp,
    .backward = cpu_backward,
    .loss_forward = cpu_loss_forward,
    .loss_jvp = cpu_loss_jvp,
    .loss_jvp_rows = cpu_loss_jvp_rows,
    .loss_backward = cpu_loss_backward,
    .head_forward = cpu_head_forward,
    .head_jvp = cpu_head_jvp,
    .head_activity_grad = cpu_head_activity_grad,
    .tangent_fill = cpu_tangent_fill,
    .tangent_axpy = cpu_tangent_axpy,
    .tangent_dot = cpu_tangent_dot,
    .tangent_add_rows = cpu_tangent_add_rows,
    .optimizer_step = cpu_optimizer_step,
    .sync = cpu_sync,
};

int backend_cpu_create(int precision, Backend *out, FgError *err) {
    if (precision != PRECISION_FP32 && precision != PRECISION_BF16)
        return fg_fail(err, FG_ERR_INPUT, "precision = tf32 needs device = cuda (TF32 is a GPU "
                       "tensor-core format; the CPU computes in fp32 or bf16)");
    CpuCtx *c = calloc(1, sizeof *c);
    if (!c) return fg_fail(err, FG_ERR_INTERNAL, "CPU backend: out of memory");
    c->gemm = gemm_fp32;
    c->convert = bf16_convert_scalar;
    int rc = precision == PRECISION_BF16 ? gemm_bf16_create(&c->gemm, err) : FG_OK;
    if (!rc && precision == PRECISION_BF16) c->convert = bf16_convert_avx512;  // the CPU has it
    if (rc) {
        free(c);
        return rc;
    }
    *out = backend_cpu;
    out->ctx = c;
    return FG_OK;
}

void backend_cpu_destroy(Backend *be) {
    CpuCtx *c = be->ctx;
    if (!c) return;
    if (c->gemm.precision == PRECISION_BF16) gemm_bf16_destroy(&c->gemm);
    free(c);
    be->ctx = NULL;
}
