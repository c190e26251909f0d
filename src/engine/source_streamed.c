// The streamed layer source (DESIGN section 6, docs/out-of-core.md): the stage's weights live
// in a layer store on local flash and pass through a few memory slots; a second store holds
// the per-step part (the update's gradient, lag 1's previous weights), rewritten every step.
//
// Weights-store versions count the updates applied; the record of version V names the step
// that runs next on it, so a crashed run resumes from the store. The step store is never
// reopened: a resumed run's first step needs nothing from the step before it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_lanes.h"
#include "layer_plan.h"
#include "layer_source.h"
#include "slot_bf16.h"
#include "slot_plan.h"
#include "slot_share.h"
#include "store_settings.h"

// The record of a weights-store version: the step whose forward wave runs on it.
typedef struct {
    int64_t next_step;
    uint32_t seed, mode;
} StoreRecord;
_Static_assert(sizeof(StoreRecord) == 16, "a StoreRecord is compared whole (memcmp)");

// The record this run writes for a version on which step next_step runs (16 bytes, no padding:
// a reopened store's record is compared with it whole).
static StoreRecord store_record(const Config *c, long next_step) {
    return (StoreRecord){next_step, c->training.seed, (uint32_t)c->method.mode};
}

typedef struct {
    const Backend *be;
    const Config *cfg;
    const Model *m;
    LayerPlan *plan;          // [m->n_layers]: which layers train (layer_plan.h)
    LayerNeeds need;
    LayerStream weights;      // params, optimizer state (, the estimator's reference)
    LayerStream step;         // the update's gradient (, previous weights); .ctx NULL: none
    int grad_buf, prev_buf;   // their buffer index in the step store (-1: none); prev_buf:
                              // the first of need.prev
    float *grad;              // one layer's gradient: the B wave's accumulator (layer_buffer)
    long version;             // of the weights store
    char name[64];
    // A device backend computes on its own memory: the acquired layer's slot buffers are copied
    // into these (the engine holds one layer at a time) and back when released dirty.
    DeviceLanes dev_weights, dev_step;  // a device's copies of the layer held (on_device)
    int on_device;
    void *pinned[SHARE_STORES];          // a device's page-locked slots of the weights and
    size_t pinned_bytes[SHARE_STORES];   // the step stores (SHARE_WEIGHTS, SHARE_STEP)
    size_t largest;
    LayerView held_weights, held_step;  // the host views of the acquired layer
    int has_step;             // a step store (the I/O rank's st->step, when shared): of the
                              // trained layers only (a frozen one has no gradient to keep, and
                              // its weights of earlier steps are its weights)
    // Replicas on one node share one store per stage (LayerStreams.share): the I/O rank alone
    // holds the streams; the others see its slots (slot_share.h).
    int shared, io, solo;     // solo: the I/O rank reads alone (LayerSource.solo)
    SlotShare share;
    LayerSpill spill;         // the tied copies' gradients (LayerSource.tied_spill)
    int twin;                 // the tied head when the store keeps the tied copies once (-1: not)
    int made;                 // the weights store is new: published by streamed_publish
    int lock;                 // the store's lock (LayerStreams.lock; -1: none), released at close
    void (*unlock)(const char *dir, const char *name, int lock);
    SlotBf16 bf16;            // a bf16 run's BF16 slots and copies (slot_bf16.h)
    unsigned char *large;     // per model layer: it takes a large slot (LayerSource.large)
} Streamed;

// The store's layer for a layer: the twin reads and pins the embedding's copy.
static int stored(const Streamed *st, int layer) {
    return layer == st->twin ? st->m->tied_first : layer;
}

// The host view's buffer b on the device (uploaded into the lane begun), or the host view
// itself on the CPU.
static float *stage_in(Streamed *st, const LayerView *v, DeviceLanes *dev, int b) {
    return st->on_device ? device_lanes_in(dev, v, b) : v->buf[b];
}

// Before the store takes a host slot back: a dirty layer's device copies come back into it.
static int stage_out(Streamed *st, const LayerView *v, DeviceLanes *dev, int dirty, FgError *err) {
    return st->on_device ? device_lanes_release(dev, v, dirty, err) : FG_OK;
}

