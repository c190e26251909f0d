// Elementwise activations: ReLU and GELU (tanh form). Both are y = f(x) with no parameters,
// so their jvp is ydot = f'(x) xdot and their backward dx = f'(x) dy; only f and f' differ
// (activation_math.h, shared with the GPU). With carry c (layer.h) a token is [x (c), a] and
// the output [x, f(a)]: the carried part passes through unchanged, and so do its tangents and
// adjoints.
#include <string.h>

#include "activation_math.h"
#include "layer.h"

static size_t no_params(const Layer *L) {
    (void)L;
    return 0;
}

// Rows of `width` floats, the first `carry` of each passed through.
typedef struct {
    size_t rows;
    int width, carry;
} Span;

static Span span_of(const Layer *L, int B) {
    Span s = {(size_t)B * layer_tokens(L), layer_in_token(L), L->carry};
    return s;
}

static void pass_carry(const Span *s, size_t rows, const float *from, float *to) {
    for (size_t r = 0; s->carry && r < rows; r++)
        memcpy(to + r * s->width, from + r * s->width, (size_t)s->carry * sizeof(float));
}

enum { ACTIVATION_CHUNK = 256 };  // floats of f' a jvp keeps on the stack

// One definition of the three functions per activation, from f and f'. Loops run over the
// branch of every row (all of it without carry).
#define DEFINE_ACTIVATION(NAME, F, DF)                                                          \
    static void NAME##_forward(const Layer *L, const float *p, const float *x, float *y,       \
                               int B) {                                                        \
        (void)p;                                                                               \
        Span s = span_of(L, B);                                                                \
        pass_carry(&s, s.rows, x, y);                                                          \
        _Pragma("omp parallel for if (s.rows * s.width > 65536)")                              \
        for (size_t r = 0; r < s.rows; r++) {                                                  \
            const float *xr = x + r * s.width;                                                 \
            float *yr = y + r * s.width;                                                       \
            _Pragma("omp simd") for (int i = s.carry; i < s.width; i++) yr[i] = F(xr[i]);      \
        }                                                                                      \
    }                                                                                          \
    static void NAME##_jvp(const Layer *L, const float *p, const float *pdot, const float *x,  \
                           const float *xdot, float *y, float *ydot, int B, int K) {           \
        (void)pdot;                                                                            \
        Span s = span_of(L, B);                                                                \
        size_t n = s.rows * s.width;                                                           \
        NAME##_forward(L, p, x, y, B);                                                         \
        if (!xdot) {                                                                           \
            memset(ydot, 0, (size_t)K * n * sizeof(float));                                    \
            return;                                                                            \
        }                                                                                      \
        pass_carry(&s, K * s.rows, xdot, ydot);                                                \
        /* f' once per chunk of a row, then each tangent's chunk: unit strides for any K */    \
        _Pragma("omp parallel for if (n > 65536)")                                             \
        for (size_t r = 0; r < s.rows; r++) {                                                  \
            float g[ACTIVATION_CHUNK];                                                         \
            for (int i0 = s.carry; i0 < s.width; i0 += ACTIVATION_CHUNK) {                     \
                int m = s.width - i0 < ACTIVATION_CHUNK ? s.width - i0 : ACTIVATION_CHUNK;     \
                const float *xr = x + r * s.width + i0;                                        \
                _Pragma("omp simd") for (int i = 0; i < m; i++) g[i] = DF(xr[i]);              \
                for (int k = 0; k < K; k++) {                                                  \
                    const float *tr = xdot + k * n + r * s.width + i0;                         \
                    float *yr = ydot + k * n + r * s.width + i0;                               \
                    _Pragma("omp simd") for (int i = 0; i < m; i++) yr[i] = g[i] * tr[i];      \
                }                                                                              \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    static void NAME##_backward(const Layer *L, const float *p, const float *x,                \
                                const float *dy, float *dx, float *dp, int B) {                \
        (void)p, (void)dp;                                                                     \
        if (!dx) return;                                                                       \
        Span s = span_of(L, B);                                                                \
        pass_carry(&s, s.rows, dy, dx);                                                        \
        _Pragma("omp parallel for if (s.rows * s.width > 65536)")                              \
        for (size_t r = 0; r < s.rows; r++) {                                                  \
            const float *xr = x + r * s.width, *dyr = dy + r * s.width;                        \
            float *dxr = dx + r * s.width;                                                     \
            _Pragma("omp simd") for (int i = s.carry; i < s.width; i++)                        \
                dxr[i] = DF(xr[i]) * dyr[i];                                                   \
        }                                                                                      \
    }                                                                                          \
    const LayerOps NAME##_ops = {#NAME, no_params, NAME##_forward, NAME##_jvp, NAME##_backward};

DEFINE_ACTIVATION(relu, fg_relu, fg_relu_grad)
DEFINE_ACTIVATION(gelu, fg_gelu, fg_gelu_grad)
