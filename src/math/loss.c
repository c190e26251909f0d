// Softmax + cross-entropy, mean over the micro-batch; the row formulas are loss_math.h's,
// shared with the GPU.
#include "layer.h"
#include "loss_math.h"

// One walk over the rows serves all three entry points: the loss, and optionally the
// directional derivatives d[k] = sum_r (p_r - e_label) . zdot_k,r / B and the gradient.
// d_rows (when not NULL) takes each row's derivative instead of d's mean. Rows run in parallel
// (a GPT-2 vocabulary makes each one 50257 exponentials), each into its own slots; the sums
// then run over the rows in order, so the result does not depend on the thread count.
static float loss_walk(const float *z, const float *zdot, const Label *labels, int B,
                       LogitRows C, int K, float *d, float *d_rows, float *dz, int *correct) {
    const int need_d = (d || d_rows) && K > 0;
    float *row_loss = fg_alloc_floats((size_t)B);
    double *row_d = need_d ? fg_alloc_bytes((size_t)K * B * sizeof(double)) : NULL;
    int *hit = fg_alloc_bytes((size_t)B * sizeof(int));
#pragma omp parallel for schedule(static) if ((long)B * C.classes > 65536)
    for (int r = 0; r < B; r++) {
        const float *zr = z + (size_t)r * C.stride;
        int label = labels[r];
        float *dzr = dz ? dz + (size_t)r * C.stride : NULL;  // first the row's exponentials
        SoftmaxRow s = fg_softmax_row_keep(zr, C.classes, dzr);
        row_loss[r] = fg_xent_loss(s, zr, label);
        hit[r] = s.best == label;
        for (int j = 0; dzr && j < C.stride; j++)
            dzr[j] = j < C.classes ? fg_xent_grad_of(s, dzr[j], label, j) / B : 0.0f;
        for (int k = 0; need_d && k < K; k++)
            row_d[(size_t)k * B + r] = fg_xent_jvp(s, zr, label, zdot + ((size_t)k * B + r) * C.stride, C.classes);
    }
    double loss = 0.0;
    int hits = 0;
    for (int r = 0; r < B; r++) loss += row_loss[r], hits += hit[r];
    for (int k = 0; need_d && k < K; k++) {
        double sum = 0.0;
        for (int r = 0; r < B; r++) {
            sum += row_d[(size_t)k * B + r];
            if (d_rows) d_rows[(size_t)k * B + r] = (float)row_d[(size_t)k * B + r];
        }
        if (d) d[k] = (float)(sum / B);
    }
    if (correct) *correct = hits;
    fg_free(row_loss);
    fg_free(row_d);
    fg_free(hit);
    return (float)(loss / B);
}

float loss_forward(const float *logits, const Label *labels, int B, LogitRows C, int *correct) {
    return loss_walk(logits, NULL, labels, B, C, 0, NULL, NULL, NULL, correct);
}

float loss_jvp(const float *logits, const float *zdot, const Label *labels, int B, LogitRows C,
               int K, float *d) {
    return loss_walk(logits, zdot, labels, B, C, K, d, NULL, NULL, NULL);
}

float loss_jvp_rows(const float *logits, const float *zdot, const Label *labels, int B,
                    LogitRows C, int K, float *d_rows) {
    return loss_walk(logits, zdot, labels, B, C, K, NULL, d_rows, NULL, NULL);
}

float loss_backward(const float *logits, const Label *labels, int B, LogitRows C, float *dz) {
    return loss_walk(logits, NULL, labels, B, C, 0, NULL, NULL, dz, NULL);
}
