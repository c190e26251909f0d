// Causal multi-head self-attention on the projected tokens of a block: a token is
// [x (C), q, k, v] (c_attn's output with the carried x) and the output [x, att], where head h
// of att_t = sum over s <= t of P[t, s] v_s, P[t, .] = softmax(q_t . k_s / sqrt(hs)) over
// s <= t; k and v are those of h's kv head (attention_math.h: GPT's hs = C / heads and one kv
// head per head, Llama's grouped-query heads and head_dim). No parameters. Nothing is kept
// between calls: jvp and backward recompute P row by row from q and k (as a fused attention
// kernel would), so a stage stashes only the layer's input.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_math.h"

static size_t attention_param_count(const Layer *L) {
    (void)L;
    return 0;
}

// out[u] = a . rows[u] (rows[u] at rows + u stride) for u < count, each summed in fg_dot_hs's
// order, so the same bits as one fg_dot_hs per row; DOTS rows at a time keep as many
// independent sums in flight instead of one chain of dependent adds.
enum { DOTS = 8 };
static void dot_rows(const float *a, const float *rows, size_t stride, int count, int n, float *out) {
    int u = 0;
    for (; u + DOTS <= count; u += DOTS) {
        float d[DOTS] = {0};
        const float *r = rows + (size_t)u * stride;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < DOTS; j++) d[j] += a[i] * r[j * stride + i];
        for (int j = 0; j < DOTS; j++) out[u + j] = d[j];
    }
    for (; u < count; u++) out[u] = fg_dot_hs(a, rows + (size_t)u * stride, n);
}

// P[t, 0..t] of head h of sample b into prob.
static void softmax_row(const AttnShape *s, const float *x, int b, int h, int t, float *prob) {
    const float *q = x + attn_at_in(s, b, t, 1, h);
    float max = -INFINITY, sum = 0;
    dot_rows(q, x + attn_at_in(s, b, 0, 2, h), (size_t)s->in, t + 1, s->hs, prob);
    for (int u = 0; u <= t; u++) {
        prob[u] *= s->scale;
        max = fmaxf(max, prob[u]);
    }
    for (int u = 0; u <= t; u++) sum += prob[u] = expf(prob[u] - max);
    for (int u = 0; u <= t; u++) prob[u] /= sum;
}

// out [hs] = sum over u <= t of w[u] v_u (of head h of sample b, from x).
static void weighted_values(const AttnShape *s, const float *x, int b, int h, int t,
                            const float *w, float *out) {
    memset(out, 0, (size_t)s->hs * sizeof(float));
    for (int u = 0; u <= t; u++) {
        const float *v = x + attn_at_in(s, b, u, 3, h);
        for (int i = 0; i < s->hs; i++) out[i] += w[u] * v[i];
    }
}

static void copy_carry(const AttnShape *s, const float *x, float *y, size_t tokens) {
    for (size_t r = 0; r < tokens; r++)
        memcpy(y + r * s->out, x + r * s->in, (size_t)s->C * sizeof(float));
}

static void attention_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    (void)p;
    AttnShape s = attn_shape(L, B);
    copy_carry(&s, x, y, (size_t)B * s.T);
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < s.H; h++) {
            float *prob = malloc((size_t)s.T * sizeof(float));
            for (int t = 0; t < s.T; t++) {
                softmax_row(&s, x, b, h, t, prob);
                weighted_values(&s, x, b, h, t, prob, y + attn_at_out(&s, b, t, h));
            }
            free(prob);
        }
    }
}

