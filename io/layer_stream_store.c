// Layer stream over a store: slots, a read queue and a write queue, each served by its own
// thread, so that a read never waits behind the write-back of another layer.
//
// Ordering is what keeps this correct. Each queue is first-in first-out. A read starts only
// once its slot's write-back is done (the slot is about to be overwritten) and once every
// write-back of the same layer (of a layer in row blocks: of the same block) is done (the read
// must see the new version); a write-back starts as soon as it is queued (its slot was filled
// by a read that acquire waited for), in the order releases queued them, behind the aux record
// of its version. A layer in row blocks may be read while its other blocks are written: the
// stream, which sees each write finish, tells the store which version to read the block from.
#include "layer_stream_store.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "direct_io.h"
#include "progress.h"  // wall_seconds

enum { REQ_READ, REQ_WRITE, REQ_AUX };

typedef struct {
    int layer, idx;     // global layer and store index; -1: empty
    int block;          // the row block it holds (0: a layer without blocks)
    long version;       // version of the contents (after a release dirty: the one being written)
    int pins, ahead;    // ahead: read ahead, not acquired yet
    int reading, writing;  // queued or running requests on this slot
    int bufs;           // its leading buffers read (or being read): a pass that reads the
                        // parameters alone leaves the optimizer state on flash
    long last_use;
    size_t bytes;       // a layer fits when its slot bytes are at most these
    unsigned char *mem;
} Slot;

// A request carries its layer: by the time it runs, its slot may already be assigned to the
// next layer (a read queued behind this write-back).
typedef struct {
    int kind, slot, idx, block;
    long version;       // a write's; a read's when pending
    int pending;        // a read of a block written in its layer's pending version
    int k0, k1;         // a read's buffers [k0, k1)
} Req;

typedef struct {
    Req *q;
    int cap, head, len, running;
    pthread_t th;
} Queue;

typedef struct Ctx Ctx;
typedef struct {
    Ctx *c;
    Queue *q;
} Server;

