// Elementwise activations: ReLU and GELU (tanh form). Both are y = f(x) with no parameters,
// so their jvp is ydot = f'(x) xdot and their backward dx = f'(x) dy; only f and f' differ
// (activation_math.h, shared with the GPU).
#include <string.h>

#include "activation_math.h"
#include "layer.h"

static size_t no_params(int in, int out) {
    (void)in, (void)out;
    return 0;
}

// One definition of the three functions per activation, from f and f'.
#define DEFINE_ACTIVATION(NAME, F, DF)                                                          \
    static void NAME##_forward(const Layer *L, const float *p, const float *x, float *y,       \
                               int B) {                                                        \
        (void)p;                                                                               \
        size_t n = (size_t)B * L->in;                                                          \
        _Pragma("omp parallel for simd if (n > 65536)") for (size_t i = 0; i < n; i++)         \
            y[i] = F(x[i]);                                                                    \
    }                                                                                          \
    static void NAME##_jvp(const Layer *L, const float *p, const float *pdot, const float *x,  \
                           const float *xdot, float *y, float *ydot, int B, int K) {           \
        (void)pdot;                                                                            \
        size_t n = (size_t)B * L->in;                                                          \
        NAME##_forward(L, p, x, y, B);                                                         \
        if (!xdot) {                                                                           \
            memset(ydot, 0, (size_t)K * n * sizeof(float));                                    \
            return;                                                                            \
        }                                                                                      \
        _Pragma("omp parallel for if (n > 65536)") for (size_t i = 0; i < n; i++) {            \
            float g = DF(x[i]);                                                                \
            for (int k = 0; k < K; k++) ydot[k * n + i] = g * xdot[k * n + i];                 \
        }                                                                                      \
    }                                                                                          \
    static void NAME##_backward(const Layer *L, const float *p, const float *x,                \
                                const float *dy, float *dx, float *dp, int B) {                \
        (void)p, (void)dp;                                                                     \
        if (!dx) return;                                                                       \
        size_t n = (size_t)B * L->in;                                                          \
        _Pragma("omp parallel for simd if (n > 65536)") for (size_t i = 0; i < n; i++)         \
            dx[i] = DF(x[i]) * dy[i];                                                          \
    }                                                                                          \
    const LayerOps NAME##_ops = {#NAME, no_params, NAME##_forward, NAME##_jvp, NAME##_backward};

DEFINE_ACTIVATION(relu, fg_relu, fg_relu_grad)
DEFINE_ACTIVATION(gelu, fg_gelu, fg_gelu_grad)
