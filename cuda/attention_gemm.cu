// Causal attention on tensor cores (precision = tf32 | bf16), as llm.c does without cuDNN: the
// scores of a sample's heads as one strided-batched GEMM (S = Q K^T, a T x T matrix per head),
// a softmax kernel over each row, then P V as a second GEMM; the GEMMs go through cuda_gemm,
// so they run at the backend's precision (TF32 on the FP32 operands, or BF16 operands with FP32
// accumulation). The backward and the JVP are GEMMs around one row kernel:
//   backward: dP = dY V^T, dS = P (dP - rowsum(P dP)) scale, dQ = dS K, dK = dS^T Q, dV = P^T dY;
//   jvp:      Sd = Qd K^T + Q Kd^T, Pd = P (Sd - rowsum(P Sd)) scale, Yd = P Vd + Pd V.
// The scores are materialised (two T x T buffers per kv head of one sample), and the GEMMs
// compute the masked half too (zeros in P): the price of tensor cores without a fused kernel.
// FP32 keeps the tiled kernels (attention_cuda.cu), closer to the CPU's numbers.
// Grouped-query attention: query head h = g group + j reads kv head g; a batch runs over the kv
// heads g for one j, so every operand has one stride; dK and dV add the group's j in order.
// Deterministic: fixed GEMM shapes (cuBLAS's reproducibility) and fixed-order row sums.
// In bf16 the row kernels also write their T x T output in BF16 (ScoreBuffers.p16, d16), which
// the GEMMs after them read as it lies: the very bits cuda_gemm's rounding would make, without
// a pass over the largest operands of the step.
#include "attention_math.h"
#include "bf16_math.h"
#include "cuda_internal.h"

// Scores buffers above this many bytes (each of two) fall back to the tiled kernels.
static const size_t SCORES_MAX_BYTES = (size_t)1 << 30;

// A warp per row of T scores; row r is query t = r % T. Each lane takes u = lane + 32 i in
// order, the butterfly adds the lanes: the same bits every run.
enum { ROW_WARPS = 8 };

// s[r][u] = softmax over u <= t of s[r][u] scale (0 after t), in place; s16 (unless NULL) the
// same in BF16.
__global__ void causal_softmax_kernel(float *s, uint16_t *s16, int T, size_t rows, float scale) {
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    int lane = threadIdx.x % 32, t = (int)(r % T);
    float *row = s + r * T;
    float m = -INFINITY, l = 0.0f;
    for (int u = lane; u <= t; u += 32) m = fmaxf(m, row[u] * scale);
    m = warp_max(m);
    for (int u = lane; u <= t; u += 32) l += expf(row[u] * scale - m);
    l = warp_sum(l);
    for (int u = lane; u < T; u += 32) {
        row[u] = u <= t ? expf(row[u] * scale - m) / l : 0.0f;
        if (s16) s16[r * T + u] = bf16_round(row[u]);
    }
}

// x[r][u] = scale p[r][u] (x[r][u] - sum over u' of p[r][u'] x[r][u']), in place: the
// softmax's derivative along x (dS from dP in the backward, Pd from Sd in the JVP); x16 (unless
// NULL) the same in BF16.
__global__ void softmax_derivative_kernel(const float *p, float *x, uint16_t *x16, int T, size_t rows,
                                          float scale) {
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    int lane = threadIdx.x % 32, t = (int)(r % T);
    const float *pr = p + r * T;
    float *xr = x + r * T, d = 0.0f;
    for (int u = lane; u <= t; u += 32) d = fmaf(pr[u], xr[u], d);
    d = warp_sum(d);
    for (int u = lane; u < T; u += 32) {
        xr[u] = u <= t ? scale * pr[u] * (xr[u] - d) : 0.0f;
        if (x16) x16[r * T + u] = bf16_round(xr[u]);
    }
}

// The two score buffers of a sample's kv heads (T x T each): the probabilities P and a second
// one (dP then dS, or Sd then Pd), with their BF16 copies in bf16 (else NULL).
typedef struct {
    float *p, *d;
    uint16_t *p16, *d16;
} ScoreBuffers;

