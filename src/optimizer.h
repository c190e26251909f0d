// Optimizers over flat buffers (SGD with momentum, Adam/AdamW) and the learning-rate schedule.
#ifndef FGPIPE_OPTIMIZER_H
#define FGPIPE_OPTIMIZER_H

#include <stddef.h>

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
} OptimizerConfig;

// Optimizer state: one or two buffers the size of the parameters (momentum; Adam's m and v).
int optimizer_state_buffers(OptimizerKind kind);

double lr_at(const OptimizerConfig *c, long step, long total_steps);

// One update of n parameters with gradient g. step counts from 0 (Adam's bias correction);
// state holds optimizer_state_buffers(kind) buffers of n floats each, back to back.
void optimizer_step(const OptimizerConfig *c, long step, double lr, float *params, const float *g,
                    float *state, size_t n);

#endif