// The step part of a layer is in the step store: it has one and the layer is trained.
static int steps_of(const Streamed *st, int layer, unsigned parts) {
    return (parts & LAYER_STEP) && st->has_step && st->plan[layer].trains;
}

// The weights stream's buffers a pass reads: the parameters alone (1), or all (0).
static int weights_bufs(unsigned parts) { return parts & LAYER_PARAMS_ONLY ? 1 : 0; }

static int prefetch_parts(Streamed *st, int layer, int block, unsigned parts, int when_idle,
                          FgError *err) {
    int rc = FG_OK;
    if (!st->io) return FG_OK;
    LayerStream *w = &st->weights, *g = &st->step;
    if (parts & LAYER_WEIGHTS)
        rc = (when_idle ? w->prefetch_when_idle : w->prefetch_block)(w, stored(st, layer), block,
                                                                    weights_bufs(parts), err);
    if (!rc && steps_of(st, layer, parts))
        rc = (when_idle ? g->prefetch_when_idle : g->prefetch_block)(g, layer, block, 0, err);
    return rc;
}

static int streamed_prefetch(LayerSource *s, int layer, int block, unsigned parts, FgError *err) {
    return prefetch_parts(s->ctx, layer, block, parts, 0, err);
}

static int streamed_in_slot(LayerSource *s, int layer, int block, unsigned parts) {
    Streamed *st = s->ctx;
    if (!st->io) return 1;
    if ((parts & LAYER_WEIGHTS) && !st->weights.in_slot(&st->weights, stored(st, layer), block)) return 0;
    return !steps_of(st, layer, parts) || st->step.in_slot(&st->step, layer, block);
}

static int streamed_prefetch_when_idle(LayerSource *s, int layer, int block, unsigned parts,
                                       FgError *err) {
    return prefetch_parts(s->ctx, layer, block, parts, 1, err);
}

// The host views of a layer's parts: from the streams (the I/O rank), and when the slots are
// shared, published to the node's other replicas, which take them after the barrier.
static int acquire_views(Streamed *st, int layer, int block, unsigned parts, LayerView *w,
                         LayerView *v, FgError *err) {
    int rc = FG_OK;
    if (st->io && (parts & LAYER_WEIGHTS))
        rc = st->weights.acquire_block(&st->weights, stored(st, layer), block, weights_bufs(parts), w, err);
    if (!rc && st->io && steps_of(st, layer, parts)) rc = st->step.acquire_block(&st->step, layer, block, 0, v, err);
    if (rc || !st->shared || !(parts & (LAYER_WEIGHTS | LAYER_STEP))) return rc;
    if (st->solo)
        return st->io ? FG_OK : fg_fail(err, FG_ERR_INTERNAL, "layer %d acquired by a replica "
                                        "that shares its node's slots while its I/O rank reads "
                                        "them alone", layer);
    if (st->io) {
        if (parts & LAYER_WEIGHTS) slot_share_publish(&st->share, SHARE_WEIGHTS, w);
        if (steps_of(st, layer, parts)) slot_share_publish(&st->share, SHARE_STEP, v);
    }
    if ((rc = slot_share_barrier(&st->share, err)) || st->io) return rc;
    if (parts & LAYER_WEIGHTS) slot_share_view(&st->share, SHARE_WEIGHTS, w);
    if (steps_of(st, layer, parts)) slot_share_view(&st->share, SHARE_STEP, v);
    return FG_OK;
}

