// Op F of the head fused with the loss (head_loss.h): the stage's last layer scores the labels
// the caller put in st->head, with the tangents of its perturbation (full weight, low-rank,
// activity: made block by block) or none (frozen).
#include <stdio.h>
#include <stdlib.h>

#include "perturbation.h"

// The tangents of the head's logits that its perturbation adds (weight: into st->pdot).
static HeadTangents head_tangents(Stage *st, int l, const PerturbationOps *ops,
                                  const ParamTangents *t, const float *x, int rows,
                                  TangentKey *key) {
    *key = t->key;
    key->layer = (uint32_t)l;
    if (ops == &perturb_weight) {
        perturb_weight_tangents(st, l, t);
        return (HeadTangents){.Wdot = st->pdot};
    }
    if (ops == &perturb_lowrank)
        return stage_lowrank_head_tangents(st, &st->model->layers[l], *key, x, rows, t->ref, t->ref_dots);
    key->stream = STREAM_ACTIVITY;
    return (HeadTangents){.activity = key};
}

void stage_head_forward(Stage *st, int l, const float *p, const ParamTangents *tangents,
                        const float *x, const float *xdot, float *rec, int rows) {
    const Layer *L = &st->model->layers[l];
    const Backend *be = st->be;
    HeadScore *h = st->head;
    const int perturbed = tangents && L->param_count && !L->frozen;
    const PerturbationOps *ops = perturbed ? stage_perturbation(st, l) : NULL;
    if (!h || !be->head_forward || (ops && ops != &perturb_weight && ops != &perturb_lowrank &&
                                    ops != &perturb_activity)) {
        fprintf(stderr, "fgpipe: internal error: the fused head %s runs without labels, on a "
                "backend without it, or with a perturbation it does not take\n", L->name);
        abort();
    }
    if (!tangents) {
        h->loss = be->head_forward(be, L, p, x, h->labels, rows, h->weight, rec, &h->correct);
        return;
    }
    TangentKey key;
    HeadTangents t = ops ? head_tangents(st, l, ops, tangents, x, rows, &key) : (HeadTangents){0};
    h->loss = be->head_jvp(be, L, p, x, xdot, h->labels, rows, st->tangents, h->weight, &t, rec, h->d);
    h->correct = 0;
}
