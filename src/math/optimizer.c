#include "optimizer.h"

#include <math.h>

int optimizer_state_buffers(OptimizerKind kind) { return kind == OPT_ADAM ? 2 : 1; }

double lr_at(const OptimizerConfig *c, long step, long total_steps) {
    if (step < c->warmup_steps) return c->lr * (double)(step + 1) / c->warmup_steps;
    if (c->schedule == LR_CONSTANT) return c->lr;
    long span = total_steps - c->warmup_steps;
    double t = span > 1 ? (double)(step - c->warmup_steps) / (double)(span - 1) : 1.0;
    return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * (t > 1.0 ? 1.0 : t)));
}

double squared_norm(const float *x, size_t n) {
    double s = 0.0;
#pragma omp parallel for reduction(+ : s) if (n > 65536)
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

float optimizer_clip_scale(const OptimizerConfig *c, double norm2) {
    double norm = sqrt(norm2);
    return c->clip_norm > 0 && norm > c->clip_norm ? (float)(c->clip_norm / norm) : 1.0f;
}

OptScalars optimizer_scalars(const OptimizerConfig *c, long step, double lr) {
    OptScalars s = {0};
    s.decay = (float)(1.0 - lr * c->weight_decay);
    if (c->kind == OPT_SGD) {
        s.mu = (float)c->momentum;
        s.a = (float)lr;
        return s;
    }
    s.b1 = (float)c->beta1;
    s.b2 = (float)c->beta2;
    // Bias corrections folded into the step size: lr * sqrt(1-b2^t) / (1-b1^t).
    const double t = (double)step + 1;
    s.a = (float)(lr * sqrt(1.0 - pow(c->beta2, t)) / (1.0 - pow(c->beta1, t)));
    s.eps_hat = (float)((float)c->eps * sqrt(1.0 - pow(c->beta2, t)));
    return s;
}

void optimizer_step(const OptimizerConfig *c, long step, double lr, float *params, const float *from,
                    const float *g, float g_scale, float *state, size_t state_stride, size_t n) {
    const OptScalars s = optimizer_scalars(c, step, lr);
    if (c->kind == OPT_SGD) {
        float *vel = state;
#pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) params[i] = fg_sgd_update(s, g_scale * g[i], from[i], &vel[i]);
        return;
    }
    float *m = state, *v = state + state_stride;
#pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) params[i] = fg_adam_update(s, g_scale * g[i], from[i], &m[i], &v[i]);
}