// Tangent block of one (b, h): sdot[u] = (qdot_t . k_u + q_t . kdot_u) * scale,
// Pdot = P (sdot - P . sdot), attdot_t = sum Pdot[u] v_u + P[u] vdot_u.
static void head_jvp(const AttnShape *s, const float *x, const float *xd, float *yd, int b,
                     int h, float *prob, float *pdot) {
    for (int t = 0; t < s->T; t++) {
        softmax_row(s, x, b, h, t, prob);
        const float *q = x + attn_at_in(s, b, t, 1, h), *qd = xd + attn_at_in(s, b, t, 1, h);
        float mean = 0;
        for (int u = 0; u <= t; u++) {
            pdot[u] = (fg_dot_hs(qd, x + attn_at_in(s, b, u, 2, h), s->hs) +
                       fg_dot_hs(q, xd + attn_at_in(s, b, u, 2, h), s->hs)) * s->scale;
            mean += prob[u] * pdot[u];
        }
        for (int u = 0; u <= t; u++) pdot[u] = prob[u] * (pdot[u] - mean);
        float *out = yd + attn_at_out(s, b, t, h);
        weighted_values(s, x, b, h, t, pdot, out);
        for (int u = 0; u <= t; u++) {
            const float *vd = xd + attn_at_in(s, b, u, 3, h);
            for (int i = 0; i < s->hs; i++) out[i] += prob[u] * vd[i];
        }
    }
}

static void attention_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                          const float *xdot, float *y, float *ydot, int B, int K) {
    (void)pdot;
    AttnShape s = attn_shape(L, B);
    attention_forward(L, p, x, y, B);
    size_t in_block = (size_t)B * L->in, out_block = (size_t)B * L->out;
    if (!xdot) {
        memset(ydot, 0, K * out_block * sizeof(float));
        return;
    }
    copy_carry(&s, xdot, ydot, (size_t)K * B * s.T);
#pragma omp parallel for collapse(3)
    for (int k = 0; k < K; k++) {
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < s.H; h++) {
                float *work = malloc(2 * (size_t)s.T * sizeof(float));
                head_jvp(&s, x, xdot + k * in_block, ydot + k * out_block, b, h, work, work + s.T);
                free(work);
            }
        }
    }
}

// Adjoints of one (b, h) from datt: dP[u] = datt_t . v_u, dv_u += P[u] datt_t,
// ds = P (dP - P . dP) * scale, dq_t = sum ds[u] k_u, dk_u += ds[u] q_t.
static void head_backward(const AttnShape *s, const float *x, const float *dy, float *dx, int b,
                          int h, float *prob, float *dprob) {
    for (int t = 0; t < s->T; t++) {
        softmax_row(s, x, b, h, t, prob);
        const float *datt = dy + attn_at_out(s, b, t, h), *q = x + attn_at_in(s, b, t, 1, h);
        float mean = 0;
        dot_rows(datt, x + attn_at_in(s, b, 0, 3, h), (size_t)s->in, t + 1, s->hs, dprob);
        for (int u = 0; u <= t; u++) {
            mean += prob[u] * dprob[u];
            float *dv = dx + attn_at_in(s, b, u, 3, h);
            for (int i = 0; i < s->hs; i++) dv[i] += prob[u] * datt[i];
        }
        float *dq = dx + attn_at_in(s, b, t, 1, h);
        for (int u = 0; u <= t; u++) {
            float ds = prob[u] * (dprob[u] - mean) * s->scale;
            const float *k = x + attn_at_in(s, b, u, 2, h);
            float *dk = dx + attn_at_in(s, b, u, 2, h);
            for (int i = 0; i < s->hs; i++) {
                dq[i] += ds * k[i];
                dk[i] += ds * q[i];
            }
        }
    }
}

static void attention_backward(const Layer *L, const float *p, const float *x, const float *dy,
                               float *dx, float *dp, int B) {
    (void)p, (void)dp;
    if (!dx) return;
    AttnShape s = attn_shape(L, B);
    memset(dx, 0, (size_t)B * L->in * sizeof(float));
    for (size_t r = 0; r < (size_t)B * s.T; r++)  // the carried x's adjoint passes through
        memcpy(dx + r * s.in, dy + r * s.out, (size_t)s.C * sizeof(float));
    // One thread per kv head: the query heads sharing it add into its dk, dv in order.
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < s.Hkv; g++) {
            float *work = malloc(2 * (size_t)s.T * sizeof(float));
            for (int h = g * s.group; h < (g + 1) * s.group; h++)
                head_backward(&s, x, dy, dx, b, h, work, work + s.T);
            free(work);
        }
    }
}

const LayerOps attention_ops = {"attention", attention_param_count, attention_forward,
                                attention_jvp, attention_backward};
