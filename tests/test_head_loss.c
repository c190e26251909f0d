// The GPT's head fused with its loss (src/math/head_loss.h) against the unfused linear layer
// and loss.c: the loss, the JVP's directional derivative and the backward's dx and dW, with one
// block (bit for bit), several blocks, a padded vocabulary and a vocabulary that is not a
// multiple of the block; then central differences and the dot-product test <1, J v> =
// <Jᵀ 1, v>, as tests/test_layers.c checks every layer; and activity and low-rank tangents on
// its logits. head_loss_of_logits on the unfused logits (fgpipe eval in memory) gives the fused
// loss and hits bit for bit, in every case.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backend.h"
#include "head_loss.h"
#include "layer.h"
#include "tangent.h"

enum { B = 2, T = 3, C = 8, ROWS = B * T, K = 2 };

typedef struct {
    int classes, vocab, block;
} Case;

typedef struct {
    Layer fused, plain;
    float *W, *Wdot, *x, *xdot;
    Label labels[ROWS];
    size_t n;  // parameters
} Head;

static void fill(uint32_t layer, float *v, size_t n, float std) {
    TangentKey key = {.seed = 7, .stream = STREAM_INIT, .layer = layer};
    for (size_t i = 0; i < n; i++) v[i] = 0;
    tangent_axpy(key, 0, n, std, v);
}

static Head make_head(Case c) {
    Head h = {0};
    Layer L = {.kind = LAYER_LINEAR, .in = T * C, .tokens = T, .no_bias = 1, .vocab = c.vocab,
               .classes = c.classes};
    h.plain = L, h.plain.out = T * c.vocab;
    h.fused = L, h.fused.kind = LAYER_HEAD_LOSS, h.fused.out = T * HEAD_RECORD, h.fused.head_block = c.block;
    h.n = layer_ops(&h.plain)->param_count(&h.plain);
    assert_int_equal(layer_ops(&h.fused)->param_count(&h.fused), h.n);
    h.plain.param_count = h.fused.param_count = h.n;  // (add_layer's, in a model)
    h.W = fg_alloc_floats(h.n), h.Wdot = fg_alloc_floats(K * h.n);
    h.x = fg_alloc_floats(ROWS * C), h.xdot = fg_alloc_floats(K * ROWS * C);
    fill(1, h.W, h.n, 0.5f);
    for (size_t i = (size_t)c.classes * C; i < h.n; i++) h.W[i] = 3.0f;  // pads: large, unscored
    fill(2, h.Wdot, K * h.n, 1.0f);
    fill(3, h.x, ROWS * C, 1.0f);
    fill(4, h.xdot, K * ROWS * C, 1.0f);
    for (int r = 0; r < ROWS; r++) h.labels[r] = (Label)((r * 7919 + 13) % c.classes);
    return h;
}

static void free_head(Head *h) {
    fg_free(h->W), fg_free(h->Wdot), fg_free(h->x), fg_free(h->xdot);
}

// The unfused computation: logits, loss.c, the linear layer's backward.
typedef struct {
    float loss, d[K], *dx, *dW;
    int correct;
    float loss_blocks;  // unfused: head_loss_of_logits over the fused head's blocks
    int correct_blocks;
} Result;

static Result unfused(const Head *h, int block, float weight) {
    LogitRows lr = {h->plain.classes, h->plain.vocab};
    Result r = {.dx = fg_alloc_floats(ROWS * C), .dW = fg_alloc_floats(h->n)};
    float *z = fg_alloc_floats((size_t)ROWS * lr.stride), *zd = fg_alloc_floats((size_t)K * ROWS * lr.stride);
    float *dz = fg_alloc_floats((size_t)ROWS * lr.stride);
    layer_ops(&h->plain)->forward(&h->plain, h->W, h->x, z, B);
    r.loss = loss_forward(z, h->labels, ROWS, lr, &r.correct);
    r.loss_blocks = head_loss_of_logits(z, h->labels, ROWS, lr, block, &r.correct_blocks);
    layer_ops(&h->plain)->jvp(&h->plain, h->W, h->Wdot, h->x, h->xdot, z, zd, B, K);
    assert_true(loss_jvp(z, zd, h->labels, ROWS, lr, K, r.d) == r.loss);
    loss_backward(z, h->labels, ROWS, lr, dz);
    for (size_t i = 0; i < (size_t)ROWS * lr.stride; i++) dz[i] *= weight;
    layer_ops(&h->plain)->backward(&h->plain, h->W, h->x, dz, r.dx, r.dW, B);
    fg_free(z), fg_free(zd), fg_free(dz);
    return r;
}

