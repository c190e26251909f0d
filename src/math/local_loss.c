#include "local_loss.h"

#include <math.h>

#include "loss_math.h"
#include "tangent.h"

void local_heads_fill(uint32_t seed, int layer, int width, int groups, int classes, float *head) {
    TangentKey key = {.seed = seed, .stream = STREAM_LOCAL_HEAD, .layer = (uint32_t)layer};
    size_t n = (size_t)width * classes;
    tangent_fill(key, 0, n, head);
    float std = sqrtf(2.0f * (float)groups / (float)width);
    for (size_t i = 0; i < n; i++) head[i] *= std;
}

// Row r's loss of one group (S units of h_r), and its input gradient H_g e into grad [S].
static double group_loss(const float *head, const float *h, int S, int C, int label,
                         float *grad) {
    float logits[LOCAL_MAX_CLASSES], e[LOCAL_MAX_CLASSES];
    if (C < 1 || C > LOCAL_MAX_CLASSES) return 0.0;  // refused by stage_set_local_groups
    for (int c = 0; c < C; c++) {
        float z = 0.0f;
        for (int j = 0; j < S; j++) z += h[j] * head[(size_t)j * C + c];
        logits[c] = z;
    }
    SoftmaxRow row = fg_softmax_row(logits, C);
    for (int c = 0; c < C; c++) e[c] = fg_xent_grad(row, logits, label, c);
    for (int j = 0; j < S; j++) {
        float s = 0.0f;
        for (int c = 0; c < C; c++) s += head[(size_t)j * C + c] * e[c];
        grad[j] = s;
    }
    return fg_xent_loss(row, logits, label);
}

double local_loss_jvp(const float *head, const float *h, const float *hdot,
                      const Label *labels, int rows, int width, int groups, int classes, int K,
                      float *work, float *d) {
    int S = width / groups;
    double total = 0.0;
    for (int r = 0; r < rows; r++) {
        const float *hr = h + (size_t)r * width;
        for (int g = 0; g < groups; g++) {
            size_t j0 = (size_t)g * S;
            total += group_loss(head + j0 * classes, hr + j0, S, classes, labels[r], work + j0);
        }
        for (int k = 0; k < K; k++) {
            const float *tr = hdot + ((size_t)k * rows + r) * width;
            float *dr = d + ((size_t)k * rows + r) * groups;
            for (int g = 0; g < groups; g++) {
                float s = 0.0f;
                for (int j = g * S; j < (g + 1) * S; j++) s += work[j] * tr[j];
                dr[g] = s;
            }
        }
    }
    return total / rows;
}