static int streamed_acquire(LayerSource *s, int layer, int block, unsigned parts, LayerSlot *out,
                            FgError *err) {
    Streamed *st = s->ctx;
    LayerView w, v;
    int rc = acquire_views(st, layer, block, parts, &w, &v, err);
    *out = (LayerSlot){0};
    if (rc) return rc;
    layer_block(&st->m->layers[layer], block, &out->first, &out->count);
    if (parts & LAYER_WEIGHTS) {
        if (parts & LAYER_PARAMS_ONLY) w.n_bufs = 1;  // a slot read whole still hands out its params alone
        st->held_weights = w;
        float *bufs[4] = {NULL};
        if (st->on_device) device_lanes_begin(&st->dev_weights);
        for (int b = 0; b < w.n_bufs; b++) bufs[b] = stage_in(st, &w, &st->dev_weights, b);
        if (st->on_device) device_lanes_ready(&st->dev_weights);
        // Buffers of a host slot are padded for direct I/O: all the same distance apart.
        // A layer that does not train (frozen) holds its parameters alone, and a pass that reads
        // them alone gets them alone: no optimizer state, no reference.
        int trained = st->plan[layer].trains && !(parts & LAYER_PARAMS_ONLY);
        slot_bf16_acquire(&st->bf16, layer, &w, bufs[0], parts, out);
        out->state = st->need.opt_buffers && trained ? bufs[1] : NULL;
        out->state_stride = st->on_device ? w.count : w.n_bufs > 1 ? (size_t)(w.buf[1] - w.buf[0]) : w.count;
        out->ref = st->need.ref && trained ? bufs[1 + st->need.opt_buffers] : NULL;
    }
    if (parts & LAYER_STEP) {
        out->grad = out->update_grad = st->grad;
        for (int j = 0; j < st->need.prev && !steps_of(st, layer, parts); j++)
            out->prev[j] = out->params, out->prev16[j] = out->params16;  // NULL unless the weights are acquired too
        if (steps_of(st, layer, parts)) {
            st->held_step = v;
            if (st->on_device) device_lanes_begin(&st->dev_step);
            if (st->grad_buf >= 0) out->update_grad = stage_in(st, &v, &st->dev_step, st->grad_buf);
            for (int j = 0; j < st->need.prev; j++)
                out->prev[j] = stage_in(st, &v, &st->dev_step, st->prev_buf + j);
            if (st->on_device) device_lanes_ready(&st->dev_step);
        }
    }
    return FG_OK;
}

static int streamed_release(LayerSource *s, int layer, int block, unsigned parts, unsigned dirty,
                            FgError *err) {
    Streamed *st = s->ctx;
    int rc = FG_OK, rc2 = FG_OK;
    // Shared slots: the I/O rank releases (and so may evict or write back) a layer only once
    // every replica of the node is done with it; the others never write a slot.
    if (st->shared && !st->solo && (parts & (LAYER_WEIGHTS | LAYER_STEP)) &&
        (rc = slot_share_barrier(&st->share, err)))
        return rc;
    // A BF16 slot's widened weights go back into it (its lane on a device: before the lane
    // comes back into the slot, below) before the stream writes it back.
    if (parts & LAYER_WEIGHTS) slot_bf16_release(&st->bf16, dirty & LAYER_WEIGHTS, st->io);
    if (!st->io) return FG_OK;
    if (layer == st->twin) dirty &= ~(unsigned)LAYER_WEIGHTS;  // the embedding's step writes it
    if (parts & LAYER_WEIGHTS) rc = stage_out(st, &st->held_weights, &st->dev_weights, dirty & LAYER_WEIGHTS, err);
    if (!rc && steps_of(st, layer, parts))
        rc = stage_out(st, &st->held_step, &st->dev_step, dirty & LAYER_STEP, err);
    if (parts & LAYER_WEIGHTS)
        rc2 = st->weights.release_block(&st->weights, stored(st, layer), block, !rc && (dirty & LAYER_WEIGHTS), rc ? &(FgError){0} : err);
    if (!rc) rc = rc2;
    if (steps_of(st, layer, parts))
        rc2 = st->step.release_block(&st->step, layer, block, !rc && (dirty & LAYER_STEP), rc ? &(FgError){0} : err);
    return rc ? rc : rc2;
}

static void streamed_refresh16(LayerSource *s, int layer, int block, const LayerSlot *slot) {
    (void)block;
    Streamed *st = s->ctx;
    slot_bf16_refresh(&st->bf16, layer, slot);
}

// Shared slots: every replica of the node gets here (the I/O rank's writes seen by all).
static int streamed_sync(LayerSource *s, FgError *err) {
    Streamed *st = s->ctx;
    return st->solo ? FG_OK : slot_share_barrier(&st->share, err);
}

static int streamed_solo(LayerSource *s, int on, FgError *err) {
    Streamed *st = s->ctx;
    int rc = slot_share_barrier(&st->share, err);
    st->solo = on;
    return rc;
}

static int streamed_begin_version(LayerSource *s, long next_step, FgError *err) {
    Streamed *st = s->ctx;
    StoreRecord rec = store_record(st->cfg, next_step);
    int rc = st->io ? st->weights.write_aux(&st->weights, st->version + 1, &rec, err) : FG_OK;
    if (!rc) st->version++;
    return rc;
}