// Where sample b's operands start for group member j, and their strides over the kv heads.
typedef struct {
    GemmArg q, k, v;  // input token's parts (ld = s.in)
    size_t att;       // output token's attention part (ld = s.out), stride group hs
} HeadOperands;

static HeadOperands operands(const AttnShape &s, const float *x, int b, int j) {
    long long qs = (long long)s.group * s.hs, ks = s.hs;
    HeadOperands o = {{x + attn_at_in(&s, b, 0, 1, j), s.in, qs}, {x + attn_at_in(&s, b, 0, 2, j), s.in, ks},
                      {x + attn_at_in(&s, b, 0, 3, j), s.in, ks}, attn_at_out(&s, b, 0, j)};
    return o;
}

static long long tt(const AttnShape &s) { return (long long)s.T * s.T; }

// scores[g] (row-major [t][u]) = beta scores[g] + q_t . k_u, for the Hkv heads of group member j.
static void scores(const Backend *be, const AttnShape &s, GemmArg k, GemmArg q, float beta,
                   float *out, const char *what) {
    cuda_gemm(be, what, CUBLAS_OP_T, CUBLAS_OP_N, s.T, s.T, s.hs, k, q, beta, out, s.T, tt(s), s.Hkv);
}

// out_t (ld ld_out, stride over kv heads out_stride) = beta out_t + sum_u w[t][u] v_u (w16: w
// in BF16, or NULL).
static void weighted_rows(const Backend *be, const AttnShape &s, GemmArg v, const float *w,
                          const uint16_t *w16, float beta, float *out, int ld_out, long long out_stride,
                          const char *what) {
    GemmArg wa = {w, s.T, tt(s), w16};
    cuda_gemm(be, what, CUBLAS_OP_N, CUBLAS_OP_N, s.hs, s.T, s.T, v, wa, beta, out, ld_out, out_stride, s.Hkv);
}

// out_u (ld s.in, stride hs) = beta out_u + sum_t w[t][u] a_t: the keys' and values' sums.
static void weighted_cols(const Backend *be, const AttnShape &s, GemmArg a, const float *w,
                          const uint16_t *w16, float beta, float *out, const char *what) {
    GemmArg wa = {w, s.T, tt(s), w16};
    cuda_gemm(be, what, CUBLAS_OP_N, CUBLAS_OP_T, s.hs, s.T, s.T, a, wa, beta, out, s.in, s.hs, s.Hkv);
}

static unsigned row_blocks(const AttnShape &s) {
    return (unsigned)(((size_t)s.Hkv * s.T + ROW_WARPS - 1) / ROW_WARPS);
}

static void softmax(const Backend *be, const AttnShape &s, float *p, uint16_t *p16) {
    causal_softmax_kernel<<<row_blocks(s), ROW_WARPS * 32, 0, cuda_ctx(be)->stream>>>(p, p16, s.T, (size_t)s.Hkv * s.T,
                                                                                      s.scale);
    launch_check(be, "attention: softmax");
}

static void softmax_derivative(const Backend *be, const AttnShape &s, const float *p, float *x, uint16_t *x16) {
    softmax_derivative_kernel<<<row_blocks(s), ROW_WARPS * 32, 0, cuda_ctx(be)->stream>>>(
        p, x, x16, s.T, (size_t)s.Hkv * s.T, s.scale);
    launch_check(be, "attention: softmax derivative");
}

// The score buffers, or false when they would be too large (the caller takes the tiles).
static bool score_buffers(const Backend *be, const AttnShape &s, ScoreBuffers *b) {
    size_t n = (size_t)s.Hkv * tt(s);
    if (n * sizeof(float) > SCORES_MAX_BYTES) return false;
    *b = ScoreBuffers{(float *)cuda_workspace(be, WORK_ATT_P, n * sizeof(float)),
                      (float *)cuda_workspace(be, WORK_ATT_D, n * sizeof(float)), NULL, NULL};
    if (cuda_ctx(be)->precision == PRECISION_BF16) {
        b->p16 = (uint16_t *)cuda_workspace(be, WORK_ATT_P16, n * sizeof(uint16_t));
        b->d16 = (uint16_t *)cuda_workspace(be, WORK_ATT_D16, n * sizeof(uint16_t));
        if (!b->p16 || !b->d16) return false;
    }
    return b->p && b->d;
}

