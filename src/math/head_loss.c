// The fused head and loss on the CPU (head_loss.h): one GEMM per block of vocabulary columns
// over all of the call's rows, then the row formulas of loss_math.h on the block. Rows run in
// parallel inside a block, each into its own slots; sums over rows run in order afterwards, so
// the result does not depend on the thread count.
#include "gemm.h"
#include "head_loss.h"

#include <math.h>

#include "head_math.h"

// A call's shape: rows of C features, `classes` scored columns of a table with C columns,
// `block` columns at a time.
typedef struct {
    int rows, C, classes, block, n_blocks;
    const struct Gemm *gemm;  // the layer's products (layer.h)
    const uint16_t *W16;      // the whole table's BF16 copy (Layer.params16), or NULL
} HeadShape;

static HeadShape head_shape(const Layer *L, int B) {
    HeadShape h = {B * layer_tokens(L), layer_in_token(L), L->classes, L->head_block, 0, L->gemm,
                   L->params16};
    h.n_blocks = (h.classes + h.block - 1) / h.block;
    return h;
}

static int block_width(const HeadShape *h, int b) { return FG_MIN(h->block, h->classes - b * h->block); }

// z [rows, nb] (+)= x [rows, C] W[j0 .. j0 + nb)ᵀ, W the table's rows from r0 on; W16: the
// whole table's BF16 copy (h->W16) or NULL (tangents; a call on a later row block).
static void block_logits(const HeadShape *h, const float *x, const float *W, const uint16_t *W16,
                         int r0, int j0, int nb, int rows, float beta, float *z) {
    fg_gemm_op(h->gemm, rows, nb, h->C, 1.0f, gemm_f32(x, h->C, 0),
               gemm_weights(W, r0 ? NULL : W16, (size_t)(j0 - r0) * h->C, h->C, 1), beta, z, nb);
}

// The scored blocks among the table's rows [r0, r0 + n): [*b0, *b1).
static void row_blocks(const HeadShape *h, int r0, int n, int *b0, int *b1) {
    *b0 = r0 / h->block;
    *b1 = FG_MIN(h->n_blocks, (r0 + n + h->block - 1) / h->block);
}

// Pass one over the scored columns among rows [r0, r0 + n) of the table (W: those rows): every
// row's running softmax carried on in run; the last block's logits stay in z.
static void stats_rows(const HeadShape *h, const float *W, int r0, int n, const float *x,
                       const Label *labels, RunningRow *run, float *z) {
    int b0, b1;
    row_blocks(h, r0, n, &b0, &b1);
    for (int b = b0; b < b1; b++) {
        int j0 = b * h->block, nb = block_width(h, b);
        block_logits(h, x, W, h->W16, r0, j0, nb, h->rows, 0.0f, z);
#pragma omp parallel for schedule(static) if ((long)h->rows * nb > 65536)
        for (int r = 0; r < h->rows; r++) fg_head_running(&run[r], z + (size_t)r * nb, j0, nb, labels[r]);
    }
}

// Every row's record (head_loss.h) from its running softmax; returns the mean loss.
static float finish_rows(const HeadShape *h, const RunningRow *run, const Label *labels,
                         float weight, float *rec, int *correct) {
    double loss = 0.0;
    int hits = 0;
    for (int r = 0; r < h->rows; r++) {
        int hit;
        loss += fg_head_record(&run[r], labels[r], weight, rec + (size_t)r * HEAD_RECORD, &hit);
        hits += hit;
    }
    if (correct) *correct = hits;
    return (float)(loss / h->rows);
}

// Pass one: every row's record and loss; the last block's logits stay in z [rows, block].
static float head_pass_stats(const HeadShape *h, const float *W, const float *x,
                             const Label *labels, float weight, float *rec, float *z,
                             int *correct) {
    RunningRow *run = fg_alloc_bytes((size_t)h->rows * sizeof(RunningRow));
    stats_rows(h, W, 0, h->classes, x, labels, run, z);
    float loss = finish_rows(h, run, labels, weight, rec, correct);
    fg_free(run);
    return loss;
}

size_t head_loss_work_floats(const Layer *L, int B, int K, int n_mb) {
    HeadShape h = head_shape(L, B);
    size_t block = (size_t)h.rows * FG_MIN(h.block, h.classes);
    size_t rows = (size_t)h.rows * (sizeof(RunningRow) + (size_t)K * sizeof(double)) / sizeof(float);
    return block * (1 + (size_t)K) + rows + block * (size_t)n_mb;
}