static int streamed_flush(LayerSource *s, FgError *err) {
    Streamed *st = s->ctx;
    if (!st->io) return FG_OK;
    int rc = st->weights.flush(&st->weights, err);
    if (!rc && st->has_step) rc = st->step.flush(&st->step, err);
    return rc;
}

static void add_stats(LayerStreamStats *out, const LayerStreamStats *b) {
    out->read_bytes += b->read_bytes, out->read_seconds += b->read_seconds;
    out->write_bytes += b->write_bytes, out->write_seconds += b->write_seconds;
    out->busy_seconds += b->busy_seconds;  // the stores' busy times may overlap: an upper bound
    out->cpu_seconds += b->cpu_seconds, out->wait_seconds += b->wait_seconds;
}

// Both stores and the spill file together.
static void streamed_io_stats(LayerSource *s, LayerStreamStats *out) {
    Streamed *st = s->ctx;
    LayerStreamStats b = {0};
    *out = b;
    if (st->spill.ctx) st->spill.stats(&st->spill, out);  // every replica has its own
    if (!st->io) return;  // its node's I/O rank moves its layers
    st->weights.stats(&st->weights, &b), add_stats(out, &b);
    if (st->has_step) st->step.stats(&st->step, &b), add_stats(out, &b);
}

IoBound layer_io_bound(const LayerStreamStats *d, double seconds, int steps) {
    IoBound b = {.read_bytes = d->read_bytes / steps, .write_bytes = d->write_bytes / steps,
                 .compute_seconds = FG_MAX(seconds - d->wait_seconds, 0.0) / steps,
                 .io_seconds = d->busy_seconds / steps};
    b.read_bandwidth = d->read_seconds > 0 ? d->read_bytes / d->read_seconds : 0.0;
    b.write_bandwidth = d->write_seconds > 0 ? d->write_bytes / d->write_seconds : 0.0;
    double moved = b.read_bytes + b.write_bytes;
    b.needed_bandwidth = b.compute_seconds > 0 ? moved / b.compute_seconds : 0.0;
    b.flash_bound = b.io_seconds > b.compute_seconds;
    return b;
}

static void streamed_report(LayerSource *s, const char *who) {
    Streamed *st = s->ctx;
    if (!st->io) {
        LayerStreamStats sp = {0};
        if (st->spill.ctx) st->spill.stats(&st->spill, &sp);
        fprintf(stderr, "fgpipe: %s layer I/O: none, it reads the slots of its node's I/O rank for "
                "the stage (shared store %s); its tied copies' spill read %.3f GB and wrote %.3f GB\n",
                who, st->name, sp.read_bytes / 1e9, sp.write_bytes / 1e9);
        return;
    }
    LayerStreamStats a;
    streamed_io_stats(s, &a);
    double rb = a.read_bytes, rs = a.read_seconds, wb = a.write_bytes, ws = a.write_seconds;
    fprintf(stderr, "fgpipe: %s layer I/O: read %.3f GB in %.2f s (%.2f GB/s), wrote %.3f GB in "
            "%.2f s (%.2f GB/s), I/O threads' CPU %.2f s, compute waited %.2f s for layers\n", who,
            rb / 1e9, rs, rs > 0 ? rb / rs / 1e9 : 0.0, wb / 1e9, ws, ws > 0 ? wb / ws / 1e9 : 0.0,
            a.cpu_seconds, a.wait_seconds);
    if (st->bf16.copies || st->bf16.as_read)
        fprintf(stderr, "fgpipe: %s BF16 weights: %ld copies made of FP32 slots (one per acquire), "
                "%ld BF16 slots read by the GEMMs as they lie\n", who, st->bf16.copies, st->bf16.as_read);
    if (st->on_device)
        fprintf(stderr, "fgpipe: %s device copies of its layers (%d lane%s, page-locked slots): "
                "%.3f GB to the GPU, %.3f GB back\n", who, st->dev_weights.n_lanes,
                st->dev_weights.n_lanes > 1 ? "s" : "",
                (st->dev_weights.bytes_in + st->dev_step.bytes_in) / 1e9,
                (st->dev_weights.bytes_out + st->dev_step.bytes_out) / 1e9);
}

