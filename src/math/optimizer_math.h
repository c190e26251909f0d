// The optimizers' per-element updates, for the CPU (optimizer.c) and the GPU
// (cuda/vector_cuda.cu): the same float operations in the same order on both, sqrtf being
// correctly rounded on both (nvcc -prec-sqrt=true), so an update is the same bits anywhere.
#ifndef FGPIPE_OPTIMIZER_MATH_H
#define FGPIPE_OPTIMIZER_MATH_H

#include <math.h>

#include "host_device.h"

// The scalars of one step, the same for every element: optimizer_scalars (optimizer.h)
// computes them once on the host, in double, and rounds them to float.
typedef struct {
    float decay;         // 1 - lr * weight_decay (decoupled weight decay)
    float a;             // step size: lr (SGD); lr with Adam's bias corrections folded in
    float mu;            // SGD momentum
    float b1, b2;        // Adam's decay rates
    float eps_hat;       // Adam's eps with the second moment's bias correction folded in
} OptScalars;

// SGD with momentum, g already scaled: vel <- mu vel + g; returns decay p - a vel.
FG_HD float fg_sgd_update(OptScalars s, float g, float p, float *vel) {
    *vel = s.mu * *vel + g;
    return s.decay * p - s.a * *vel;
}

// Adam/AdamW, g already scaled: the moments m and v; returns decay p - a m / (sqrt v + eps_hat).
FG_HD float fg_adam_update(OptScalars s, float g, float p, float *m, float *v) {
    *m = s.b1 * *m + (1.0f - s.b1) * g;
    *v = s.b2 * *v + (1.0f - s.b2) * g * g;
    return s.decay * p - s.a * *m / (sqrtf(*v) + s.eps_hat);
}

#endif