// P of sample b, group member j, into b->p (and b->p16).
static void probabilities(const Backend *be, const AttnShape &s, const HeadOperands &o, const ScoreBuffers *b) {
    scores(be, s, o.k, o.q, 0.0f, b->p, "attention: scores");
    softmax(be, s, b->p, b->p16);
}

static void gemm_forward(const Backend *be, const AttnShape *sp, const float *x, float *y) {
    const AttnShape &s = *sp;
    ScoreBuffers sb;
    if (!score_buffers(be, s, &sb)) return attention_tiled.forward(be, sp, x, y);
    for (int b = 0; b < s.B; b++)
        for (int j = 0; j < s.group; j++) {
            HeadOperands o = operands(s, x, b, j);
            probabilities(be, s, o, &sb);
            weighted_rows(be, s, o.v, sb.p, sb.p16, 0.0f, y + o.att, s.out, (long long)s.group * s.hs,
                          "attention: values");
        }
}

static void gemm_jvp(const Backend *be, const AttnShape *sp, const float *x, const float *xdot,
                     float *ydot, int K) {
    const AttnShape &s = *sp;
    ScoreBuffers sb;
    if (!score_buffers(be, s, &sb)) return attention_tiled.jvp(be, sp, x, xdot, ydot, K);
    long long ys = (long long)s.group * s.hs;
    for (int b = 0; b < s.B; b++)
        for (int j = 0; j < s.group; j++) {
            HeadOperands o = operands(s, x, b, j);
            probabilities(be, s, o, &sb);
            for (int z = 0; z < K; z++) {
                HeadOperands od = operands(s, xdot + (size_t)z * s.B * s.T * s.in, b, j);
                float *yd = ydot + (size_t)z * s.B * s.T * s.out + o.att;
                scores(be, s, o.k, od.q, 0.0f, sb.d, "attention jvp: score tangents");
                scores(be, s, od.k, o.q, 1.0f, sb.d, "attention jvp: score tangents");
                softmax_derivative(be, s, sb.p, sb.d, sb.d16);
                weighted_rows(be, s, od.v, sb.p, sb.p16, 0.0f, yd, s.out, ys, "attention jvp: value tangents");
                weighted_rows(be, s, o.v, sb.d, sb.d16, 1.0f, yd, s.out, ys, "attention jvp: weight tangents");
            }
        }
}

static void gemm_backward(const Backend *be, const AttnShape *sp, const float *x, const float *dy,
                          float *dx) {
    const AttnShape &s = *sp;
    ScoreBuffers sb;
    if (!score_buffers(be, s, &sb)) return attention_tiled.backward(be, sp, x, dy, dx);
    long long ys = (long long)s.group * s.hs;
    for (int b = 0; b < s.B; b++)
        for (int j = 0; j < s.group; j++) {
            HeadOperands o = operands(s, x, b, j), od = operands(s, dx, b, j);
            GemmArg datt = {dy + o.att, s.out, ys};
            float beta = j ? 1.0f : 0.0f;  // dk, dv: the group's heads added in order
            probabilities(be, s, o, &sb);
            scores(be, s, o.v, datt, 0.0f, sb.d, "attention backward: dP");
            softmax_derivative(be, s, sb.p, sb.d, sb.d16);
            weighted_rows(be, s, o.k, sb.d, sb.d16, 0.0f, (float *)od.q.p, s.in, ys, "attention backward: dq");
            weighted_cols(be, s, o.q, sb.d, sb.d16, beta, (float *)od.k.p, "attention backward: dk");
            weighted_cols(be, s, datt, sb.p, sb.p16, beta, (float *)od.v.p, "attention backward: dv");
        }
}

const AttentionKernels attention_gemm = {gemm_forward, gemm_jvp, gemm_backward};