static int streamed_close(LayerSource *s, FgError *err) {
    Streamed *st = s->ctx;
    if (!st) return FG_OK;
    int rc = st->weights.close ? st->weights.close(&st->weights, err) : FG_OK;
    FgError ignored = {0};
    if (st->step.close) {
        int rc2 = st->step.close(&st->step, rc ? &ignored : err);
        if (!rc) rc = rc2;
    }
    slot_share_close(&st->share);  // after the streams: their last writes come from its slots
    st->be->free(st->be, st->grad);
    for (int i = 0; i < 2; i++) st->be->free(st->be, s->tied_grad[i]);
    if (st->spill.ctx) st->spill.close(&st->spill);
    // After the streams' last write.
    if (st->lock >= 0 && st->unlock) st->unlock(st->cfg->layout.weights_dir, st->name, st->lock);
    device_lanes_close(&st->dev_weights);
    device_lanes_close(&st->dev_step);
    for (int i = 0; i < 2; i++)
        if (st->pinned[i]) st->be->host_free(st->be, st->pinned[i]);
    fg_free(st->plan);
    slot_bf16_close(&st->bf16);
    free(st->large);
    free(st);
    s->ctx = NULL;
    return rc;
}

static void store_path(const Streamed *st, const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/%s.h5", st->cfg->layout.weights_dir, name);
}

// A store opened by the I/O rank (by every rank when not shared), after rc (a failure before
// it, which the group learns of too); *version: the store's, on every rank of the group.
static int open_store(Streamed *st, int rc, const LayerStreams *ls, const LayerStreamSpec *spec,
                      LayerStream *out, long *version, FgError *err) {
    if (!rc && st->io) rc = ls->open(ls->arg, spec, out, err);
    *version = !rc && st->io ? out->version : -1;
    if (!st->shared) return rc;
    char path[sizeof st->cfg->layout.weights_dir + 80];
    store_path(st, spec->name, path, sizeof path);
    return slot_share_outcome(&st->share, rc, version, sizeof *version, path, err);
}

// Before the I/O rank touches the weights store: its lock (one run per store), and resuming,
// the settings it was made with against the config's.
static int claim_store(Streamed *st, const LayerStreams *ls, FgError *err) {
    const char *dir = st->cfg->layout.weights_dir;
    int rc = ls->lock ? ls->lock(dir, st->name, &st->lock, err) : FG_OK;
    st->unlock = ls->unlock;
    return !rc && ls->resume ? store_settings_check(st->cfg, dir, st->name, err) : rc;
}

// The new stores take their names (the step store's is always new), then the weights store's
// settings are recorded, by the I/O rank; every rank of the group learns the outcome.
static int streamed_publish(LayerSource *s, FgError *err) {
    Streamed *st = s->ctx;
    const char *dir = st->cfg->layout.weights_dir;
    int rc = FG_OK;
    if (st->io && st->has_step && st->step.publish) rc = st->step.publish(&st->step, err);
    if (!rc && st->io && st->made && st->weights.publish) rc = st->weights.publish(&st->weights, err);
    if (!rc && st->io && st->made) rc = store_settings_write(st->cfg, dir, st->name, err);
    st->made = 0;
    char path[sizeof st->cfg->layout.weights_dir + 80];
    store_path(st, st->name, path, sizeof path);
    return st->shared ? slot_share_outcome(&st->share, rc, NULL, 0, path, err) : rc;
}

