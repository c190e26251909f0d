// Softmax + cross-entropy, mean over the micro-batch.
#include <math.h>
#include <stdlib.h>

#include "layer.h"

// Writes the softmax of one row into prob and returns -log prob[label].
static float softmax_row(const float *z, int C, int label, float *prob) {
    float zmax = z[0];
    for (int j = 1; j < C; j++) zmax = z[j] > zmax ? z[j] : zmax;
    double sum = 0.0;
    for (int j = 0; j < C; j++) {
        prob[j] = expf(z[j] - zmax);
        sum += prob[j];
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < C; j++) prob[j] *= inv;
    return (float)(log(sum) - (z[label] - zmax));
}

static int argmax(const float *z, int C) {
    int best = 0;
    for (int j = 1; j < C; j++) best = z[j] > z[best] ? j : best;
    return best;
}

// One walk over the rows serves all three entry points: the loss, and optionally the
// directional derivatives d[k] = sum_r (p_r - e_label) . zdot_k,r / B and the gradient.
static float loss_walk(const float *z, const float *zdot, const unsigned char *labels, int B,
                       int C, int K, float *d, float *dz, int *correct) {
    float *prob = malloc((size_t)C * sizeof(float));  // heap: C may be large
    double loss = 0.0, dsum[K > 0 ? K : 1];
    int hits = 0;
    for (int k = 0; k < K; k++) dsum[k] = 0.0;
    for (int r = 0; r < B; r++) {
        const float *zr = z + (size_t)r * C;
        loss += softmax_row(zr, C, labels[r], prob);
        hits += argmax(zr, C) == labels[r];
        prob[labels[r]] -= 1.0f;  // now d(loss_r)/dz_r
        if (dz)
            for (int j = 0; j < C; j++) dz[(size_t)r * C + j] = prob[j] / B;
        for (int k = 0; d && k < K; k++) {
            const float *zd = zdot + ((size_t)k * B + r) * C;
            double s = 0.0;
            for (int j = 0; j < C; j++) s += (double)prob[j] * zd[j];
            dsum[k] += s;
        }
    }
    for (int k = 0; d && k < K; k++) d[k] = (float)(dsum[k] / B);
    free(prob);
    if (correct) *correct = hits;
    return (float)(loss / B);
}

float loss_forward(const float *logits, const unsigned char *labels, int B, int C, int *correct) {
    return loss_walk(logits, NULL, labels, B, C, 0, NULL, NULL, correct);
}

float loss_jvp(const float *logits, const float *zdot, const unsigned char *labels, int B, int C,
               int K, float *d) {
    return loss_walk(logits, zdot, labels, B, C, K, d, NULL, NULL);
}

float loss_backward(const float *logits, const unsigned char *labels, int B, int C, float *dz) {
    return loss_walk(logits, NULL, labels, B, C, 0, NULL, dz, NULL);
}
