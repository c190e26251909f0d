// Elementwise activations, f and f', for the CPU (layer_activation.c, layer_swiglu.c) and the GPU
// (cuda/layers_cuda.cu). Both backends call these, so they evaluate the same float
// operations in the same order (no FMA contraction: -ffp-contract=off / nvcc --fmad=false);
// only expf (SiLU's) comes from each side's own libm. GELU's tanh is fg_tanh below, plain
// arithmetic, so the CPU's `omp simd` loops vectorize it with the same bits as a scalar call.
#ifndef FGPIPE_ACTIVATION_MATH_H
#define FGPIPE_ACTIVATION_MATH_H

#include <math.h>

#include "host_device.h"

FG_HD float fg_relu(float x) { return x > 0.0f ? x : 0.0f; }
FG_HD float fg_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

// 2^k as a float, for -126 <= k <= 127.
FG_HD float fg_pow2i(int k) {
    union {
        int i;
        float f;
    } u = {.i = (k + 127) << 23};
    return u.f;
}

// tanh(x) within 1.35 ulp of the exact value over every float (glibc's tanhf: 2.2; checked
// against double tanh over all of [0, 10), odd by construction), with +, *, / and rintf alone
// (a select, no branch, no table): 35x glibc's tanhf in a vectorized loop here, where tanhf
// (with its expm1f) was a sixth of a bf16 GPT-2 step (docs/results/cpu.md). |x| < 0.625:
// x + x^3 Q(x^2), Q fitted for relative error; else 1 - 2 / (e^2|x| + 1), e^y = 2^k e^r with
// r = y - k ln 2 in two parts (Cody-Waite) and e^r a degree-6 fit, |x| clamped at 10 (tanh
// rounds to 1 there). NaN gets the polynomial and stays NaN.
FG_HD float fg_tanh(float x) {
    float a = fabsf(x), s = x * x;
    float q = -5.796964280e-03f;
    q = q * s + 2.072027512e-02f;
    q = q * s + -5.376414955e-02f;
    q = q * s + 1.333172768e-01f;
    q = q * s + -3.333329260e-01f;
    float small = x + x * (s * q);
    float y = 2.0f * (a < 10.0f ? a : 10.0f);
    float k = rintf(y * 1.442695041f);
    float r = y - k * 0.693145751953125f;  // ln 2's high part: k * it is exact
    r = r - k * 1.428606820e-06f;           // and its low part
    float p = 1.383670256e-03f;
    p = p * r + 8.374782279e-03f;
    p = p * r + 4.166822508e-02f;
    p = p * r + 1.666642129e-01f;
    p = p * r + 4.999999106e-01f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    float e = p * fg_pow2i((int)k);
    float big = copysignf(1.0f - 2.0f / (e + 1.0f), x);
    return a >= 0.625f ? big : small;
}

// gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh form (GPT-2's).
#define FG_GELU_C 0.7978845608f  // sqrt(2/pi)
#define FG_GELU_A 0.044715f

FG_HD float fg_gelu(float x) {
    return 0.5f * x * (1.0f + fg_tanh(FG_GELU_C * (x + FG_GELU_A * x * x * x)));
}

FG_HD float fg_gelu_grad(float x) {
    float t = fg_tanh(FG_GELU_C * (x + FG_GELU_A * x * x * x));
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * FG_GELU_C * (1.0f + 3.0f * FG_GELU_A * x * x);
}

// silu(g) = g sigmoid(g) (Llama's SwiGLU gate, layer_swiglu.c) and its derivative
// s (1 + g (1 - s)), s = sigmoid(g).
FG_HD float fg_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }
FG_HD float fg_silu(float g) { return g * fg_sigmoid(g); }
FG_HD float fg_silu_grad(float g) {
    float s = fg_sigmoid(g);
    return s * (1.0f + g * (1.0f - s));
}

#endif