float head_loss_forward(const Layer *L, const float *W, const float *x, const Label *labels,
                        int B, float weight, float *rec, int *correct) {
    HeadShape h = head_shape(L, B);
    float *z = fg_alloc_floats((size_t)h.rows * FG_MIN(h.block, h.classes));
    float loss = head_pass_stats(&h, W, x, labels, weight, rec, z, correct);
    fg_free(z);
    return loss;
}

float head_loss_of_logits(const float *z, const Label *labels, int rows, LogitRows C, int block,
                          int *correct) {
    RunningRow *run = fg_alloc_bytes((size_t)rows * sizeof(RunningRow));
#pragma omp parallel for schedule(static) if ((long)rows * C.classes > 65536)
    for (int r = 0; r < rows; r++)
        for (int j0 = 0; j0 < C.classes; j0 += block)
            fg_head_running(&run[r], z + (size_t)r * C.stride + j0, j0, FG_MIN(block, C.classes - j0), labels[r]);
    float rec[HEAD_RECORD];
    double loss = 0.0;
    int hits = 0;
    for (int r = 0; r < rows; r++) {  // finish_rows' sum, one record at a time
        int hit;
        loss += fg_head_record(&run[r], labels[r], 1.0f, rec, &hit);
        hits += hit;
    }
    fg_free(run);
    if (correct) *correct = hits;
    return (float)(loss / rows);
}

// y [rows, nb] += diag(coeff) u [rows, j0 .. j0 + nb) (coeff NULL: 1), u of key with a row of
// `vocab` values per token: the activity tangent's block, element for element as the unfused
// layer's whole rows.
static void block_activity(TangentKey key, int vocab, int rows, const float *coeff, int T,
                           int j0, int nb, float *y) {
    for (int r = 0; r < rows; r++)
        tangent_axpy(key, (size_t)r * vocab + j0, (size_t)nb, coeff ? coeff[r / T] : 1.0f, y + (size_t)r * nb);
}

// zd [K, rows, nb] = xdot_k W_blockᵀ + t's terms, in the unfused layers' order: the linear's
// GEMMs (perturb_weight), then its low-rank terms (perturb_lowrank) or activity tangents.
static void block_tangents(const Layer *L, const HeadShape *h, const float *W, int r0,
                           const HeadTangents *t, const float *x, const float *xdot, int K, int j0,
                           int nb, float *zd) {
    size_t plane = (size_t)h->rows * nb, stride = t && t->wdot_stride ? t->wdot_stride : L->param_count;
    if (xdot) block_logits(h, xdot, W, h->W16, r0, j0, nb, K * h->rows, 0.0f, zd);
    else for (size_t i = 0; i < K * plane; i++) zd[i] = 0.0f;
    for (int k = 0; t && k < K; k++) {
        float *zk = zd + k * plane;
        if (t->Wdot) block_logits(h, x, t->Wdot + k * stride, NULL, r0, j0, nb, h->rows, 1.0f, zk);
        if (t->At)
            fg_gemm(L->gemm, 0, 0, h->rows, nb, t->rank,
                        1.0f / sqrtf((float)t->rank), t->P + (size_t)k * h->rows * t->rank, t->rank,
                        t->At + (size_t)k * t->rank * L->vocab + j0, L->vocab, 1.0f, zk, nb);
        if (t->activity) {
            TangentKey kk = *t->activity;
            kk.k = (uint32_t)k;
            block_activity(kk, L->vocab, h->rows, NULL, 1, j0, nb, zk);
        }
    }
}


// One block: the records first, then d with p_j = exp(z_j - zmax) * inv from them, the logits
// still in z: loss.c's formulas, bit for bit.
static float jvp_one_block(const Layer *L, const HeadShape *h, const float *W, const float *x,
                           const float *xdot, const Label *labels, int K, float weight,
                           const HeadTangents *t, float *rec, float *z, float *zd, double *row_d) {
    float loss = head_pass_stats(h, W, x, labels, weight, rec, z, NULL);
    int nb = block_width(h, 0);
    block_tangents(L, h, W, 0, t, x, xdot, K, 0, nb, zd);
#pragma omp parallel for schedule(static) if ((long)h->rows * nb > 65536)
    for (int r = 0; r < h->rows; r++)
        for (int k = 0; k < K; k++)
            row_d[(size_t)k * h->rows + r] = fg_head_jvp_block(rec + (size_t)r * HEAD_RECORD, z + (size_t)r * nb,
                                                               zd + ((size_t)k * h->rows + r) * nb, 0, nb, 0.0);
    return loss;
}

// A call's running state over the table's row blocks (head_rows_*): each row's running softmax,
// then its K running sums S and label tangents zl (fg_head_running_jvp).
typedef struct {
    RunningRow *run;
    double *S;
    float *zl;
} HeadRun;