static Result fused(const Head *h, float weight) {
    Result r = {.dx = fg_alloc_floats(ROWS * C), .dW = fg_alloc_floats(h->n)};
    float rec[ROWS * HEAD_RECORD], rec2[ROWS * HEAD_RECORD];
    r.loss = head_loss_forward(&h->fused, h->W, h->x, h->labels, B, weight, rec, &r.correct);
    HeadTangents t = {.Wdot = h->Wdot};
    assert_true(head_loss_jvp(&h->fused, h->W, h->x, h->xdot, h->labels, B, K, weight, &t, rec2,
                              r.d) == r.loss);
    assert_memory_equal(rec, rec2, sizeof rec);
    // The backward's halves, as Bi and Bw run them.
    layer_ops(&h->fused)->backward(&h->fused, h->W, h->x, rec, r.dx, NULL, B);
    layer_ops(&h->fused)->backward(&h->fused, h->W, h->x, rec, NULL, r.dW, B);
    return r;
}

static void free_result(Result *r) { fg_free(r->dx), fg_free(r->dW); }

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-6); }

// Fused against unfused: equal bit for bit with one block and no padding (the loss and d with
// padding too), else within `tol` (relative to the largest magnitude of the vector).
static void compare(Case c, float tol) {
    Head h = make_head(c);
    Result u = unfused(&h, c.block, 0.25f), f = fused(&h, 0.25f);
    assert_true(u.loss_blocks == f.loss);  // any number of blocks: the same arithmetic
    assert_int_equal(u.correct_blocks, f.correct);
    if (c.block >= c.classes) {  // one block: the same GEMMs and row formulas
        assert_true(f.loss == u.loss);
        assert_memory_equal(f.d, u.d, sizeof f.d);
    }
    if (c.block >= c.classes && c.classes == c.vocab) {  // (unfused, dx sums the pad's zeros too)
        assert_memory_equal(f.dx, u.dx, ROWS * C * sizeof(float));
        assert_memory_equal(f.dW, u.dW, h.n * sizeof(float));
    }
    assert_int_equal(f.correct, u.correct);
    assert_true(rel(f.loss, u.loss) <= tol);
    for (int k = 0; k < K; k++)
        // d is a difference of terms of order 1 here (sum_j p_j zdot_j and zdot_label): its
        // rounding is measured against them, not against d.
        if (fabs(f.d[k] - u.d[k]) > tol * fmax(fabs(u.d[k]), 1.0)) fail_msg("V %d block %d: d[%d] fused %.9g, unfused %.9g", c.classes, c.block, k, f.d[k], u.d[k]);
    float mx = 0, mw = 0;
    for (int i = 0; i < ROWS * C; i++) mx = fmaxf(mx, fabsf(u.dx[i]));
    for (size_t i = 0; i < h.n; i++) mw = fmaxf(mw, fabsf(u.dW[i]));
    for (int i = 0; i < ROWS * C; i++)
        if (fabsf(f.dx[i] - u.dx[i]) > tol * mx) fail_msg("dx[%d]: fused %g, unfused %g", i, f.dx[i], u.dx[i]);
    for (size_t i = 0; i < h.n; i++) {
        if (fabsf(f.dW[i] - u.dW[i]) > tol * mw) fail_msg("dW[%zu]: fused %g, unfused %g", i, f.dW[i], u.dW[i]);
        if (i >= (size_t)c.classes * C) assert_true(f.dW[i] == 0.0f);  // pad rows: no gradient
    }
    free_result(&u), free_result(&f), free_head(&h);
}

static void test_one_block_bitwise(void **state) {
    (void)state;
    compare((Case){256, 256, HEAD_BLOCK_COLUMNS}, 0.0f);
    compare((Case){300, 320, 512}, 1e-6f);  // padded, one block
}

