// Elementwise activations: ReLU and GELU (tanh form). Both are y = f(x) with no parameters,
// so their jvp is ydot = f'(x) xdot and their backward dx = f'(x) dy; only f and f' differ.
#include <math.h>
#include <string.h>

#include "layer.h"

static size_t no_params(int in, int out) {
    (void)in, (void)out;
    return 0;
}

static inline float relu(float x) { return x > 0.0f ? x : 0.0f; }
static inline float relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

// gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
static const float GELU_C = 0.7978845608f, GELU_A = 0.044715f;
static inline float gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_C * (x + GELU_A * x * x * x)));
}
static inline float gelu_grad(float x) {
    float t = tanhf(GELU_C * (x + GELU_A * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * GELU_A * x * x);
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

DEFINE_ACTIVATION(relu, relu, relu_grad)
DEFINE_ACTIVATION(gelu, gelu, gelu_grad)