static HeadRun head_run(const HeadShape *h, int K, void *state) {
    HeadRun r = {.run = state};
    r.S = (double *)(r.run + h->rows);
    r.zl = (float *)(r.S + (size_t)K * h->rows);
    return r;
}

// The online JVP over the scored columns among rows [r0, r0 + n) of the table: each block's
// logits and tangents formed once, S and zl carried on with the running rescaling.
static void jvp_rows(const Layer *L, const HeadShape *h, const float *W, int r0, int n,
                     const float *x, const float *xdot, const Label *labels, int K,
                     const HeadTangents *t, HeadRun *s, float *z, float *zd) {
    int b0, b1;
    row_blocks(h, r0, n, &b0, &b1);
    for (int b = b0; b < b1; b++) {
        int j0 = b * h->block, nb = block_width(h, b);
        block_logits(h, x, W, h->W16, r0, j0, nb, h->rows, 0.0f, z);
        block_tangents(L, h, W, r0, t, x, xdot, K, j0, nb, zd);
#pragma omp parallel for schedule(static) if ((long)h->rows * nb > 65536)
        for (int r = 0; r < h->rows; r++) {
            const float *zr = z + (size_t)r * nb;
            float old = s->run[r].zmax;
            fg_head_running(&s->run[r], zr, j0, nb, labels[r]);
            fg_head_running_jvp(&s->run[r], old, s->S + r, s->zl + r, (size_t)h->rows, K, zr,
                                zd + (size_t)r * nb, (size_t)h->rows * nb, j0, nb, labels[r]);
        }
    }
}

// The records, the loss and each row's derivative from the running state.
static float jvp_finish(const HeadShape *h, const HeadRun *s, const Label *labels, int K,
                        float weight, float *rec, double *row_d) {
    float loss = finish_rows(h, s->run, labels, weight, rec, NULL);
    for (size_t i = 0; i < (size_t)K * h->rows; i++)
        row_d[i] = fg_head_online_d(&s->run[i % h->rows], s->S[i], s->zl[i]);
    return loss;
}

// More blocks: one pass over the whole table (jvp_rows).
static float jvp_online(const Layer *L, const HeadShape *h, const float *W, const float *x,
                        const float *xdot, const Label *labels, int K, float weight,
                        const HeadTangents *t, float *rec, float *z, float *zd, double *row_d) {
    void *state = fg_alloc_bytes(head_rows_state_bytes(L, h->rows / layer_tokens(L), K));
    HeadRun s = head_run(h, K, state);
    jvp_rows(L, h, W, 0, h->classes, x, xdot, labels, K, t, &s, z, zd);
    float loss = jvp_finish(h, &s, labels, K, weight, rec, row_d);
    fg_free(state);
    return loss;
}

float head_loss_jvp(const Layer *L, const float *W, const float *x, const float *xdot,
                    const Label *labels, int B, int K, float weight, const HeadTangents *t,
                    float *rec, float *d) {
    HeadShape h = head_shape(L, B);
    int width = FG_MIN(h.block, h.classes);
    float *z = fg_alloc_floats((size_t)h.rows * width);
    float *zd = fg_alloc_floats((size_t)K * h.rows * width);
    double *row_d = fg_alloc_bytes((size_t)K * h.rows * sizeof(double));
    float loss = (h.n_blocks == 1 ? jvp_one_block : jvp_online)(L, &h, W, x, xdot, labels, K, weight, t,
                                                                rec, z, zd, row_d);
    fg_head_derivatives(row_d, h.rows, K, t && t->activity, d);
    fg_free(z);
    fg_free(zd);
    fg_free(row_d);
    return loss;
}

// dz [rows, nb] in place of the block's logits z: (p_j - [j == label]) / rows * weight.
static void block_adjoint(const HeadShape *h, const float *rec, int j0, int nb, float *z) {
#pragma omp parallel for schedule(static) if ((long)h->rows * nb > 65536)
    for (int r = 0; r < h->rows; r++) {
        const float *q = rec + (size_t)r * HEAD_RECORD;
        float *zr = z + (size_t)r * nb;
        for (int j = 0; j < nb; j++) zr[j] = fg_head_adjoint(q, zr[j], j0, j, h->rows);
    }
}

