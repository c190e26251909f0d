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

void optimizer_step(const OptimizerConfig *c, long step, double lr, float *params, const float *g,
                    float g_scale, float *state, size_t state_stride, size_t n) {
    const float decay = (float)(1.0 - lr * c->weight_decay);
    if (c->kind == OPT_SGD) {
        const float mu = (float)c->momentum, a = (float)lr;
        float *vel = state;
#pragma omp parallel for simd if (n > 65536)
        for (size_t i = 0; i < n; i++) {
            vel[i] = mu * vel[i] + g_scale * g[i];
            params[i] = decay * params[i] - a * vel[i];
        }
        return;
    }
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    // Bias corrections folded into the step size: lr * sqrt(1-b2^t) / (1-b1^t).
    const double t = (double)step + 1;
    const float a = (float)(lr * sqrt(1.0 - pow(c->beta2, t)) / (1.0 - pow(c->beta1, t)));
    const float eps_hat = (float)(eps * sqrt(1.0 - pow(c->beta2, t)));
    float *m = state, *v = state + state_stride;
#pragma omp parallel for simd if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        float gi = g_scale * g[i];
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        params[i] = decay * params[i] - a * m[i] / (sqrtf(v[i]) + eps_hat);
    }
}
