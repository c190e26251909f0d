// Optimizers over flat buffers (SGD with momentum, Adam/AdamW) and the learning-rate schedule.
#ifndef FGPIPE_OPTIMIZER_H
#define FGPIPE_OPTIMIZER_H

#include <stddef.h>

#include "optimizer_math.h"

typedef enum { OPT_SGD, OPT_ADAM } OptimizerKind;
typedef enum { LR_CONSTANT, LR_COSINE } LrSchedule;

typedef struct {
    OptimizerKind kind;
    double lr, min_lr;      // peak and floor of the schedule
    int warmup_steps;       // linear ramp from 0 to lr
    LrSchedule schedule;    // after warm-up: constant, or cosine decay to min_lr at the end
    double momentum;        // SGD
    double beta1, beta2, eps;  // Adam
    double weight_decay;    // decoupled (AdamW style), also applied by SGD
    double clip_norm;       // > 0: scale the gradient down to this L2 norm when larger
} OptimizerConfig;

// Optimizer state: one or two buffers the size of the parameters (momentum; Adam's m and v).
int optimizer_state_buffers(OptimizerKind kind);

double lr_at(const OptimizerConfig *c, long step, long total_steps);

// The factor that brings a gradient of squared norm `norm2` down to clip_norm (1 if off or
// already smaller). With pipeline stages, norm2 is the sum of the stages' parts.
float optimizer_clip_scale(const OptimizerConfig *c, double norm2);

// The scalars of step `step` (from 0) at learning rate lr, for optimizer_math.h's updates.
OptScalars optimizer_scalars(const OptimizerConfig *c, long step, double lr);

// One update of n parameters with gradient g. step counts from 0 (Adam's bias correction);
// state holds optimizer_state_buffers(kind) buffers of n floats, buffer i at state + i *
// state_stride (n when back to back; an out-of-core layer slot pads them for direct I/O).
// g_scale multiplies the gradient (the clip scale). The new weights go to params, computed
// from `from` (params itself: in place; another buffer keeps the weights before the step).
void optimizer_step(const OptimizerConfig *c, long step, double lr, float *params, const float *from,
                    const float *g, float g_scale, float *state, size_t state_stride, size_t n);

double squared_norm(const float *x, size_t n);

#endif