struct Ctx {
    LayerStore *store;
    int n;
    Slot *slots;
    int *unit0;               // per store index: its first row block's index in unit_writes
    int *unit_writes;         // per row block (a layer without blocks: one): write-backs
                              // queued or running
    long *pend_version;       // per store index: the version being written block by block
    int *pend_written;        // (-1: none) and how many of its blocks are on flash
    Queue reads, writes;
    Server servers[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;        // every change of the queues or the slots
    int stop, failed;
    FgError err;  // the first I/O error; sticky
    long tick;
    unsigned char *aux;       // the opening version's record, then the one being written
    unsigned char *aux_out;
    int aux_busy;
    long aux_version;         // the newest record's (queued or written)
    int active;               // requests running now, both threads
    double busy_since;        // when active last became non-zero
    LayerStreamStats stats;
    unsigned char *slot_memory;  // the caller's block the slots live in (NULL: each its own dio_alloc)
};

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// A read may start once its slot is written back and no write-back of its layer is pending;
// after an error nothing runs, so everything is ready (to be skipped).
static int ready(const Ctx *c, const Req *r) {
    if (r->kind != REQ_READ || c->failed) return 1;
    return c->slots[r->slot].writing == 0 && c->unit_writes[c->unit0[r->idx] + r->block] == 0;
}

static FgError run_request(Ctx *c, const Req *r, Slot *sl, long *version, int *rc) {
    FgError e = {0};
    if (r->kind == REQ_READ) {
        *rc = layer_store_read_bufs_from(c->store, r->idx, r->block, r->pending, r->k0, r->k1, sl->mem, &e);
        *version = r->pending ? r->version : layer_store_layer_version(c->store, r->idx);
    } else if (r->kind == REQ_WRITE) {
        *rc = layer_store_write_block(c->store, r->idx, r->block, r->version, sl->mem, &e);
    } else {
        *rc = layer_store_write_aux(c->store, r->version, c->aux_out, &e);
    }
    return e;
}

// Bookkeeping after a request (under the lock): statistics, the sticky error, the slot.
static void finish_request(Ctx *c, const Req *r, int skip, int rc, FgError e, long version,
                           double seconds) {
    Slot *sl = r->kind == REQ_AUX ? NULL : &c->slots[r->slot];
    if (!skip && !rc && r->kind != REQ_AUX) {
        double bytes = r->kind == REQ_READ ? (double)layer_store_bufs_bytes(c->store, r->idx, r->block, r->k0, r->k1)
                                           : (double)layer_store_block_bytes(c->store, r->idx, r->block);
        if (r->kind == REQ_READ) c->stats.read_bytes += bytes, c->stats.read_seconds += seconds;
        else c->stats.write_bytes += bytes, c->stats.write_seconds += seconds;
    }
    if (rc && !c->failed) c->failed = 1, c->err = e;
    if (r->kind == REQ_READ) {
        // The rest of a slot's buffers comes from the version its first ones came from: a block
        // is written from its one slot, which holds all its buffers then.
        if (!skip && !rc && r->k0 && version != sl->version && !c->failed)
            c->failed = 1, fg_fail(&c->err, FG_ERR_INTERNAL, "layer stream: the optimizer state of "
                                   "store layer %d read at version %ld, its parameters at %ld",
                                   r->idx, version, sl->version);
        if (!skip && !rc) sl->version = version;
        sl->reading--;
    } else if (r->kind == REQ_WRITE) {
        sl->writing--, c->unit_writes[c->unit0[r->idx] + r->block]--;
        int n = layer_store_n_blocks(c->store, r->idx);
        if (!skip && !rc && n > 1) {  // its last block makes the version the layer's
            c->pend_version[r->idx] = r->block + 1 < n ? r->version : -1;
            c->pend_written[r->idx] = r->block + 1;
        }
    } else {
        c->aux_busy = 0;
    }
    if (--c->active == 0) c->stats.busy_seconds += wall_seconds() - c->busy_since;
}

// One queue's thread: its requests in order, each once it is ready.
static void *io_thread(void *arg) {
    Server *sv = arg;
    Ctx *c = sv->c;
    Queue *q = sv->q;
    double cpu_before = 0.0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!(c->stop && q->len == 0) && (q->len == 0 || !ready(c, &q->q[q->head])))
            pthread_cond_wait(&c->cv, &c->mu);
        if (q->len == 0) break;  // stop, with nothing left to do
        Req r = q->q[q->head];
        q->head = (q->head + 1) % q->cap, q->len--, q->running = 1;
        if (r.kind == REQ_READ && c->pend_version[r.idx] >= 0 && r.block < c->pend_written[r.idx])
            r.pending = 1, r.version = c->pend_version[r.idx];
        int skip = c->failed;  // after an error nothing more is written: the store stays consistent
        if (c->active++ == 0) c->busy_since = wall_seconds();
        Slot *sl = r.kind == REQ_AUX ? NULL : &c->slots[r.slot];
        pthread_mutex_unlock(&c->mu);
        int rc = FG_OK;
        long version = r.version;
        double t0 = wall_seconds();
        FgError e = skip ? (FgError){0} : run_request(c, &r, sl, &version, &rc);
        double seconds = wall_seconds() - t0, cpu = thread_cpu_seconds();
        pthread_mutex_lock(&c->mu);
        c->stats.cpu_seconds += cpu - cpu_before, cpu_before = cpu;
        finish_request(c, &r, skip, rc, e, version, seconds);
        q->running = 0;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void enqueue(Ctx *c, int kind, int slot, int idx, int block, long version, int k0, int k1) {
    Queue *q = kind == REQ_READ ? &c->reads : &c->writes;
    // A slot rarely has more than a write-back and a read queued; each ring has room for 8 per
    // slot and is checked anyway, because overrunning it would corrupt silently.
    if (q->len == q->cap) {
        fprintf(stderr, "fgpipe: layer stream request queue overflow\n");
        abort();
    }
    q->q[(q->head + q->len) % q->cap] = (Req){kind, slot, idx, block, version, 0, k0, k1};
    q->len++;
    if (kind == REQ_READ) c->slots[slot].reading++;
    if (kind == REQ_WRITE) c->slots[slot].writing++, c->unit_writes[c->unit0[idx] + block]++;
    pthread_cond_broadcast(&c->cv);
}

static int sticky(Ctx *c, FgError *err) { return fg_fail(err, c->err.code, "%s", c->err.msg); }

static int resident(Ctx *c, int layer, int block) {
    for (int i = 0; i < c->n; i++)
        if (c->slots[i].layer == layer && c->slots[i].block == block) return i;
    return -1;
}

// The least recently used slot that the layer fits and that is not pinned, among the smallest
// that fit it (small layers cycle through small slots and leave the large ones to large
// layers); read-ahead slots only if allow_ahead, any size that fits only if any_size.
static int victim(Ctx *c, size_t bytes, int allow_ahead, int any_size) {
    size_t smallest = SIZE_MAX;
    for (int i = 0; i < c->n; i++)
        if (c->slots[i].bytes >= bytes && c->slots[i].bytes < smallest) smallest = c->slots[i].bytes;
    int best = -1;
    for (int pass = 0; pass < 1 + allow_ahead && best < 0; pass++)
        for (int i = 0; i < c->n; i++) {
            Slot *sl = &c->slots[i];
            if (sl->pins || (sl->ahead && pass == 0) || sl->bytes < bytes) continue;
            if (!any_size && sl->bytes != smallest) continue;
            if (best < 0 || sl->last_use < c->slots[best].last_use) best = i;
        }
    return best;
}

// Queues a read of the first `bufs` buffers of layer (store index idx) into a victim slot; the
// slot, or -1 if none is free. Read-ahead (allow_ahead 0) only into the smallest slots that
// fit; acquire into those first, then into any (a large slot's layer, the token table, is read
// again only when it must be).
static int start_read(Ctx *c, int layer, int idx, int block, int bufs, int allow_ahead) {
    size_t bytes = layer_store_block_slot_bytes(c->store, idx);
    int v = victim(c, bytes, allow_ahead, 0);
    if (v < 0 && allow_ahead) v = victim(c, bytes, 1, 1);
    if (v < 0) return -1;
    Slot *sl = &c->slots[v];
    sl->layer = layer, sl->idx = idx, sl->block = block, sl->ahead = 0, sl->last_use = ++c->tick;
    sl->bufs = bufs;
    enqueue(c, REQ_READ, v, idx, block, 0, 0, bufs);
    return v;
}

// The buffers a pass wants of store layer idx: 0 asks for all of them.
static int bufs_wanted(const Ctx *c, int idx, int bufs) {
    int all = layer_store_layer_bufs(c->store, idx);
    return bufs <= 0 || bufs > all ? all : bufs;
}

// A resident slot holding fewer buffers than a pass wants reads the rest into its place; 1 if
// it queued a read.
static int read_rest(Ctx *c, int v, int bufs) {
    Slot *sl = &c->slots[v];
    if (sl->bufs >= bufs) return 0;
    enqueue(c, REQ_READ, v, sl->idx, sl->block, 0, sl->bufs, bufs);
    sl->bufs = bufs;
    return 1;
}

static int not_in_store(int layer, FgError *err) {
    return fg_fail(err, FG_ERR_INTERNAL, "layer stream: layer %d is not in the store", layer);
}

// Store index of layer with block b, or -1 with the error set.
static int block_index(Ctx *c, int layer, int block, FgError *err) {
    int idx = layer_store_find(c->store, layer);
    if (idx < 0) return not_in_store(layer, err), -1;
    if (block >= 0 && block < layer_store_n_blocks(c->store, idx)) return idx;
    fg_fail(err, FG_ERR_INTERNAL, "layer stream: layer %d has %d row blocks, not a block %d", layer,
            layer_store_n_blocks(c->store, idx), block);
    return -1;
}

// A read-ahead of a resident layer keeps it: a wave's layers come back in a cycle, and the
// least recently used slot would otherwise be the very layer the wave is about to acquire.
static int prefetch_locked(Ctx *c, int layer, int block, int bufs, FgError *err) {
    int idx = c->failed ? -1 : block_index(c, layer, block, err), v;
    if (c->failed) return sticky(c, err);
    if (idx < 0) return FG_ERR_INTERNAL;
    if ((v = resident(c, layer, block)) >= 0) {
        read_rest(c, v, bufs_wanted(c, idx, bufs));  // a slot being written back holds them all
        c->slots[v].ahead = 1;
    } else {
        v = start_read(c, layer, idx, block, bufs_wanted(c, idx, bufs), 0);  // no free slot: no read-ahead, not an error
        if (v >= 0) c->slots[v].ahead = 1;
    }
    return FG_OK;
}

static int ls_prefetch_block(LayerStream *s, int layer, int block, int bufs, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = prefetch_locked(c, layer, block, bufs, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_prefetch_when_idle(LayerStream *s, int layer, int block, int bufs, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = c->reads.len || c->reads.running ? FG_OK : prefetch_locked(c, layer, block, bufs, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_in_slot(LayerStream *s, int layer, int block) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int in = resident(c, layer, block) >= 0;
    pthread_mutex_unlock(&c->mu);
    return in;
}

// A layer in row blocks starts with its first.
static int ls_prefetch(LayerStream *s, int layer, FgError *err) {
    return ls_prefetch_block(s, layer, 0, 0, err);
}

static int ls_acquire_block(LayerStream *s, int layer, int block, int bufs, LayerView *view,
                            FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = FG_OK, v = resident(c, layer, block);
    if (c->failed) rc = sticky(c, err);
    else if (v < 0) {
        int idx = block_index(c, layer, block, err);
        if (idx < 0) rc = FG_ERR_INTERNAL;
        else if ((v = start_read(c, layer, idx, block, bufs_wanted(c, idx, bufs), 1)) < 0)
            rc = fg_fail(err, FG_ERR_INTERNAL, "layer stream: all %d slots are pinned (release a "
                         "layer before acquiring layer %d)", c->n, layer);
    } else {
        // A write-back in flight holds every buffer: only a clean slot can lack some.
        read_rest(c, v, bufs_wanted(c, c->slots[v].idx, bufs));
    }
    if (!rc) {
        Slot *sl = &c->slots[v];
        double t0 = wall_seconds();
        while ((sl->reading || sl->writing) && !c->failed) pthread_cond_wait(&c->cv, &c->mu);
        c->stats.wait_seconds += wall_seconds() - t0;
        if (c->failed) rc = sticky(c, err);
        else {
            sl->pins++, sl->ahead = 0, sl->last_use = ++c->tick;
            size_t stride = layer_store_block_stride(c->store, sl->idx);
            size_t elem = layer_store_slot_elem_bytes(c->store, sl->idx);
            memset(view, 0, sizeof *view);
            view->layer = layer;
            view->count = layer_store_block_floats(c->store, sl->idx, block);
            view->first = (size_t)block * stride / elem;
            view->bf16 = layer_store_layer(c->store, sl->idx)->slot16;
            view->n_bufs = sl->bufs;  // those read: the parameters alone, or all
            for (int b = 0; b < view->n_bufs; b++) view->buf[b] = (float *)(sl->mem + (size_t)b * stride);
            view->version = sl->version;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_acquire(LayerStream *s, int layer, LayerView *view, FgError *err) {
    Ctx *c = s->ctx;
    int idx = layer_store_find(c->store, layer);
    if (idx >= 0 && layer_store_n_blocks(c->store, idx) > 1)
        return fg_fail(err, FG_ERR_INTERNAL, "layer stream: layer %d is read in %d row blocks, not "
                       "whole", layer, layer_store_n_blocks(c->store, idx));
    return ls_acquire_block(s, layer, 0, 0, view, err);
}

static int ls_release_block(LayerStream *s, int layer, int block, int dirty, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = FG_OK, v = resident(c, layer, block);
    if (v < 0 || c->slots[v].pins == 0)
        rc = fg_fail(err, FG_ERR_INTERNAL, "layer stream: releasing layer %d (block %d), which is "
                     "not acquired", layer, block);
    else if (c->failed) {
        c->slots[v].pins--;
        rc = sticky(c, err);
    } else {
        Slot *sl = &c->slots[v];
        sl->pins--;
        if (dirty) {
            if (sl->pins)
                rc = fg_fail(err, FG_ERR_INTERNAL, "layer stream: layer %d released dirty while "
                             "still pinned %d more times", layer, sl->pins);
            else if (sl->bufs < layer_store_layer_bufs(c->store, sl->idx))
                rc = fg_fail(err, FG_ERR_INTERNAL, "layer stream: layer %d released dirty with %d of "
                             "its %d buffers read (acquired for its parameters alone)", layer,
                             sl->bufs, layer_store_layer_bufs(c->store, sl->idx));
            // A frozen layer (written by loads only) skips the versions it was not written in.
            else enqueue(c, REQ_WRITE, v, sl->idx, block, sl->version = layer_store_layer(c->store, sl->idx)->frozen
                                                                        ? c->aux_version : sl->version + 1, 0, 0);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_release(LayerStream *s, int layer, int dirty, FgError *err) {
    return ls_release_block(s, layer, 0, dirty, err);
}

static int ls_write_aux(LayerStream *s, long version, const void *data, FgError *err) {
    Ctx *c = s->ctx;
    size_t n = layer_store_aux_bytes(c->store);
    if (!n) return fg_fail(err, FG_ERR_INTERNAL, "layer stream: the store has no auxiliary record");
    pthread_mutex_lock(&c->mu);
    while (c->aux_busy && !c->failed) pthread_cond_wait(&c->cv, &c->mu);
    int rc = FG_OK;
    if (c->failed) rc = sticky(c, err);
    else {
        memcpy(c->aux_out, data, n);
        c->aux_busy = 1, c->aux_version = version;
        enqueue(c, REQ_AUX, -1, -1, 0, version, 0, 0);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_read_aux(LayerStream *s, void *data, FgError *err) {
    Ctx *c = s->ctx;
    size_t n = layer_store_aux_bytes(c->store);
    if (!n) return fg_fail(err, FG_ERR_INTERNAL, "layer stream: the store has no auxiliary record");
    memcpy(data, c->aux, n);
    return FG_OK;
}

static int ls_flush(LayerStream *s, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    while (c->reads.len || c->reads.running || c->writes.len || c->writes.running)
        pthread_cond_wait(&c->cv, &c->mu);
    int rc = c->failed ? sticky(c, err) : FG_OK;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void free_ctx(Ctx *c) {
    for (int i = 0; i < c->n && !c->slot_memory; i++) fg_free(c->slots[i].mem);
    free(c->slots);
    free(c->reads.q);
    free(c->writes.q);
    free(c->unit0);
    free(c->unit_writes);
    free(c->pend_version);
    free(c->pend_written);
    fg_free(c->aux);
    fg_free(c->aux_out);
    layer_store_close(c->store);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

static int ls_close(LayerStream *s, FgError *err) {
    Ctx *c = s->ctx;
    if (!c) return FG_OK;
    int rc = ls_flush(s, err);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->reads.th, NULL);
    pthread_join(c->writes.th, NULL);
    free_ctx(c);
    s->ctx = NULL;
    return rc;
}

// With the I/O threads idle (flushed) the store's path changes under no request.
static int ls_publish(LayerStream *s, FgError *err) {
    Ctx *c = s->ctx;
    int rc = ls_flush(s, err);
    return rc ? rc : layer_store_publish(c->store, err);
}

static void ls_stats(LayerStream *s, LayerStreamStats *out) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

int layer_stream_store_open(LayerStream *s, LayerStore *store, int n_slots, int n_small,
                            size_t small_count, FgError *err) {
    SlotClasses slots = {.n = {n_slots, n_small}, .count = {0, small_count}};
    return layer_stream_store_open_in(s, store, &slots, NULL, 0, err);
}

// A slot of class k >= 1 holds any unit of at most count[k] floats a buffer whole: the largest
// such unit's buffers (a frozen layer keeps its parameters alone), never more than a slot of
// the class above (slot_plan.c sizes the budget's slots the same way).
static size_t class_bytes(const LayerStore *store, const SlotClasses *slots, int k) {
    size_t above = layer_store_max_block_slot_bytes(store);
    for (int j = 1; j <= k; j++) {
        const size_t bound = dio_round_up(slots->count[j] * sizeof(float));
        size_t bytes = 0;
        for (int i = 0; i < layer_store_n_layers(store); i++)
            if (dio_round_up(layer_store_block_stride(store, i)) <= bound)
                bytes = FG_MAX(bytes, layer_store_block_slot_bytes(store, i));
        above = FG_MIN(bytes, above);
    }
    return above;
}

size_t layer_stream_store_slots_bytes(const LayerStore *store, const SlotClasses *slots) {
    size_t bytes = 0;
    for (int k = 0; k < SLOT_CLASSES; k++) bytes += (size_t)slots->n[k] * class_bytes(store, slots, k);
    return bytes;
}

int layer_stream_store_open_in(LayerStream *s, LayerStore *store, const SlotClasses *slots,
                               void *memory, size_t memory_bytes, FgError *err) {
    memset(s, 0, sizeof *s);
    size_t bytes[SLOT_CLASSES], need = layer_stream_store_slots_bytes(store, slots);
    int n = 0;
    for (int k = 0; k < SLOT_CLASSES; k++) bytes[k] = class_bytes(store, slots, k), n += slots->n[k];
    if (memory && ((uintptr_t)memory % 4096 || memory_bytes < need)) {
        layer_store_close(store);
        return fg_fail(err, FG_ERR_INTERNAL, "layer stream: the slot memory given (%zu bytes at "
                       "%p) does not hold its %d aligned slots (%zu bytes)", memory_bytes, memory, n,
                       need);
    }
    if (slots->n[0] < 1 || n < 2) {
        layer_store_close(store);
        return fg_fail(err, FG_ERR_INPUT, "layer stream: %d slots of its largest layer and %d smaller "
                       "ones; it needs one of the largest and at least 2 in all (one computing, one "
                       "reading ahead)", slots->n[0], n - slots->n[0]);
    }
    if (layer_store_version(store) < 0) {
        layer_store_close(store);
        return fg_fail(err, FG_ERR_INPUT, "layer stream: the store has no complete version yet");
    }
    Ctx *c = calloc(1, sizeof *c);
    c->store = store, c->n = n;
    c->slots = calloc((size_t)c->n, sizeof *c->slots);
    c->slot_memory = memory;
    size_t at = 0;
    for (int k = 0, i = 0; k < SLOT_CLASSES; k++)  // the large slots, then the smaller ones
        for (int j = 0; j < slots->n[k]; j++, i++) {
            c->slots[i] = (Slot){.layer = -1, .idx = -1, .bytes = bytes[k]};
            c->slots[i].mem = memory ? (unsigned char *)memory + at : dio_alloc(bytes[k]);
            at += bytes[k];
        }
    int n_layers = layer_store_n_layers(store), units = 0;
    c->unit0 = calloc((size_t)n_layers, sizeof *c->unit0);
    c->pend_version = calloc((size_t)n_layers, sizeof *c->pend_version);
    c->pend_written = calloc((size_t)n_layers, sizeof *c->pend_written);
    for (int i = 0; i < n_layers; i++) c->unit0[i] = units, units += layer_store_n_blocks(store, i), c->pend_version[i] = -1;
    c->unit_writes = calloc((size_t)units, sizeof *c->unit_writes);
    for (int k = 0; k < 2; k++) {
        Queue *q = k ? &c->writes : &c->reads;
        q->cap = 8 * c->n + 8;
        q->q = calloc((size_t)q->cap, sizeof *q->q);
        c->servers[k] = (Server){c, q};
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    size_t aux = layer_store_aux_bytes(store);
    if (aux) {
        c->aux = dio_alloc(aux), c->aux_out = dio_alloc(aux);
        int rc = layer_store_read_aux(store, c->aux, err);
        if (rc) {
            free_ctx(c);
            return rc;
        }
    }
    pthread_create(&c->reads.th, NULL, io_thread, &c->servers[0]);
    pthread_create(&c->writes.th, NULL, io_thread, &c->servers[1]);
    s->ctx = c;
    s->n_slots = c->n;
    s->slot_bytes = bytes[0];
    s->small_slot_bytes = slots->n[1] ? bytes[1] : 0;
    s->version = c->aux_version = layer_store_version(store);
    snprintf(s->note, sizeof s->note, "%s", layer_store_note(store));
    s->prefetch = ls_prefetch, s->acquire = ls_acquire, s->release = ls_release;
    s->prefetch_block = ls_prefetch_block, s->acquire_block = ls_acquire_block;
    s->prefetch_when_idle = ls_prefetch_when_idle, s->in_slot = ls_in_slot;
    s->release_block = ls_release_block;
    s->write_aux = ls_write_aux, s->read_aux = ls_read_aux, s->flush = ls_flush, s->close = ls_close;
    s->publish = ls_publish;
    s->stats = ls_stats;
    return FG_OK;
}
