// Op F of the head fused with the loss (head_loss.h): the stage's last layer scores the labels
// the caller put in st->head. It takes full weight tangents, activity tangents (made block by
// block, on the CPU) or none (frozen); the run plan keeps the head unfused for low-rank ones.
#include <stdio.h>
#include <stdlib.h>

#include "perturbation.h"

void stage_head_forward(Stage *st, int l, const float *p, const ParamTangents *tangents,
                        const float *x, const float *xdot, float *rec, int rows) {
    const Layer *L = &st->model->layers[l];
    const Backend *be = st->be;
    HeadScore *h = st->head;
    const int perturbed = tangents && L->param_count && !L->frozen;
    const PerturbationOps *ops = perturbed ? stage_perturbation(st, l) : NULL;
    if (!h || !be->head_forward || (ops && ops != &perturb_weight && ops != &perturb_activity)) {
        fprintf(stderr, "fgpipe: internal error: the fused head %s runs without labels, on a "
                "backend without it, or with a perturbation it does not take\n", L->name);
        abort();
    }
    if (!tangents) {
        h->loss = be->head_forward(be, L, p, x, h->labels, rows, h->weight, rec, &h->correct);
        return;
    }
    TangentKey key = tangents->key;  // activity: the tangent on the head's logits
    key.layer = (uint32_t)l;
    key.stream = STREAM_ACTIVITY;
    if (ops == &perturb_weight) perturb_weight_tangents(st, l, tangents);
    h->loss = be->head_jvp(be, L, p, ops == &perturb_weight ? st->pdot : NULL, x, xdot, h->labels,
                           rows, st->tangents, h->weight, ops == &perturb_activity ? &key : NULL,
                           rec, h->d);
    h->correct = 0;
}
