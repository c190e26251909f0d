// Weight tangents of a layer with parameters, full or low-rank (stage.h): what op F adds to a
// layer's output tangent, what op U adds to the estimate, and their dots with a reference.
// A low-rank tangent V = At^T Bt / sqrt(r) is never formed in F: x V^T = ((x Bt^T) At) / sqrt(r).
#include <math.h>

#include "stage.h"

// Work buffer layout for one tangent: At [r, out], Bt [r, in], vb [out], then either
// x Bt^T [rows, r] (F) or Bt c_W^T [r, out] (dots).
typedef struct {
    float *At, *Bt, *vb, *product;
} Factors;

static Factors factors_at(const Stage *st, const Layer *L) {
    size_t r = (size_t)st->tangent_rank;
    Factors f = {.At = st->lowrank_work};
    f.Bt = f.At + r * L->out;
    f.vb = f.Bt + r * L->in;
    f.product = f.vb + L->out;
    return f;
}

void stage_set_tangent_rank(Stage *st, int rank) {
    const Backend *be = st->be;
    st->tangent_rank = rank;
    if (!rank || st->lowrank_work) return;
    size_t most = 0;
    for (int l = st->first; l < st->last; l++) {
        const Layer *L = &st->model->layers[l];
        size_t product = (size_t)rank * FG_MAX((size_t)L->out, (size_t)st->max_rows);
        if (L->param_count) most = FG_MAX(most, (size_t)rank * (L->out + L->in) + L->out + product);
    }
    st->lowrank_work = backend_alloc_floats(be, most);
    st->ones = backend_alloc_floats(be, (size_t)st->max_rows);
    float *host = fg_alloc_floats((size_t)st->max_rows);
    for (int i = 0; i < st->max_rows; i++) host[i] = 1.0f;
    be->upload(be, st->ones, host, (size_t)st->max_rows * sizeof(float));
    fg_free(host);
}

// The factors of tangent (key.microbatch, key.k) of layer key.layer.
static Factors make_factors(const Stage *st, const Layer *L, TangentKey key) {
    const Backend *be = st->be;
    Factors f = factors_at(st, L);
    size_t r = (size_t)st->tangent_rank;
    key.stream = STREAM_LOWRANK_OUT;
    be->tangent_fill(be, key, r * L->out, f.At, NULL);
    key.stream = STREAM_LOWRANK_IN;
    be->tangent_fill(be, key, r * L->in, f.Bt, NULL);
    key.stream = STREAM_LOWRANK_BIAS;
    be->tangent_fill(be, key, (size_t)L->out, f.vb, NULL);
    return f;
}

// c . v = <c_W, At^T Bt> / sqrt(r) + c_b . vb, with <c_W, At^T Bt> = <At, Bt c_W^T>.
static double factors_dot(const Stage *st, const Layer *L, const Factors *f, const float *c) {
    const Backend *be = st->be;
    int r = st->tangent_rank;
    be->matmul(be, 0, 1, r, L->out, L->in, 1.0f, f->Bt, c, 0.0f, f->product);
    return be->dot(be, f->At, f->product, (size_t)r * L->out) / sqrt((double)r) +
           be->dot(be, f->vb, c + (size_t)L->in * L->out, (size_t)L->out);
}

void stage_lowrank_jvp_term(Stage *st, const Layer *L, TangentKey key, const float *x, int rows,
                            float *ydot, const float *ref, double *ref_dot) {
    const Backend *be = st->be;
    int r = st->tangent_rank;
    Factors f = make_factors(st, L, key);
    be->matmul(be, 0, 1, rows, r, L->in, 1.0f, x, f.Bt, 0.0f, f.product);  // x Bt^T
    be->matmul(be, 0, 0, rows, L->out, r, 1.0f / sqrtf((float)r), f.product, f.At, 1.0f, ydot);
    be->matmul(be, 0, 0, rows, L->out, 1, 1.0f, st->ones, f.vb, 1.0f, ydot);  // + vb per row
    if (ref) *ref_dot += factors_dot(st, L, &f, ref);
}

void stage_layer_add_tangents(const Stage *st, int l, TangentKey key, int n_mb,
                              const float *coeff, float *grad_l) {
    const Backend *be = st->be;
    const Layer *L = &st->model->layers[l];
    int K = st->tangents;
    key.layer = (uint32_t)l;
    if (!st->tangent_rank) {
        be->tangent_axpy(be, key, n_mb, K, coeff, L->param_count, grad_l);
        return;
    }
    float scale = 1.0f / sqrtf((float)st->tangent_rank);
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < K; k++) {
            key.microbatch = mb0 + (uint32_t)b, key.k = (uint32_t)k;
            Factors f = make_factors(st, L, key);
            float c = coeff[b * K + k];
            be->matmul(be, 1, 0, L->out, L->in, st->tangent_rank, c * scale, f.At, f.Bt, 1.0f, grad_l);
            be->axpy(be, grad_l + (size_t)L->in * L->out, c, f.vb, (size_t)L->out);
        }
}

void stage_layer_tangent_dots(const Stage *st, int l, TangentKey key, int n_mb, const float *x_l,
                              double *dots) {
    const Backend *be = st->be;
    const Layer *L = &st->model->layers[l];
    int K = st->tangents;
    key.layer = (uint32_t)l;
    if (!st->tangent_rank) {
        be->tangent_dot(be, key, n_mb, K, L->param_count, x_l, dots);
        return;
    }
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < n_mb; b++)
        for (int k = 0; k < K; k++) {
            key.microbatch = mb0 + (uint32_t)b, key.k = (uint32_t)k;
            Factors f = make_factors(st, L, key);
            dots[b * K + k] += factors_dot(st, L, &f, x_l);
        }
}
