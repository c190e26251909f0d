// The stage's layers as the step engine sees them: which have parameters, acquiring and
// releasing them through the layer source (with the read-ahead of a streamed stage), and the
// per-layer blocks that op F keeps for op U (what the layer's perturbation keeps:
// perturbation.h). Both the ops and the update use these; they use neither.
#include "engine_ops.h"

int layers_next_param(const Pipeline *p, int l, int dir) {
    for (l += dir; l >= p->stage.first && l < p->stage.last; l += dir)
        if (p->model->layers[l].param_count) return l;
    return -1;
}

int layers_first_param(const Pipeline *p) { return layers_next_param(p, p->stage.first - 1, 1); }

int layers_release(Pipeline *p, int l, unsigned parts, unsigned dirty, FgError *err) {
    return p->src.release(&p->src, l, parts, dirty, err);
}

int layers_writes(const Pipeline *p) { return !p->src.reads_only; }

int layers_sync(Pipeline *p, FgError *err) { return p->src.sync ? p->src.sync(&p->src, err) : FG_OK; }

// Reads ahead as deep as the slots allow: the disk stays busy while layers of little work
// (norms, the small layers of a block) pass quickly.
int layers_acquire(Pipeline *p, int l, int dir, unsigned parts, LayerSlot *s, FgError *err) {
    int rc = p->src.acquire(&p->src, l, parts, s, err);
    int depth = FG_MAX(p->src.read_ahead, 1);
    for (int next = layers_next_param(p, l, dir), k = 0; !rc && next >= 0 && k < depth; k++) {
        rc = p->src.prefetch(&p->src, next, parts, err);
        next = layers_next_param(p, next, dir);
    }
    // A large layer (the token table) read only when the wave comes within read_ahead of it
    // would stall the wave for its whole read: it goes in as soon as a large slot is free.
    for (int next = layers_next_param(p, l, dir); !rc && p->src.large_above && next >= 0;
         next = layers_next_param(p, next, dir))
        if (p->model->layers[next].param_count > p->src.large_above) {
            rc = p->src.prefetch(&p->src, next, parts, err);
            break;
        }
    return rc;
}

float *layers_kept(const Pipeline *p, long step, int l) {
    int rows = p->cfg->training.micro_batches * p->cfg->training.micro_batch;
    return p->kept.blocks[p->kept.blocks[1] ? step & 1 : 0] + stage_kept_offset(&p->stage, l, rows);
}
