// Low-rank weight perturbation of a linear layer (perturbation.h, stage.h): what op F adds to
// the layer's output tangent, what op U adds to the estimate, and their dots with a reference.
// A low-rank tangent V = At^T Bt / sqrt(r) is never formed in F: x V^T = ((x Bt^T) At) / sqrt(r).
// A linear layer's weight is [n, k] per token (layer.h); on a sequence every token row of the
// micro-batch takes the same tangent, reading the branch inside the wider token row.
#include <math.h>

#include "linear_shape.h"
#include "perturbation.h"

// One tangent's work: At [r, n], Bt [r, k], vb [n], then either x Bt^T [token rows, r] (F) or
// Bt c_W^T [r, n] (dots).
typedef struct {
    int n, k, out_offset;  // the weight's shape, where the branch output sits in a token
    float *At, *Bt, *vb, *product;
} Factors;

// The plan of layer L of the stage's model.
static const LayerPlan *plan_of(const Stage *st, const Layer *L) { return &st->plan[L - st->model->layers]; }

static Factors factors_at(const Stage *st, const Layer *L) {
    size_t r = (size_t)st->tangent_rank;
    LinearShape s = linear_shape(L, 1);
    Factors f = {.n = s.n, .k = s.k, .out_offset = s.out_offset, .At = st->lowrank_work};
    if (plan_of(st, L)->scores) f.n = L->vocab, f.out_offset = 0;  // the fused head's table [vocab, C]
    f.Bt = f.At + r * f.n;
    f.vb = f.Bt + r * f.k;
    f.product = f.vb + f.n;
    return f;
}

int stage_layer_lowrank(const Stage *st, const Layer *L) {
    return st->tangent_rank > 0 && plan_of(st, L)->lowrank;
}

void stage_set_tangent_rank(Stage *st, int rank) {
    const Backend *be = st->be;
    st->tangent_rank = rank;
    if (!rank || st->lowrank_work) return;
    size_t most = 0, rows = 0;
    for (int l = st->first; l < st->last; l++) {
        const Layer *L = &st->model->layers[l];
        if (!stage_layer_lowrank(st, L)) continue;
        Factors f = factors_at(st, L);
        size_t token_rows = (size_t)st->max_rows * layer_tokens(L);
        size_t product = (size_t)rank * FG_MAX((size_t)f.n, token_rows);
        most = FG_MAX(most, (size_t)rank * (f.n + f.k) + f.n + product);
        rows = FG_MAX(rows, token_rows);
        if (plan_of(st, L)->scores)  // every tangent's At and x Btᵀ at once (lowrank_head_tangents)
            st->head_factors = backend_alloc_floats(be, (size_t)st->tangents * rank * (f.n + token_rows));
    }
    st->lowrank_work = backend_alloc_floats(be, FG_MAX(most, 1));
    st->ones = backend_alloc_floats(be, FG_MAX(rows, 1));
    float *host = fg_alloc_floats(FG_MAX(rows, 1));
    for (size_t i = 0; i < rows; i++) host[i] = 1.0f;
    be->upload(be, st->ones, host, rows * sizeof(float));
    fg_free(host);
}

// The factors of tangent (key.microbatch, key.k) of layer key.layer.
static Factors make_factors(const Stage *st, const Layer *L, TangentKey key) {
    const Backend *be = st->be;
    Factors f = factors_at(st, L);
    size_t r = (size_t)st->tangent_rank;
    key.stream = STREAM_LOWRANK_OUT;
    be->tangent_fill(be, key, r * f.n, f.At, NULL);
    key.stream = STREAM_LOWRANK_IN;
    be->tangent_fill(be, key, r * f.k, f.Bt, NULL);
    if (!L->no_bias) {
        key.stream = STREAM_LOWRANK_BIAS;
        be->tangent_fill(be, key, (size_t)f.n, f.vb, NULL);
    }
    return f;
}

// c . v = <c_W, At^T Bt> / sqrt(r) + c_b . vb, with <c_W, At^T Bt> = <At, Bt c_W^T>.
static double factors_dot(const Stage *st, const Layer *L, const Factors *f, const float *c) {
    const Backend *be = st->be;
    int r = st->tangent_rank;
    be->matmul(be, 0, 1, r, f->n, f->k, 1.0f, f->Bt, f->k, c, f->k, 0.0f, f->product, f->n);
    double dot = be->dot(be, f->At, f->product, (size_t)r * f->n) / sqrt((double)r);
    if (!L->no_bias) dot += be->dot(be, f->vb, c + (size_t)f->n * f->k, (size_t)f->n);
    return dot;
}

