// Fully connected layer on every token: h W^T + b, W [n, k] row-major then b [n] (unless
// L->no_bias) in the flat buffer. Without carry (the MLP) a token is h [k] and the output [n].
// With carry c (a transformer block, layer.h) a token is [x (c), h (k)] and the output
// [x, h W^T + b] or, residual, x + h W^T + b (then n = c). Every product is one GEMM over all
// rows, reading the branch with the token's stride.
#include <string.h>

#include "gemm.h"
#include "linear_shape.h"

static size_t linear_param_count(const Layer *L) {
    LinearShape s = linear_shape(L, 1);
    return (size_t)s.n * s.k + (L->no_bias ? 0 : (size_t)s.n);
}

// The output's carried part: a copy of the input's (residual layers add the branch into it).
static void copy_carry(const LinearShape *s, const float *x, float *y, int rows) {
    if (!s->c) return;
    for (int r = 0; r < rows; r++) memcpy(y + (size_t)r * s->out, x + (size_t)r * s->in, (size_t)s->c * sizeof(float));
}

// y's branch (+)= x's branch W^T over `rows` tokens; accumulate, or residual: add. W16: W's
// BF16 copy (NULL: none).
static void branch_matmul(const Layer *L, const LinearShape *s, const float *x, const float *W,
                          const uint16_t *W16, float *y, int rows, int accumulate) {
    fg_gemm_op(L->gemm, rows, s->n, s->k, 1.0f, gemm_f32(x + s->c, s->in, 0),
               gemm_weights(W, W16, 0, s->k, 1), accumulate ? 1.0f : 0.0f, y + s->out_offset, s->out);
}

// y's branch += the input's tail (a LoRA adapter's delta, layer_lora.c), over `rows` tokens.
static void add_tail(const LinearShape *s, const float *x, float *y, int rows) {
    int t = s->in - s->c - s->k;
    for (int r = 0; t && r < rows; r++) {
        const float *xr = x + (size_t)r * s->in + s->c + s->k;
        float *yr = y + (size_t)r * s->out + s->out_offset;
        for (int j = 0; j < t; j++) yr[j] += xr[j];
    }
}

static void add_bias(const LinearShape *s, float *y, const float *b, int rows) {
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * s->out + s->out_offset;
        for (int j = 0; j < s->n; j++) yr[j] += b[j];
    }
}

static void linear_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    LinearShape s = linear_shape(L, B);
    copy_carry(&s, x, y, s.rows);
    branch_matmul(L, &s, x, p, L->params16, y, s.rows, L->residual);
    add_tail(&s, x, y, s.rows);
    if (!L->no_bias) add_bias(&s, y, p + (size_t)s.n * s.k, s.rows);
}

// ydot_k = xdot_k's carry (+) xdot_k W^T + x Wdot_k^T + bdot_k
static void linear_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                       const float *xdot, float *y, float *ydot, int B, int K) {
    LinearShape s = linear_shape(L, B);
    size_t block = (size_t)s.rows * s.out;
    linear_forward(L, p, x, y, B);
    if (xdot) {  // all K blocks at once: they are K * rows tokens
        copy_carry(&s, xdot, ydot, K * s.rows);
        branch_matmul(L, &s, xdot, p, L->params16, ydot, K * s.rows, L->residual);
        add_tail(&s, xdot, ydot, K * s.rows);
    } else {
        memset(ydot, 0, K * block * sizeof(float));
    }
    if (!pdot) return;
    for (int k = 0; k < K; k++) {
        const float *Wdot = pdot + k * L->param_count;
        branch_matmul(L, &s, x, Wdot, NULL, ydot + k * block, s.rows, 1);
        if (!L->no_bias) add_bias(&s, ydot + k * block, Wdot + (size_t)s.n * s.k, s.rows);
    }
}

// dx = [dy's carry (residual: all of dy), dy_branch W, dy_branch (the tail's)];  dW += dy_branch^T h;
// db += column sums of dy_branch. Only dx reads W: the weight half (dx == NULL) runs without it.
static void linear_backward(const Layer *L, const float *p, const float *x, const float *dy,
                            float *dx, float *dp, int B) {
    LinearShape s = linear_shape(L, B);
    const float *dy_branch = dy + s.out_offset;
    if (dx) {
        for (int r = 0; s.c && r < s.rows; r++)
            memcpy(dx + (size_t)r * s.in, dy + (size_t)r * s.out, (size_t)s.c * sizeof(float));
        fg_gemm_op(L->gemm, s.rows, s.k, s.n, 1.0f, gemm_f32(dy_branch, s.out, 0),
                   gemm_weights(p, L->params16, 0, s.k, 0), 0.0f, dx + s.c, s.in);
        for (int r = 0; s.in > s.c + s.k && r < s.rows; r++)
            memcpy(dx + (size_t)r * s.in + s.c + s.k, dy_branch + (size_t)r * s.out,
                   (size_t)(s.in - s.c - s.k) * sizeof(float));
    }
    if (!dp) return;
    fg_gemm(L->gemm, 1, 0, s.n, s.k, s.rows, 1.0f, dy_branch, s.out,
                x + s.c, s.in, 1.0f, dp, s.k);
    if (L->no_bias) return;
    float *db = dp + (size_t)s.n * s.k;
    for (int r = 0; r < s.rows; r++) {
        const float *dyr = dy_branch + (size_t)r * s.out;
        for (int j = 0; j < s.n; j++) db[j] += dyr[j];
    }
}

const LayerOps linear_ops = {"linear", linear_param_count, linear_forward, linear_jvp,
                             linear_backward};