static void test_several_blocks(void **state) {
    (void)state;
    compare((Case){300, 320, 64}, 1e-6f);    // 5 blocks, the last of 44 columns, 20 pad columns
    compare((Case){1000, 1024, 128}, 1e-6f); // 8 blocks, the last of 104 columns
    compare((Case){2 * HEAD_BLOCK_COLUMNS + 100, 2 * HEAD_BLOCK_COLUMNS + 128, HEAD_BLOCK_COLUMNS}, 1e-6f);
}

// The table in row blocks (head_rows_*, for a table streamed a block at a time): blocks of 2, 3
// and 3 column blocks, called in ascending order, give the whole-table call's records, loss,
// d, dx and dW bit for bit.
static void test_row_blocks(void **state) {
    (void)state;
    Case c = {1000, 1024, 128};
    Head h = make_head(c);
    const Layer *L = &h.fused;
    const int cuts[] = {0, 256, 640, 1024};
    float rec[ROWS * HEAD_RECORD], rec2[ROWS * HEAD_RECORD], d[K], d2[K];
    int correct, correct2;
    float loss = head_loss_forward(L, h.W, h.x, h.labels, B, 0.25f, rec, &correct);
    void *run = fg_alloc_bytes(head_rows_state_bytes(L, B, K));
    for (int i = 0; i < 3; i++)
        head_rows_forward(L, h.W + (size_t)cuts[i] * C, cuts[i], cuts[i + 1] - cuts[i], h.x, h.labels, B, run);
    assert_true(head_rows_finish(L, run, h.labels, B, 0.25f, rec2, &correct2) == loss);
    assert_memory_equal(rec, rec2, sizeof rec);
    assert_int_equal(correct, correct2);
    HeadTangents t = {.Wdot = h.Wdot};
    assert_true(head_loss_jvp(L, h.W, h.x, h.xdot, h.labels, B, K, 0.25f, &t, rec, d) == loss);
    for (int i = 0; i < 3; i++) {
        HeadTangents tb = {.Wdot = h.Wdot + (size_t)cuts[i] * C, .wdot_stride = h.n};
        head_rows_jvp(L, h.W + (size_t)cuts[i] * C, cuts[i], cuts[i + 1] - cuts[i], h.x, h.xdot,
                      h.labels, B, K, &tb, run);
    }
    assert_true(head_rows_jvp_finish(L, run, h.labels, B, K, 0.25f, 0, rec2, d2) == loss);
    assert_memory_equal(rec, rec2, sizeof rec);
    assert_memory_equal(d, d2, sizeof d);
    float *dx = fg_alloc_floats(ROWS * C), *dW = fg_alloc_floats(h.n);
    float *dx2 = fg_alloc_floats(ROWS * C), *dW2 = fg_alloc_floats(h.n);
    head_loss_backward(L, h.W, h.x, rec, dx, dW, B);
    for (int i = 0; i < 3; i++)
        head_rows_backward(L, h.W + (size_t)cuts[i] * C, cuts[i], cuts[i + 1] - cuts[i], h.x, rec,
                           dx2, dW2 + (size_t)cuts[i] * C, B);
    assert_memory_equal(dx, dx2, ROWS * C * sizeof(float));
    assert_memory_equal(dW, dW2, h.n * sizeof(float));
    fg_free(run), fg_free(dx), fg_free(dW), fg_free(dx2), fg_free(dW2);
    free_head(&h);
}