// Opens the weights store: new, or (resuming) at the newest version every rank still holds.
static int open_weights(Streamed *st, Transport *t, const LayerStreams *ls, LayerStreamSpec *spec,
                        long *next_step, FgError *err) {
    int n = t->stages * t->replicas, me = t->replica * t->stages + t->stage, rc;
    spec->reopen = ls->resume, spec->version = -1;
    rc = st->io ? claim_store(st, ls, err) : FG_OK;
    if ((rc = open_store(st, rc, ls, spec, &st->weights, &st->version, err))) return rc;
    *next_step = 0;
    st->made = !ls->resume;
    if (!ls->resume) return FG_OK;
    // Stages (and replicas) that crashed one version apart go back to the older one.
    double *v = calloc((size_t)n, sizeof(double)), target;
    v[me] = (double)st->version;
    rc = t->allreduce_sum_world(t, v, n, err);
    target = v[0];
    for (int i = 1; i < n; i++) target = fmin(target, v[i]);
    free(v);
    if (!rc && (long)target != st->version) {
        rc = st->io ? st->weights.close(&st->weights, err) : FG_OK;
        spec->version = (long)target;
        if ((rc = open_store(st, rc, ls, spec, &st->weights, &st->version, err))) return rc;
    }
    StoreRecord rec = {0};
    if (!rc && st->io) rc = st->weights.read_aux(&st->weights, &rec, err);
    char path[sizeof st->cfg->layout.weights_dir + 80];
    store_path(st, spec->name, path, sizeof path);
    if (st->shared) rc = slot_share_outcome(&st->share, rc, &rec, sizeof rec, path, err);
    const Config *c = st->cfg;
    const StoreRecord want = store_record(c, (long)rec.next_step);  // written by a run like this one
    if (!rc && memcmp(&rec, &want, sizeof rec))
        rc = fg_fail(err, FG_ERR_INPUT, "layer store %s was written with seed %u and mode %u; "
                     "the config has seed %u and mode %d", path, rec.seed, rec.mode,
                     c->training.seed, c->method.mode);
    // Known here when steps is set (epochs wait for the data): refused before the step store
    // is made.
    if (!rc && c->training.steps > 0 && rec.next_step >= c->training.steps)
        rc = fg_fail(err, FG_ERR_INPUT, "the layer stores in %s are at step %lld; the run has only "
                     "%d steps", c->layout.weights_dir, (long long)rec.next_step, c->training.steps);
    if (!rc) *next_step = (long)rec.next_step;
    return rc;
}

// Replicas on one node share the stage's store (LayerStreams.share, CPU memory): the group
// agrees on what it streams and maps one block of slots, which only its I/O rank's streams use.
static int share_slots(Streamed *st, const LayerStreams *ls, const Transport *t, const Model *m,
                       int first, int last, const SlotPlan *sp, FgError *err) {
    const Config *c = st->cfg;
    st->io = 1;
    if (!ls->share || t->replicas == 1 || st->be->on_device) return FG_OK;
    st->shared = 1;
    size_t bytes[SHARE_STORES] = {slot_plan_memory_bytes(sp, sp->n_weights), slot_plan_memory_bytes(sp, sp->n_step)};
    int rc = slot_share_open(&st->share, ls->share, bytes, err);
    if (rc) return rc;
    st->io = st->share.io;
    ShareTerms terms = {first, last, sp->n_weights, sp->n_step, sp->n_slots, (int64_t)sp->largest,
                        (int64_t)model_range_count(m, first, last), ls->resume, c->training.seed,
                        c->method.mode, c->optim.optimizer};
    char path[sizeof c->layout.weights_dir + 80];
    store_path(st, st->name, path, sizeof path);
    return slot_share_agree(&st->share, &terms, path, err);
}

// A device's slots are page-locked host memory: copies to and from it run on the copy stream
// at the link's speed (device_lanes.h).
static void pin_slots(Streamed *st, const SlotPlan *sp) {
    if (!st->on_device) return;
    int n_bufs[SHARE_STORES] = {sp->n_weights, sp->n_step};
    for (int i = 0; i < SHARE_STORES; i++) {
        st->pinned_bytes[i] = slot_plan_memory_bytes(sp, n_bufs[i]);
        if (st->pinned_bytes[i]) st->pinned[i] = st->be->host_alloc(st->be, st->pinned_bytes[i]);
    }
}

// Where a store's slots live: the node's shared block, a device's page-locked block, or (NULL)
// the stream's own.
static void slot_memory(const Streamed *st, int store, LayerStreamSpec *spec) {
    spec->slot_memory = st->shared ? slot_share_memory(&st->share, store) : st->pinned[store];
    spec->slot_memory_bytes = st->shared ? st->share.slots_bytes[store] : st->pinned_bytes[store];
}