void stage_lowrank_jvp_term(Stage *st, const Layer *L, TangentKey key, const float *x, int rows,
                            float *ydot, const float *ref, double *ref_dot) {
    const Backend *be = st->be;
    int r = st->tangent_rank, token_rows = rows * layer_tokens(L);
    int in = layer_in_token(L), out = layer_out_token(L);
    Factors f = make_factors(st, L, key);
    float *y_branch = ydot + f.out_offset;
    be->matmul(be, 0, 1, token_rows, r, f.k, 1.0f, x + L->carry, in, f.Bt, f.k, 0.0f, f.product, r);
    be->matmul(be, 0, 0, token_rows, f.n, r, 1.0f / sqrtf((float)r), f.product, r, f.At, f.n, 1.0f,
               y_branch, out);
    if (!L->no_bias)  // + vb on every token row
        be->matmul(be, 0, 0, token_rows, f.n, 1, 1.0f, st->ones, 1, f.vb, f.n, 1.0f, y_branch, out);
    if (ref) *ref_dot += factors_dot(st, L, &f, ref);
}

void stage_lowrank_add_tangents(const Stage *st, const Layer *L, TangentKey key, int n_mb,
                                const float *coeff, float *grad_l) {
    const Backend *be = st->be;
    int K = st->tangents, r = st->tangent_rank;
    float scale = 1.0f / sqrtf((float)r);
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < K; k++) {
            key.microbatch = mb0 + (uint32_t)b, key.k = (uint32_t)k;
            Factors f = make_factors(st, L, key);
            float c = coeff[b * K + k];
            be->matmul(be, 1, 0, f.n, f.k, r, c * scale, f.At, f.n, f.Bt, f.k, 1.0f, grad_l, f.k);
            if (!L->no_bias) be->axpy(be, grad_l + (size_t)f.n * f.k, c, f.vb, (size_t)f.n);
        }
}

void stage_lowrank_tangent_dots(const Stage *st, const Layer *L, TangentKey key, int n_mb,
                                const float *x_l, double *dots) {
    int K = st->tangents;
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < K; k++) {
            key.microbatch = mb0 + (uint32_t)b, key.k = (uint32_t)k;
            Factors f = make_factors(st, L, key);
            dots[b * K + k] += factors_dot(st, L, &f, x_l);
        }
}

// F of a fused head: every tangent's At_k and P_k = x Bt_kᵀ into st->head_factors, for the
// head's blocks; ref_dots[k] += ref . v_k.
static HeadTangents lowrank_head_tangents(Stage *st, int l, const ParamTangents *t,
                                          const float *x, int rows, TangentKey *unused) {
    (void)unused;
    const Backend *be = st->be;
    const Layer *L = &st->model->layers[l];
    TangentKey key = t->key;
    key.layer = (uint32_t)l;
    int r = st->tangent_rank, K = st->tangents, token_rows = rows * layer_tokens(L);
    size_t at = (size_t)r * L->vocab, p = (size_t)token_rows * r;
    float *At = st->head_factors, *P = At + (size_t)K * at;
    for (int k = 0; k < K; k++) {  // stage_lowrank_jvp_term's products, kept for the blocks
        key.k = (uint32_t)k;
        Factors f = make_factors(st, L, key);
        be->matmul(be, 0, 1, token_rows, r, f.k, 1.0f, x, f.k, f.Bt, f.k, 0.0f, P + k * p, r);
        be->copy(be, At + k * at, f.At, at * sizeof(float));
        if (t->ref) t->ref_dots[k] += factors_dot(st, L, &f, t->ref);
    }
    return (HeadTangents){.At = At, .P = P, .rank = r};
}

// F: the layer's JVP without parameter tangents, then each tangent's x V_k^T + vb_k.
static void lowrank_jvp(Stage *st, int l, const float *p, const uint16_t *p16, const ParamTangents *t,
                        const float *x, const float *xdot, float *y, float *ydot, int rows) {
    const Layer *L = &st->model->layers[l];
    const Layer Lw = layer_with_weights16(L, p16);
    st->be->jvp(st->be, &Lw, p, NULL, x, xdot, y, ydot, rows, st->tangents);
    TangentKey key = t->key;
    key.layer = (uint32_t)l;
    for (int k = 0; k < st->tangents; k++) {
        double ref_dot = 0.0;
        key.k = (uint32_t)k;
        stage_lowrank_jvp_term(st, L, key, x, rows, ydot + (size_t)k * rows * L->out, t->ref,
                               &ref_dot);
        if (t->ref) t->ref_dots[k] += ref_dot;
    }
}

// U: every replica's micro-batches, regenerated from the seed.
static void lowrank_estimate(const Stage *st, int l, const PerturbEstimate *e, float *grad_l) {
    TangentKey key = tangent_key(e->seed, e->step, 0, l);
    stage_lowrank_add_tangents(st, &st->model->layers[l], key, e->all_microbatches, e->coeff,
                               grad_l);
}

const PerturbationOps perturb_lowrank = {
    .name = "lowrank", .jvp = lowrank_jvp, .estimate = lowrank_estimate,
    .head_tangents = lowrank_head_tangents};