// Central differences of the fused loss along (xdot_0, Wdot_0), in the direction's own scale,
// against the JVP; and the dot-product test: the JVP's d equals the backward's gradient (the
// adjoint of the scalar loss, weight 1) dotted with the direction.
static void test_derivatives(void **state) {
    (void)state;
    Case c = {300, 320, 64};
    Head h = make_head(c);
    float d[K], rec[ROWS * HEAD_RECORD];
    HeadTangents t = {.Wdot = h.Wdot};
    head_loss_jvp(&h.fused, h.W, h.x, h.xdot, h.labels, B, K, 1.0f, &t, rec, d);
    float *dx = fg_alloc_floats(ROWS * C), *dW = fg_alloc_floats(h.n);
    layer_ops(&h.fused)->backward(&h.fused, h.W, h.x, rec, dx, dW, B);
    for (int k = 0; k < K; k++) {
        double dot = 0;
        for (int i = 0; i < ROWS * C; i++) dot += (double)dx[i] * h.xdot[(size_t)k * ROWS * C + i];
        for (size_t i = 0; i < h.n; i++) dot += (double)dW[i] * h.Wdot[k * h.n + i];
        if (rel(dot, d[k]) > 1e-5) fail_msg("tangent %d: <J^T 1, v> %g, J v %g", k, dot, d[k]);
    }
    const double eps = 1e-2;
    float *W2 = fg_alloc_floats(h.n), *x2 = fg_alloc_floats(ROWS * C);
    double f[2];
    for (int s = 0; s < 2; s++) {
        double sign = s ? -eps : eps;
        for (size_t i = 0; i < h.n; i++) W2[i] = h.W[i] + (float)sign * h.Wdot[i];
        for (int i = 0; i < ROWS * C; i++) x2[i] = h.x[i] + (float)sign * h.xdot[i];
        f[s] = head_loss_forward(&h.fused, W2, x2, h.labels, B, 1.0f, rec, NULL);
    }
    double fd = (f[0] - f[1]) / (2 * eps);
    if (rel(fd, d[0]) > 2e-3) fail_msg("central difference %g, JVP %g", fd, d[0]);
    fg_free(W2), fg_free(x2), fg_free(dx), fg_free(dW), free_head(&h);
}

// Activity tangents on the head's logits (head_loss_jvp with a key, head_loss_activity_grad)
// against the unfused layer's: u added to whole rows of logits, loss_jvp_rows, and the
// estimate G = sum_k diag(coeff) u_k through the linear's weight half.
static void compare_activity(Case c, float tol) {
    enum { NMB = 2 };
    Head h = make_head(c);
    LogitRows lr = {c.classes, c.vocab};
    TangentKey key = activity_key(5, 3, 1, 7);
    float rec[ROWS * HEAD_RECORD], dr_f[K * ROWS], dr_u[K * ROWS];
    float *z = fg_alloc_floats((size_t)ROWS * c.vocab), *zd = fg_alloc_floats((size_t)K * ROWS * c.vocab);
    layer_ops(&h.plain)->jvp(&h.plain, h.W, NULL, h.x, h.xdot, z, zd, B, K);
    backend_cpu.tangent_add_rows(&backend_cpu, key, K, ROWS, c.vocab, NULL, zd, (size_t)ROWS * c.vocab, c.vocab);
    float lu = loss_jvp_rows(z, zd, h.labels, ROWS, lr, K, dr_u);
    HeadTangents t = {.activity = &key};
    float lf = head_loss_jvp(&h.fused, h.W, h.x, h.xdot, h.labels, B, K, 1.0f, &t, rec, dr_f);
    assert_true(rel(lf, lu) <= tol);
    for (int i = 0; i < K * ROWS; i++)
        if (fabs(dr_f[i] - dr_u[i]) > tol * fmax(fabs(dr_u[i]), 1.0))
            fail_msg("V %d block %d: row derivative %d fused %.9g, unfused %.9g", c.classes, c.block, i, dr_f[i], dr_u[i]);
    if (c.block >= c.classes) assert_memory_equal(dr_f, dr_u, sizeof dr_f);
    // The estimate over NMB micro-batches of kept inputs x (the same x twice).
    float coeff[NMB * K * B], *x2 = fg_alloc_floats((size_t)NMB * ROWS * C);
    for (int i = 0; i < NMB * K * B; i++) coeff[i] = 0.5f + 0.25f * (float)i;
    for (int m = 0; m < NMB; m++) memcpy(x2 + (size_t)m * ROWS * C, h.x, ROWS * C * sizeof(float));
    float *G = fg_alloc_floats((size_t)NMB * ROWS * c.vocab), tok[K * ROWS];
    float *dW_u = fg_alloc_floats(h.n), *dW_f = fg_alloc_floats(h.n);
    for (int m = 0; m < NMB; m++) {
        TangentKey km = key;
        km.microbatch += (uint32_t)m;
        for (int i = 0; i < K * ROWS; i++) tok[i] = coeff[m * K * B + i / T];
        backend_cpu.tangent_add_rows(&backend_cpu, km, K, ROWS, c.vocab, tok, G + (size_t)m * ROWS * c.vocab, 0, c.vocab);
    }
    for (size_t i = 0; i < (size_t)NMB * ROWS * c.vocab; i++)  // the pad columns: never scored
        if ((int)(i % c.vocab) >= c.classes) G[i] = 0.0f;
    layer_ops(&h.plain)->backward(&h.plain, NULL, x2, G, NULL, dW_u, NMB * B);
    head_loss_activity_grad(&h.fused, key, K, NMB, B, coeff, x2, dW_f);
    float mw = 0;
    for (size_t i = 0; i < h.n; i++) mw = fmaxf(mw, fabsf(dW_u[i]));
    for (size_t i = 0; i < h.n; i++)
        if (fabsf(dW_f[i] - dW_u[i]) > tol * mw) fail_msg("activity dW[%zu]: fused %g, unfused %g", i, dW_f[i], dW_u[i]);
    if (c.block >= c.classes && c.classes == c.vocab) assert_memory_equal(dW_f, dW_u, h.n * sizeof(float));
    fg_free(z), fg_free(zd), fg_free(x2), fg_free(G), fg_free(dW_u), fg_free(dW_f), free_head(&h);
}

