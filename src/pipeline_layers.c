// The stage's layers as the step engine sees them: which have parameters, acquiring and
// releasing them through the layer source (with the read-ahead of a streamed stage), and the
// per-layer buffers that op F keeps for op U (activity perturbation's layer inputs, the local
// losses' output-gradient estimates). Both the ops and the update use these; they use neither.
#include "pipeline_internal.h"

int next_param_layer(const Pipeline *p, int l, int dir) {
    for (l += dir; l >= p->stage.first && l < p->stage.last; l += dir)
        if (p->model->layers[l].param_count) return l;
    return -1;
}

int first_param_layer(const Pipeline *p) { return next_param_layer(p, p->stage.first - 1, 1); }

size_t local_est_floats(const Pipeline *p, int layer) {
    const Config *c = p->cfg;
    size_t n = 0;
    for (int l = p->stage.first; l < layer; l++)
        if (stage_local_head(&p->stage, l + 1)) n += (size_t)p->model->layers[l].out;
    return n * c->micro_batches * c->micro_batch;
}

float *local_est_of(const Pipeline *p, long step, int l) {
    return p->kept.local_est[p->kept.local_est[1] ? step & 1 : 0] + local_est_floats(p, l);
}

int release_layer(Pipeline *p, int l, unsigned parts, unsigned dirty, FgError *err) {
    return p->src.release(&p->src, l, parts, dirty, err);
}

int acquire_layer(Pipeline *p, int l, int dir, unsigned parts, LayerSlot *s, FgError *err) {
    int next = next_param_layer(p, l, dir);
    int rc = p->src.acquire(&p->src, l, parts, s, err);
    if (!rc && next >= 0) rc = p->src.prefetch(&p->src, next, parts, err);
    return rc;
}

float *kept_layer_inputs(const Pipeline *p, long step, int l) {
    int rows = p->cfg->micro_batches * p->cfg->micro_batch;
    return p->kept.act_inputs[p->kept.act_inputs[1] ? step & 1 : 0] + stage_activity_offset(&p->stage, l, rows);
}
