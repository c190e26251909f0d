// Elementwise activations, f and f', for the CPU (layer_activation.c, layer_swiglu.c) and the GPU
// (cuda/layers_cuda.cu). Both backends call these, so they evaluate the same float
// operations in the same order (no FMA contraction: -ffp-contract=off / nvcc --fmad=false);
// only tanhf comes from each side's own libm.
#ifndef FGPIPE_ACTIVATION_MATH_H
#define FGPIPE_ACTIVATION_MATH_H

#include <math.h>

#include "host_device.h"

FG_HD float fg_relu(float x) { return x > 0.0f ? x : 0.0f; }
FG_HD float fg_relu_grad(float x) { return x > 0.0f ? 1.0f : 0.0f; }

// gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the tanh form (GPT-2's).
#define FG_GELU_C 0.7978845608f  // sqrt(2/pi)
#define FG_GELU_A 0.044715f

FG_HD float fg_gelu(float x) {
    return 0.5f * x * (1.0f + tanhf(FG_GELU_C * (x + FG_GELU_A * x * x * x)));
}

FG_HD float fg_gelu_grad(float x) {
    float t = tanhf(FG_GELU_C * (x + FG_GELU_A * x * x * x));
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