void head_rows_backward(const Layer *L, const float *W, int r0, int n, const float *x,
                        const float *rec, float *dx, float *dW, int B) {
    HeadShape h = head_shape(L, B);
    float *dz = fg_alloc_floats((size_t)h.rows * FG_MIN(h.block, h.classes));
    int b0, b1;
    row_blocks(&h, r0, n, &b0, &b1);
    for (int b = b0; b < b1 && (dx || dW); b++) {
        int j0 = b * h.block, nb = block_width(&h, b);
        size_t at = (size_t)(j0 - r0) * h.C;
        block_logits(&h, x, W, h.W16, r0, j0, nb, h.rows, 0.0f, dz);
        block_adjoint(&h, rec, j0, nb, dz);
        if (dx)  // the table's first block starts the sum
            fg_gemm_op(L->gemm, h.rows, h.C, nb, 1.0f, gemm_f32(dz, nb, 0),
                       gemm_weights(W, r0 ? NULL : h.W16, at, h.C, 0), b ? 1.0f : 0.0f, dx, h.C);
        if (dW)
            fg_gemm(L->gemm, 1, 0, nb, h.C, h.rows, 1.0f, dz, nb, x,
                        h.C, 1.0f, dW + at, h.C);
    }
    fg_free(dz);
}

void head_loss_backward(const Layer *L, const float *W, const float *x, const float *rec,
                        float *dx, float *dW, int B) {
    head_rows_backward(L, W, 0, L->vocab, x, rec, dx, dW, B);
}

size_t head_rows_state_bytes(const Layer *L, int B, int K) {
    size_t rows = (size_t)B * layer_tokens(L);
    return rows * (sizeof(RunningRow) + (size_t)K * (sizeof(double) + sizeof(float)));
}

void head_rows_forward(const Layer *L, const float *W, int r0, int n, const float *x,
                       const Label *labels, int B, void *state) {
    HeadShape h = head_shape(L, B);
    float *z = fg_alloc_floats((size_t)h.rows * FG_MIN(h.block, h.classes));
    stats_rows(&h, W, r0, n, x, labels, state, z);
    fg_free(z);
}

float head_rows_finish(const Layer *L, const void *state, const Label *labels, int B,
                       float weight, float *rec, int *correct) {
    HeadShape h = head_shape(L, B);
    return finish_rows(&h, state, labels, weight, rec, correct);
}

void head_rows_jvp(const Layer *L, const float *W, int r0, int n, const float *x,
                   const float *xdot, const Label *labels, int B, int K, const HeadTangents *t,
                   void *state) {
    HeadShape h = head_shape(L, B);
    int width = FG_MIN(h.block, h.classes);
    float *z = fg_alloc_floats((size_t)h.rows * width), *zd = fg_alloc_floats((size_t)K * h.rows * width);
    HeadRun s = head_run(&h, K, state);
    jvp_rows(L, &h, W, r0, n, x, xdot, labels, K, t, &s, z, zd);
    fg_free(z), fg_free(zd);
}

float head_rows_jvp_finish(const Layer *L, const void *state, const Label *labels, int B, int K,
                           float weight, int per_row, float *rec, float *d) {
    HeadShape h = head_shape(L, B);
    HeadRun s = head_run(&h, K, (void *)state);
    double *row_d = fg_alloc_bytes((size_t)K * h.rows * sizeof(double));
    float loss = jvp_finish(&h, &s, labels, K, weight, rec, row_d);
    fg_head_derivatives(row_d, h.rows, K, per_row, d);
    fg_free(row_d);
    return loss;
}

void head_loss_activity_grad(const Layer *L, TangentKey key, int K, int n_mb, int B,
                             const float *coeff, const float *x, float *dW) {
    HeadShape h = head_shape(L, n_mb * B);
    int T = layer_tokens(L), mb_rows = B * T;
    float *G = fg_alloc_floats((size_t)h.rows * FG_MIN(h.block, h.classes));
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < h.n_blocks; b++) {
        int j0 = b * h.block, nb = block_width(&h, b);
        for (size_t i = 0; i < (size_t)h.rows * nb; i++) G[i] = 0.0f;
        for (int m = 0; m < n_mb; m++)
            for (int k = 0; k < K; k++) {
                TangentKey kk = key;
                kk.microbatch = mb0 + (uint32_t)m, kk.k = (uint32_t)k;
                block_activity(kk, L->vocab, mb_rows, coeff + ((size_t)m * K + k) * B, T, j0, nb,
                               G + (size_t)m * mb_rows * nb);
            }
        fg_gemm(L->gemm, 1, 0, nb, h.C, h.rows, 1.0f, G, nb, x, h.C,
                    1.0f, dW + (size_t)j0 * h.C, h.C);
    }
    fg_free(G);
}

// The fused head's layer row (layer.h): its table [vocab, C], and op B from the records. Its
// forward and jvp take labels (head_loss_forward, head_loss_jvp), so the row has neither.
static size_t head_loss_param_count(const Layer *L) { return (size_t)L->vocab * layer_in_token(L); }

const LayerOps head_loss_ops = {"head_loss", head_loss_param_count, NULL, NULL, head_loss_backward};