// The step store (when a step hands layers to the next), made anew by the I/O rank.
static int open_step(Streamed *st, const LayerStreams *ls, const LayerStreamSpec *spec, int n_step,
                     const char *suffix, FgError *err) {
    char name[64];
    long version;
    snprintf(name, sizeof name, "step-%d-%d%s", spec->first, spec->last, suffix);
    LayerStreamSpec ss = *spec;
    ss.name = name, ss.n_bufs = n_step, ss.aux_bytes = 0, ss.fill_weights = 0, ss.later_bufs = 0;
    ss.reopen = 0, ss.version = -1, ss.frozen = STORE_FROZEN_SKIP, ss.slot16 = NULL;
    slot_memory(st, SHARE_STEP, &ss);
    st->has_step = 1;
    return open_store(st, FG_OK, ls, &ss, &st->step, &version, err);
}

// " (N of its layers' slots hold BF16 as read ...)" in a bf16 run with a base kept in BF16, else "".
static const char *bf16_note(const Streamed *st, int first, int last, char *out, size_t size) {
    int n = 0;
    for (int l = first; l < last; l++) n += st->bf16.slot16[l];
    out[0] = 0;
    if (n) snprintf(out, size, ", %d of its layers' slots hold BF16 as read (a frozen base: its GEMMs read them as they lie)", n);
    return out;
}

static void say_streams(const Streamed *st, const Transport *t, const SlotPlan *sp, int first, int last) {
    const char *note = st->weights.note;
    char shared[160] = "", small[128], b16[128];
    if (st->shared)
        snprintf(shared, sizeof shared, ", shared by the stage's %d replicas on node %d (%s)",
                 st->share.node->size, st->share.node->node,
                 st->io ? "this rank reads and writes them" : "its I/O rank reads and writes them");
    fprintf(stderr, "fgpipe: stage %d streams its layers from %s/%s.h5 through %d slots%s%s%s%s%s%s\n",
            t->stage, st->cfg->layout.weights_dir, st->name, slot_plan_total(sp),
            slot_plan_note(sp, small, sizeof small), bf16_note(st, first, last, b16, sizeof b16),
            sp->twin >= 0 ? ", the tied copies kept once" : "", shared, note[0] ? ": " : "", note);
}

static int trains_any(const Streamed *st, int first, int last) {
    for (int l = first; l < last; l++)
        if (st->plan[l].trains) return 1;
    return 0;
}

// Where the tied copies held here keep their op-U gradients: a spill file (spill), else memory.
static int keep_tied(Streamed *st, const LayerStreams *ls, int stage, const SlotPlan *sp, int spill,
                     LayerSource *out, FgError *err) {
    if (!sp->tied[0] && !sp->tied[1]) return FG_OK;
    if (!spill) {
        for (int i = 0; i < 2; i++)
            if (sp->tied[i]) out->tied_grad[i] = backend_alloc_floats(st->be, sp->tied[i]);
        return FG_OK;
    }
    char name[96];
    const char *dir = st->cfg->layout.weights_dir;
    snprintf(name, sizeof name, "tied-%s", st->name);
    if (st->shared) snprintf(name + strlen(name), sizeof name - strlen(name), "-r%d", st->share.node->rank);
    int rc = ls->open_spill(dir, name, 2, sp->tied, &st->spill, err);
    if (rc) return rc;
    out->tied_spill = &st->spill;
    fprintf(stderr, "fgpipe: stage %d keeps the tied copies' gradients on flash in %s/%s.spill "
            "(%.0f MB)\n", stage, dir, name, (double)(sp->tied[0] + sp->tied[1]) * sizeof(float) / 1e6);
    return FG_OK;
}

