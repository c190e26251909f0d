// Op F of the head fused with the loss (LAYER_HEAD_LOSS, head_loss.h): the stage's last layer
// scores the labels the caller passes in its HeadScore, with the tangents its perturbation's
// row makes (full weight, low-rank, activity: made block by block) or none (frozen).
#include "perturbation.h"

void stage_head_forward(Stage *st, int l, const float *p, const uint16_t *p16,
                        const ParamTangents *tangents, HeadScore *h, const float *x,
                        const float *xdot, float *rec, int rows) {
    const Layer Lw = layer_with_weights16(&st->model->layers[l], p16), *L = &Lw;
    const Backend *be = st->be;
    if (!tangents) {
        h->loss = be->head_forward(be, L, p, x, h->labels, rows, h->weight, rec, &h->correct);
        return;
    }
    TangentKey key;  // what activity tangents point at during the call
    HeadTangents t = {0};
    if (st->plan[l].trains)
        t = stage_perturbation(st, l)->head_tangents(st, l, tangents, x, rows, &key);
    h->loss = be->head_jvp(be, L, p, x, xdot, h->labels, rows, st->tangents, h->weight, &t, rec, h->d);
    h->correct = 0;
}
