// A LoRA adapter (Hu et al. 2021, PEFT's layout) beside a frozen projection W [n, k]: a token
// [x (C), h (k)] becomes [x, h, delta (n)], delta = s B A h with s = alpha / rank, and the
// projection that follows (a linear with tail = n, layer_linear.c) adds delta to h W^T. The
// projection may be fused (q/k/v, gate/up): its rows are up to three parts, each adapted or
// not (mask); an unadapted part's delta is 0. Parameters: every adapted part's A [r, k], then
// every adapted part's B [n_part, r]. W lives in its own (frozen) layer, so tangents, gradients
// and optimizer state cover the adapters only.
//   forward:  U = h A^T [rows, P r];  delta_j = s U_j B_j^T
//   jvp:      Udot = hdot A^T + h Adot^T;  deltadot_j = s (Udot_j B_j^T + U_j Bdot_j^T)
//   backward: dU_j = s ddelta_j B_j;  dh = dy_h + dU A;  dA += dU^T h;  dB_j += s ddelta_j^T U_j
// The weight half reads A and B (layer_grad_reads_params).
#include <string.h>

#include "gemm.h"
#include "lora_shape.h"

static size_t lora_param_count(const Layer *L) {
    LoraShape s = lora_shape(L, 1);
    return lora_b_offset(&s, s.P);
}

static const float *part_B(const LoraShape *s, const float *p, int j) { return p + lora_b_offset(s, j); }

// U (+)= h A^T over rows tokens of stride `in` (h at column C), A [P r, k].
static void lora_down(const Layer *L, const LoraShape *s, const float *x, const float *A, float *U,
                      float beta) {
    fg_gemm(L->gemm, 0, 1, (int)s->rows, s->P * s->r, s->k, 1.0f,
                x + s->C, s->in, A, s->k, beta, U, s->P * s->r);
}

// delta_j (+)= scale U_j B_j^T into output rows of stride `out`.
static void lora_up(const Layer *L, const LoraShape *s, const float *U, const float *p, float scale,
                    float *y, float beta) {
    for (int j = 0; j < s->P; j++)
        fg_gemm(L->gemm, 0, 1, (int)s->rows, s->n[j], s->r, scale,
                    U + (size_t)j * s->r, s->P * s->r, part_B(s, p, j), s->r, beta,
                    y + s->in + s->off[j], s->out);
}

// y = [x, 0] (the input passed ahead, delta zeroed) over n rows.
static void pass_input(const LoraShape *s, size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) {
        float *yr = y + i * s->out;
        if (x) memcpy(yr, x + i * s->in, (size_t)s->in * sizeof(float));
        else memset(yr, 0, (size_t)s->in * sizeof(float));
        memset(yr + s->in, 0, (size_t)(s->out - s->in) * sizeof(float));
    }
}

static void lora_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    LoraShape s = lora_shape(L, B);
    float *U = fg_alloc_floats(s.rows * s.P * s.r);
    pass_input(&s, s.rows, x, y);
    lora_down(L, &s, x, p, U, 0.0f);
    lora_up(L, &s, U, p, L->lora_scale, y, 0.0f);
    fg_free(U);
}

static void lora_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                     const float *xdot, float *y, float *ydot, int B, int K) {
    LoraShape s = lora_shape(L, B);
    size_t width = (size_t)s.P * s.r, block = s.rows * s.out;
    float *U = fg_alloc_floats(2 * s.rows * width), *Udot = U + s.rows * width;
    pass_input(&s, s.rows, x, y);
    lora_down(L, &s, x, p, U, 0.0f);
    lora_up(L, &s, U, p, L->lora_scale, y, 0.0f);
    for (int k = 0; k < K; k++) {
        const float *pd = pdot ? pdot + k * L->param_count : NULL;
        const float *xd = xdot ? xdot + k * s.rows * s.in : NULL;
        float *yd = ydot + k * block;
        pass_input(&s, s.rows, xd, yd);
        memset(Udot, 0, s.rows * width * sizeof(float));
        if (xd) lora_down(L, &s, xd, p, Udot, 0.0f);
        if (pd) lora_down(L, &s, x, pd, Udot, 1.0f);
        lora_up(L, &s, Udot, p, L->lora_scale, yd, 0.0f);
        if (pd) lora_up(L, &s, U, pd, L->lora_scale, yd, 1.0f);
    }
    fg_free(U);
}

static void lora_backward(const Layer *L, const float *p, const float *x, const float *dy,
                          float *dx, float *dp, int B) {
    LoraShape s = lora_shape(L, B);
    size_t width = (size_t)s.P * s.r;
    float *U = fg_alloc_floats(2 * s.rows * width), *dU = U + s.rows * width;
    for (int j = 0; j < s.P; j++)  // dU_j = s ddelta_j B_j
        fg_gemm(L->gemm, 0, 0, (int)s.rows, s.r, s.n[j],
                    L->lora_scale, dy + s.in + s.off[j], s.out, part_B(&s, p, j), s.r, 0.0f,
                    dU + (size_t)j * s.r, (int)width);
    if (dx) {
        for (size_t i = 0; i < s.rows; i++)
            memcpy(dx + i * s.in, dy + i * s.out, (size_t)s.in * sizeof(float));
        fg_gemm(L->gemm, 0, 0, (int)s.rows, s.k, (int)width, 1.0f,
                    dU, (int)width, p, s.k, 1.0f, dx + s.C, s.in);
    }
    if (dp) {
        fg_gemm(L->gemm, 1, 0, (int)width, s.k, (int)s.rows, 1.0f,
                    dU, (int)width, x + s.C, s.in, 1.0f, dp, s.k);
        lora_down(L, &s, x, p, U, 0.0f);
        for (int j = 0; j < s.P; j++)  // dB_j += s ddelta_j^T U_j
            fg_gemm(L->gemm, 1, 0, s.n[j], s.r, (int)s.rows,
                        L->lora_scale, dy + s.in + s.off[j], s.out, U + (size_t)j * s.r,
                        (int)width, 1.0f, (float *)part_B(&s, dp, j), s.r);
    }
    fg_free(U);
}

const LayerOps lora_ops = {"lora", lora_param_count, lora_forward, lora_jvp, lora_backward};
