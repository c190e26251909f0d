// Op F of the head fused with the loss (head_loss.h): the stage's last layer scores the labels
// the caller put in st->head. It takes full weight tangents, or none (frozen); the run plan
// keeps the head unfused for the perturbations it does not take (activity, low-rank).
#include <stdio.h>
#include <stdlib.h>

#include "perturbation.h"

void stage_head_forward(Stage *st, int l, const float *p, const ParamTangents *tangents,
                        const float *x, const float *xdot, float *rec, int rows) {
    const Layer *L = &st->model->layers[l];
    const Backend *be = st->be;
    HeadScore *h = st->head;
    const int perturbed = tangents && L->param_count && !L->frozen;
    if (!h || !be->head_forward || (perturbed && stage_perturbation(st, l) != &perturb_weight)) {
        fprintf(stderr, "fgpipe: internal error: the fused head %s runs without labels, on a "
                "backend without it, or with a perturbation it does not take\n", L->name);
        abort();
    }
    if (!tangents) {
        h->loss = be->head_forward(be, L, p, x, h->labels, rows, h->weight, rec, &h->correct);
        return;
    }
    if (perturbed) perturb_weight_tangents(st, l, tangents);
    h->loss = be->head_jvp(be, L, p, perturbed ? st->pdot : NULL, x, xdot, h->labels, rows,
                           st->tangents, h->weight, rec, h->d);
    h->correct = 0;
}