static void test_activity(void **state) {
    (void)state;
    compare_activity((Case){256, 256, HEAD_BLOCK_COLUMNS}, 0.0f);  // bit for bit
    compare_activity((Case){300, 320, 64}, 1e-6f);
    compare_activity((Case){1000, 1024, 128}, 1e-6f);
}

// Low-rank weight tangents (perturb_lowrank.c's x V_kᵀ = P_k At_k / sqrt(r)) on the head's
// logits: the fused blocks against the same term added to whole rows of logits.
static void compare_lowrank(Case c, float tol) {
    enum { R = 3 };
    Head h = make_head(c);
    LogitRows lr = {c.classes, c.vocab};
    float *At = fg_alloc_floats((size_t)K * R * c.vocab), *P = fg_alloc_floats((size_t)K * ROWS * R);
    fill(8, At, (size_t)K * R * c.vocab, 1.0f);
    fill(9, P, (size_t)K * ROWS * R, 1.0f);
    float *z = fg_alloc_floats((size_t)ROWS * c.vocab), *zd = fg_alloc_floats((size_t)K * ROWS * c.vocab);
    layer_ops(&h.plain)->jvp(&h.plain, h.W, NULL, h.x, h.xdot, z, zd, B, K);
    for (int k = 0; k < K; k++)
        backend_cpu.matmul(&backend_cpu, 0, 0, ROWS, c.vocab, R, 1.0f / sqrtf((float)R), P + (size_t)k * ROWS * R, R,
                           At + (size_t)k * R * c.vocab, c.vocab, 1.0f, zd + (size_t)k * ROWS * c.vocab, c.vocab);
    float du[K], df[K], rec[ROWS * HEAD_RECORD];
    float lu = loss_jvp(z, zd, h.labels, ROWS, lr, K, du);
    HeadTangents t = {.At = At, .P = P, .rank = R};
    float lf = head_loss_jvp(&h.fused, h.W, h.x, h.xdot, h.labels, B, K, 1.0f, &t, rec, df);
    assert_true(rel(lf, lu) <= tol);
    for (int k = 0; k < K; k++)
        if (fabs(df[k] - du[k]) > tol * fmax(fabs(du[k]), 1.0))
            fail_msg("V %d block %d: low-rank d[%d] fused %.9g, unfused %.9g", c.classes, c.block, k, df[k], du[k]);
    if (c.block >= c.classes) assert_memory_equal(df, du, sizeof df);
    fg_free(At), fg_free(P), fg_free(z), fg_free(zd), free_head(&h);
}

static void test_lowrank(void **state) {
    (void)state;
    compare_lowrank((Case){256, 256, HEAD_BLOCK_COLUMNS}, 0.0f);  // bit for bit
    compare_lowrank((Case){300, 320, 64}, 1e-6f);
    compare_lowrank((Case){1000, 1024, 128}, 1e-6f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_block_bitwise),
        cmocka_unit_test(test_several_blocks),
        cmocka_unit_test(test_row_blocks),
        cmocka_unit_test(test_derivatives),
        cmocka_unit_test(test_activity),
        cmocka_unit_test(test_lowrank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
