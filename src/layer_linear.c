// Fully connected layer y = x W^T + b, W [out, in] row-major then b [out] in the flat buffer.
#include <cblas.h>
#include <string.h>

#include "layer.h"

static size_t linear_param_count(int in, int out) { return (size_t)in * out + out; }

// y [rows, out] = x [rows, in] W^T (+ y when accumulate)
static void matmul_wt(const float *x, const float *W, float *y, int rows, int in, int out,
                      float beta) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in, 1.0f, x, in, W, in, beta,
                y, out);
}

static void add_bias(float *y, const float *b, int rows, int out) {
    for (int r = 0; r < rows; r++) {
        float *yr = y + (size_t)r * out;
        for (int j = 0; j < out; j++) yr[j] += b[j];
    }
}

static void linear_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    matmul_wt(x, p, y, B, L->in, L->out, 0.0f);
    add_bias(y, p + (size_t)L->in * L->out, B, L->out);
}

// ydot_k = xdot_k W^T + x Wdot_k^T + bdot_k
static void linear_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                       const float *xdot, float *y, float *ydot, int B, int K) {
    size_t block = (size_t)B * L->out;
    linear_forward(L, p, x, y, B);
    if (xdot) matmul_wt(xdot, p, ydot, K * B, L->in, L->out, 0.0f);  // all K blocks at once
    else memset(ydot, 0, K * block * sizeof(float));
    if (!pdot) return;
    for (int k = 0; k < K; k++) {
        const float *Wdot = pdot + k * L->param_count;
        matmul_wt(x, Wdot, ydot + k * block, B, L->in, L->out, 1.0f);
        add_bias(ydot + k * block, Wdot + (size_t)L->in * L->out, B, L->out);
    }
}

// dx = dy W;  dW += dy^T x;  db += column sums of dy. Only dx reads W: the weight half
// (dx == NULL) runs without it.
static void linear_backward(const Layer *L, const float *p, const float *x, const float *dy,
                            float *dx, float *dp, int B) {
    int in = L->in, out = L->out;
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, dy, out, p, in,
                    0.0f, dx, in);
    if (!dp) return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, dy, out, x, in, 1.0f,
                dp, in);
    float *db = dp + (size_t)in * out;
    for (int r = 0; r < B; r++) {
        const float *dyr = dy + (size_t)r * out;
        for (int j = 0; j < out; j++) db[j] += dyr[j];
    }
}

const LayerOps linear_ops = {"linear", linear_param_count, linear_forward, linear_jvp,
                             linear_backward};
