// The last stage's end of op F and of evaluation, two ways (LossEnd), chosen once at setup from
// the model's last layer: a head fused with the loss (LAYER_HEAD_LOSS) scored the labels in its
// own layer, so its records are the loss adjoints and the lane carries the loss and hits; or the
// layer's output is a row of logits per label, scored here.
#include "engine_ops.h"
#include "stash_policy.h"

static double sample_derivatives(Pipeline *p, const Lane *a, int rows, LogitRows C) {
    double loss = p->be->loss_jvp_rows(p->be, a->x, a->xdot, p->work.labels, rows, C, p->K, p->work.loss_d);
    pipeline_per_sample_means(p, p->work.loss_d, rows);
    return loss;
}

// A GPT's rows are its tokens: the loss is the mean over B x tokens next-byte predictions.
static int loss_rows(const Pipeline *p) { return p->cfg->training.micro_batch * p->model->tokens; }

// Scored in the head's layer: its records are kept for B.
static int scored_train(Pipeline *p, long step, const Lane *a, const size_t *order, size_t sample0,
                        double *loss_sum, FgError *err) {
    (void)order, (void)sample0, (void)err;
    const Backend *be = p->be;
    int rows = loss_rows(p), mb = a->microbatch, C = pipeline_adjoint_width(p);
    if (ops_keeps_stash(p, step, mb))
        be->copy(be, p->pool.dz[stash_ring(p, step)] + (size_t)mb * rows * C, a->x,
                 (size_t)rows * C * sizeof(float));
    *loss_sum += a->loss;
    return FG_OK;
}

// Logits: the loss (added to *loss_sum), the directional derivatives d into the step's scalars
// (fg), and for a selected micro-batch the loss adjoint dz, scaled for its average.
static int logits_train(Pipeline *p, long step, const Lane *a, const size_t *order, size_t sample0,
                        double *loss_sum, FgError *err) {
    const Backend *be = p->be;
    int rows = loss_rows(p), mb = a->microbatch;
    LogitRows C = model_logit_rows(p->model);
    int rc = ops_gather_microbatch(p, step, mb, order, sample0, NULL, p->work.host_labels, err);
    if (rc) return rc;
    be->upload(be, p->work.labels, p->work.host_labels, (size_t)rows * sizeof(Label));
    double loss;
    if (p->K) {
        int n_d = p->run.d_per_microbatch;
        loss = p->run.d_per_sample ? sample_derivatives(p, a, rows, C)
                                    : be->loss_jvp(be, a->x, a->xdot, p->work.labels, rows, C, p->K, p->work.loss_d);
        double *d = p->scalars + scalars_d(p) + (size_t)pipeline_global_microbatch(p, mb) * n_d;
        for (int i = 0; i < n_d; i++) d[i] = p->work.loss_d[i];
    } else {
        loss = be->loss_forward(be, a->x, p->work.labels, rows, C, NULL);
    }
    if (ops_keeps_stash(p, step, mb)) {  // scaled for its average (pipeline_adjoint_scale)
        float *dz = p->pool.dz[stash_ring(p, step)] + (size_t)mb * rows * C.stride;
        be->loss_backward(be, a->x, p->work.labels, rows, C, dz);
        be->scale(be, dz, pipeline_adjoint_scale(p), dz, (size_t)rows * C.stride);
    }
    *loss_sum += loss;
    return FG_OK;
}

// Evaluation: the lane's n rows of `chunk` (n x T labels; a GPT predicts every token).
static void scored_eval(Pipeline *p, const Dataset *ds, size_t chunk, int n, const Lane *a,
                        double *totals) {
    (void)p, (void)chunk;
    totals[0] += (double)a->loss * (double)(n * (size_t)ds->tokens);
    totals[1] += a->correct;
}

static void logits_eval(Pipeline *p, const Dataset *ds, size_t chunk, int n, const Lane *a,
                        double *totals) {
    size_t rows = (size_t)p->cfg->training.micro_batch, T = (size_t)ds->tokens;
    int correct;
    p->be->upload(p->be, p->work.labels, ds->labels + chunk * rows * T, (size_t)n * T * sizeof(Label));
    totals[0] += (double)p->be->loss_forward(p->be, a->x, p->work.labels, n * (int)T,
                                             model_logit_rows(p->model), &correct) * (double)(n * T);
    totals[1] += correct;
}

static const LossEnd scored_in_layer = {scored_train, scored_eval};
static const LossEnd from_logits = {logits_train, logits_eval};

const LossEnd *loss_end_of(const Pipeline *p) {
    return p->stage.plan[p->model->n_layers - 1].scores ? &scored_in_layer : &from_logits;
}
