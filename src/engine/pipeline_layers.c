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
    return layers_release_block(p, l, 0, parts, dirty, err);
}

int layers_release_block(Pipeline *p, int l, int b, unsigned parts, unsigned dirty, FgError *err) {
    return p->src.release(&p->src, l, b, parts, dirty, err);
}

int layers_writes(const Pipeline *p) { return !p->src.reads_only; }

int layers_held(const Pipeline *p, int l) { return l >= p->stage.first && l < p->stage.last; }

int layers_sync(Pipeline *p, FgError *err) { return p->src.sync ? p->src.sync(&p->src, err) : FG_OK; }

// The next layer with parameters that a wave in direction dir visits after l (-1: none): the
// backward stops at the stage's backward_first (the frozen layers below it take no B).
static int wave_next_param(const Pipeline *p, int l, int dir) {
    int next = layers_next_param(p, l, dir);
    return dir < 0 && next < p->stage.backward_first ? -1 : next;
}

// Reads block b of layer l ahead; *stop: it found no slot, so the read-ahead ends here (reads
// in the wave's order).
static int prefetch_in_order(Pipeline *p, int l, int b, unsigned parts, int *stop, FgError *err) {
    int rc = p->src.prefetch(&p->src, l, b, parts, err);
    *stop = rc || !p->src.in_slot(&p->src, l, b, parts);
    return rc;
}

// The stage's first layer l read ahead by a wave that wraps, up to `room` reads (*n: how many):
// the row blocks the next step's forward reads (tt.ends.wrap_blocks), else its first; what that
// forward acquires of it.
static int prefetch_wrap(Pipeline *p, int l, int room, int *n, int *stop, FgError *err) {
    const unsigned char *reads = p->tt.ends.wrap_blocks;
    int rc = FG_OK;
    *n = 0, *stop = 0;
    for (int b = 0; b < layer_blocks(&p->model->layers[l]) && !*stop && *n < room; b++)
        if (reads ? reads[b] : b == 0) rc = prefetch_in_order(p, l, b, p->tt.ends.forward_parts, stop, err), ++*n;
    return rc;
}

// Reads ahead as deep as the slots allow: the disk stays busy while layers of little work
// (norms, the small layers of a block) pass quickly. A layer in row blocks reads its next block
// first (next_block; -1: none).
int layers_acquire_block_then(Pipeline *p, int l, int b, int next_block, int dir, unsigned parts,
                              LayerSlot *s, FgError *err) {
    int rc = p->src.acquire(&p->src, l, b, parts, s, err);
    int depth = FG_MAX(p->src.read_ahead, 1);
    if (!rc && next_block >= 0) {
        rc = p->src.prefetch(&p->src, l, next_block, parts, err);
        depth--;
    }
    // At the wave's end the next wave's first layers, so that it does not start by waiting for
    // a read (tt.ends): a forward from the stage's first layer, or a backward from its last (a
    // layer in row blocks from its block 0).
    int next = wave_next_param(p, l, dir), walk = dir, beyond = 0, stop = 0;  // beyond: in the next wave
    for (int k = 0, n = 1; !rc && !stop && k < depth; k += n) {
        n = 1;
        if (next < 0 && !beyond && p->tt.ends.wraps[dir > 0]) {
            next = layers_first_param(p), walk = 1, beyond = 1;
            rc = prefetch_wrap(p, next, depth - k, &n, &stop, err);
        } else if (next < 0 && !beyond && dir > 0 && p->tt.ends.turns) {
            next = layers_next_param(p, p->stage.last, -1), walk = -1, beyond = 1;
            if (next >= 0) rc = prefetch_in_order(p, next, 0, p->upd.layer[next].backward_parts, &stop, err);
        } else if (next < 0) {
            break;
        } else {
            unsigned next_parts = walk > 0 ? p->tt.ends.forward_parts : p->upd.layer[next].backward_parts;
            rc = prefetch_in_order(p, next, 0, beyond ? next_parts : parts, &stop, err);
        }
        next = wave_next_param(p, next, walk);
    }
    // A large layer (the token table) read only when the wave comes within read_ahead of it
    // would stall the wave for its whole read: it goes in as soon as a large slot is free, once
    // the disk has read what the wave needs before it (queued first, it would delay those).
    for (int ahead = wave_next_param(p, l, dir); !rc && p->src.large && ahead >= 0;
         ahead = wave_next_param(p, ahead, dir))
        if (p->src.large[ahead]) {
            rc = p->src.prefetch_when_idle(&p->src, ahead, 0, parts, err);
            break;
        }
    return rc;
}

int layers_acquire_block(Pipeline *p, int l, int b, int dir, unsigned parts, LayerSlot *s,
                         FgError *err) {
    int next = b + 1 < layer_blocks(&p->model->layers[l]) ? b + 1 : -1;
    return layers_acquire_block_then(p, l, b, next, dir, parts, s, err);
}

int layers_acquire(Pipeline *p, int l, int dir, unsigned parts, LayerSlot *s, FgError *err) {
    if (layer_blocks(&p->model->layers[l]) > 1)
        return fg_fail(err, FG_ERR_INTERNAL, "layer %s is in %d row blocks (table_block_rows): this "
                       "pass takes it whole, which is not written", p->model->layers[l].name,
                       layer_blocks(&p->model->layers[l]));
    return layers_acquire_block(p, l, 0, dir, parts, s, err);
}

float *layers_saved(const Pipeline *p, long step, int l) {
    int rows = p->cfg->training.micro_batches * p->cfg->training.micro_batch;
    return p->saved.blocks[p->saved.blocks[1] ? step & 1 : 0] + stage_saved_offset(&p->stage, l, rows);
}
