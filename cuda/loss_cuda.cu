// Softmax cross-entropy on the GPU: one thread per row writes its loss, hit and directional
// derivatives (and dz); the host sums the rows in order, as loss.c does.
#include "cuda_internal.h"
#include "loss_math.h"

// Per row r, with loss_math.h's formulas (loss.c's): out[r] = loss_r, out[B + r] = hit_r,
// out[2B + k*B + r] = (p_r - e_label) . zdot_k,r; dz (when not NULL) = (p - e_label) / B.
// Rows lie C.stride apart; only the first C.classes columns are scored.
__global__ void loss_rows_kernel(const float *z, const float *zdot, const Label *labels, int B,
                                 LogitRows C, int K, double *out, float *dz) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= B) return;
    const float *zr = z + (size_t)r * C.stride;
    int label = labels[r];
    SoftmaxRow s = fg_softmax_row(zr, C.classes);
    out[r] = fg_xent_loss(s, zr, label);
    out[B + r] = s.best == label;
    for (int k = 0; k < K; k++)
        out[2 * B + (size_t)k * B + r] = fg_xent_jvp(s, zr, label, zdot + ((size_t)k * B + r) * C.stride,
                                                     C.classes);
    for (int j = 0; dz && j < C.stride; j++)  // the pad columns (j >= classes) get 0
        dz[(size_t)r * C.stride + j] = j < C.classes ? fg_xent_grad(s, zr, label, j) / B : 0.0f;
}

// d: the mean over rows per k; d_rows (instead): each row's value.
static float loss_rows(const Backend *be, const float *z, const float *zdot, const Label *labels,
                       int B, LogitRows C, int K, float *d, float *d_rows, float *dz, int *correct) {
    double *rows = cuda_partials(be, (size_t)(2 + K) * B);
    loss_rows_kernel<<<(B + 127) / 128, 128, 0, cuda_ctx(be)->stream>>>(z, zdot, labels, B, C, K, rows, dz);
    launch_check(be, "loss");
    const double *h = cuda_download_partials(be, (size_t)(2 + K) * B);
    double loss = 0.0;
    int hits = 0;
    for (int r = 0; r < B; r++) loss += h[r], hits += h[B + r] != 0.0;
    for (int k = 0; k < K && d_rows; k++)
        for (int r = 0; r < B; r++) d_rows[(size_t)k * B + r] = (float)h[2 * B + (size_t)k * B + r];
    for (int k = 0; k < K && d; k++) {
        double s = 0.0;
        for (int r = 0; r < B; r++) s += h[2 * B + (size_t)k * B + r];
        d[k] = (float)(s / B);
    }
    if (correct) *correct = hits;
    return (float)(loss / B);
}

float cuda_loss_forward(const Backend *be, const float *logits, const Label *labels, int B,
                        LogitRows C, int *correct) {
    return loss_rows(be, logits, NULL, labels, B, C, 0, NULL, NULL, NULL, correct);
}

float cuda_loss_jvp(const Backend *be, const float *logits, const float *zdot,
                    const Label *labels, int B, LogitRows C, int K, float *d) {
    return loss_rows(be, logits, zdot, labels, B, C, K, d, NULL, NULL, NULL);
}

float cuda_loss_jvp_rows(const Backend *be, const float *logits, const float *zdot,
                         const Label *labels, int B, LogitRows C, int K, float *d_rows) {
    return loss_rows(be, logits, zdot, labels, B, C, K, NULL, d_rows, NULL, NULL);
}

float cuda_loss_backward(const Backend *be, const float *logits, const Label *labels, int B,
                         LogitRows C, float *dz) {
    return loss_rows(be, logits, NULL, labels, B, C, 0, NULL, NULL, dz, NULL);
}