int layer_source_streamed(const Backend *be, const Config *c, const Model *m, int first, int last,
                          Transport *t, const LayerStreams *ls, double work_bytes,
                          double runtime_bytes, LayerSource *out, long *next_step, FgError *err) {
    LayerNeeds need = layer_needs(c);
    SlotPlan sp;
    // A device computes on its own memory: it keeps the tied copies' gradients there; elsewhere
    // they wait on flash when the streams can spill (each replica its own file, also when the
    // node's replicas share the store: each forms its own sums).
    int share = ls->share && c->layout.replicas > 1 && !be->on_device;
    int spill = ls->open_spill && !be->on_device;
    int rc = slot_plan_make(be, c, m, first, last, t->stage, work_bytes, runtime_bytes, spill, &sp, err);
    if (rc) return rc;
    size_t largest = sp.largest;
    int n_weights = sp.n_weights, n_step = sp.n_step, n_slots = slot_plan_total(&sp);
    Streamed *st = calloc(1, sizeof *st);
    st->be = be, st->cfg = c, st->m = m, st->need = need, st->twin = sp.twin, st->lock = -1;
    st->plan = layer_plan_build(m);
    slot_bf16_open(&st->bf16, be, c, m, first, last, &sp);
    st->on_device = be->on_device;
    st->grad_buf = need.keep_grad ? 0 : -1;
    st->prev_buf = need.keep_grad;  // then need.prev versions
    *out = (LayerSource){.ctx = st, .streamed = 1, .prefetch = streamed_prefetch,
                         .prefetch_when_idle = streamed_prefetch_when_idle, .in_slot = streamed_in_slot,
                         .acquire = streamed_acquire, .release = streamed_release,
                         .refresh16 = streamed_refresh16,
                         .begin_version = streamed_begin_version, .flush = streamed_flush,
                         .publish = streamed_publish,
                         .report = streamed_report, .io_stats = streamed_io_stats,
                         .close = streamed_close, .work_bytes = work_bytes,
                         .read_ahead = n_slots - 1, .tied_once = sp.twin >= 0,
                         .flash_bytes = slot_plan_flash_bytes(&sp, m, first, last)};
    // Replicas on one node share its stores (named by the node); without sharing each replica
    // has its own.
    char suffix[24] = "";
    if (c->layout.replicas > 1)
        snprintf(suffix, sizeof suffix, share ? "-node-%d" : "-replica-%d", share ? ls->share->node : t->replica);
    snprintf(st->name, sizeof st->name, "stage-%d-%d%s", first, last, suffix);
    rc = share_slots(st, ls, t, m, first, last, &sp, err);
    if (st->shared) {
        out->reads_only = !st->io;
        out->sync = streamed_sync, out->solo = streamed_solo;
    }
    LayerStreamSpec spec = {.dir = c->layout.weights_dir, .name = st->name, .model = m, .first = first,
                            .last = last, .n_bufs = n_weights, .aux_bytes = sizeof(StoreRecord),
                            .fill_weights = 1, .seed = c->training.seed, .slots = slot_plan_classes(&sp),
                            .staged = 1,
                            .frozen = STORE_FROZEN_READ_ONLY, .tied_once = sp.twin >= 0,
                            .later_bufs = n_step,
                            .slot16 = st->bf16.slot16,
                            .later_bytes = !spill ? 0.0 : (double)(sp.tied[0] + sp.tied[1]) * sizeof(float) *
                                                          (st->shared ? st->share.node->size : 1)};
    if (!rc) pin_slots(st, &sp), slot_memory(st, SHARE_WEIGHTS, &spec);
    if (!rc) rc = open_weights(st, t, ls, &spec, next_step, err);
    if (!rc) say_streams(st, t, &sp, first, last);
    if (!rc && n_step && trains_any(st, first, last)) rc = open_step(st, ls, &spec, n_step, suffix, err);
    st->large = calloc((size_t)m->n_layers, 1);
    for (int l = first; l < last; l++) st->large[l] = (unsigned char)slot_plan_large(&sp, m, l);
    out->large = sp.n_small ? st->large : NULL;
    // The B wave's gradient accumulator (bp, fg+bp) and op U's estimate (fg, fg+bp): every mode's.
    if (!rc)
        out->layer_buffer = st->grad = backend_alloc_floats(be, model_largest_trained_block(m, first, last));
    if (!rc) rc = keep_tied(st, ls, t->stage, &sp, spill, out, err);
    out->held[MEM_IO_SLOTS] = FG_MAX(c->layout.mem_budget - work_bytes - runtime_bytes, 0.0);
    if (out->layer_buffer)
        out->held[MEM_GRADIENTS] = sizeof(float) * (double)model_largest_trained_block(m, first, last);
    st->largest = largest;
    if (!rc && st->on_device) {
        device_lanes_open(&st->dev_weights, be, sp.device_lanes, sp.lane_weights);
        device_lanes_open(&st->dev_step, be, sp.device_lanes, sp.lane_step);
    }
    if (rc) streamed_close(out, &(FgError){0});
    return rc;
}
