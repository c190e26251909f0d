// Layer stream over a store: slots, a FIFO of I/O requests and the thread that serves it.
//
// Ordering is what makes this simple: one thread serves requests first-in first-out, so a read
// into a slot queued after that slot's write-back starts only once the write-back is done, and
// a read of a layer queued after its write-back (from another slot) sees the new version.
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
    long version;       // version of the contents (after a release dirty: the one being written)
    int pins, ahead;    // ahead: read ahead, not acquired yet
    int busy;           // queued or running requests on this slot
    long last_use;
    unsigned char *mem;
} Slot;

// A request carries its layer: by the time it runs, its slot may already be assigned to the
// next layer (a read queued behind this write-back).
typedef struct {
    int kind, slot, idx;
    long version;
} Req;

typedef struct {
    LayerStore *store;
    int n;
    Slot *slots;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t req_cv, done_cv;
    Req *q;
    int qcap, qhead, qlen, inflight, stop, failed;
    FgError err;  // the first I/O error; sticky
    long tick;
    unsigned char *aux;       // the opening version's record, then the one being written
    unsigned char *aux_out;
    int aux_busy;
    LayerStreamStats stats;
    unsigned char *slot_memory;  // the caller's block the slots live in (NULL: each its own dio_alloc)
} Ctx;

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *io_thread(void *arg) {
    Ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->qlen == 0) pthread_cond_wait(&c->req_cv, &c->mu);
        if (c->qlen == 0) break;  // stop, with nothing left to do
        Req r = c->q[c->qhead];
        c->qhead = (c->qhead + 1) % c->qcap, c->qlen--, c->inflight = 1;
        int skip = c->failed;  // after an error nothing more is written: the store stays consistent
        Slot *sl = r.kind == REQ_AUX ? NULL : &c->slots[r.slot];
        pthread_mutex_unlock(&c->mu);
        FgError e = {0};
        int rc = FG_OK;
        long version = r.version;
        double t0 = wall_seconds();
        if (!skip) {
            if (r.kind == REQ_READ) {
                rc = layer_store_read(c->store, r.idx, sl->mem, &e);
                version = layer_store_layer_version(c->store, r.idx);
            } else if (r.kind == REQ_WRITE) {
                rc = layer_store_write(c->store, r.idx, r.version, sl->mem, &e);
            } else {
                rc = layer_store_write_aux(c->store, r.version, c->aux_out, &e);
            }
        }
        double seconds = wall_seconds() - t0;
        pthread_mutex_lock(&c->mu);
        c->stats.cpu_seconds = thread_cpu_seconds();
        if (!skip && !rc && r.kind != REQ_AUX) {
            double bytes = (double)layer_store_slot_bytes(c->store, r.idx);
            if (r.kind == REQ_READ) c->stats.read_bytes += bytes, c->stats.read_seconds += seconds;
            else c->stats.write_bytes += bytes, c->stats.write_seconds += seconds;
        }
        if (rc && !c->failed) c->failed = 1, c->err = e;
        if (sl) {
            if (r.kind == REQ_READ && !skip && !rc) sl->version = version;
            sl->busy--;
        } else {
            c->aux_busy = 0;
        }
        c->inflight = 0;
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void enqueue(Ctx *c, int kind, int slot, int idx, long version) {
    // A slot rarely has more than a write-back then a read queued; the ring has room for 8 per
    // slot and is checked anyway, because overrunning it would corrupt silently.
    if (c->qlen == c->qcap) {
        fprintf(stderr, "fgpipe: layer stream request queue overflow\n");
        abort();
    }
    c->q[(c->qhead + c->qlen) % c->qcap] = (Req){kind, slot, idx, version};
    c->qlen++;
    if (kind != REQ_AUX) c->slots[slot].busy++;
    pthread_cond_signal(&c->req_cv);
}

static int sticky(Ctx *c, FgError *err) { return fg_fail(err, c->err.code, "%s", c->err.msg); }

static int resident(Ctx *c, int layer) {
    for (int i = 0; i < c->n; i++)
        if (c->slots[i].layer == layer) return i;
    return -1;
}

// The least recently used slot that is not pinned; read-ahead slots only if allow_ahead.
static int victim(Ctx *c, int allow_ahead) {
    int best = -1;
    for (int pass = 0; pass < 1 + allow_ahead && best < 0; pass++)
        for (int i = 0; i < c->n; i++) {
            Slot *sl = &c->slots[i];
            if (sl->pins || (sl->ahead && pass == 0)) continue;
            if (best < 0 || sl->last_use < c->slots[best].last_use) best = i;
        }
    return best;
}

// Queues a read of layer (store index idx) into a victim slot; the slot, or -1 if none is free.
static int start_read(Ctx *c, int layer, int idx, int allow_ahead) {
    int v = victim(c, allow_ahead);
    if (v < 0) return -1;
    Slot *sl = &c->slots[v];
    sl->layer = layer, sl->idx = idx, sl->ahead = 0, sl->last_use = ++c->tick;
    enqueue(c, REQ_READ, v, idx, 0);
    return v;
}

static int not_in_store(int layer, FgError *err) {
    return fg_fail(err, FG_ERR_INTERNAL, "layer stream: layer %d is not in the store", layer);
}

static int ls_prefetch(LayerStream *s, int layer, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = FG_OK, idx = layer_store_find(c->store, layer);
    if (c->failed) rc = sticky(c, err);
    else if (idx < 0) rc = not_in_store(layer, err);
    else if (resident(c, layer) < 0) {
        int v = start_read(c, layer, idx, 0);  // no free slot: no read-ahead, not an error
        if (v >= 0) c->slots[v].ahead = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_acquire(LayerStream *s, int layer, LayerView *view, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = FG_OK, v = resident(c, layer);
    if (c->failed) rc = sticky(c, err);
    else if (v < 0) {
        int idx = layer_store_find(c->store, layer);
        if (idx < 0) rc = not_in_store(layer, err);
        else if ((v = start_read(c, layer, idx, 1)) < 0)
            rc = fg_fail(err, FG_ERR_INTERNAL, "layer stream: all %d slots are pinned (release a "
                         "layer before acquiring layer %d)", c->n, layer);
    }
    if (!rc) {
        Slot *sl = &c->slots[v];
        double t0 = wall_seconds();
        while (sl->busy && !c->failed) pthread_cond_wait(&c->done_cv, &c->mu);
        c->stats.wait_seconds += wall_seconds() - t0;
        if (c->failed) rc = sticky(c, err);
        else {
            sl->pins++, sl->ahead = 0, sl->last_use = ++c->tick;
            size_t stride = layer_store_buf_stride(c->store, sl->idx);
            memset(view, 0, sizeof *view);
            view->layer = layer;
            view->count = layer_store_layer(c->store, sl->idx)->count;
            view->n_bufs = layer_store_n_bufs(c->store);
            for (int b = 0; b < view->n_bufs; b++) view->buf[b] = (float *)(sl->mem + (size_t)b * stride);
            view->version = sl->version;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_release(LayerStream *s, int layer, int dirty, FgError *err) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    int rc = FG_OK, v = resident(c, layer);
    if (v < 0 || c->slots[v].pins == 0)
        rc = fg_fail(err, FG_ERR_INTERNAL, "layer stream: releasing layer %d, which is not acquired", layer);
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
            else enqueue(c, REQ_WRITE, v, sl->idx, ++sl->version);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int ls_write_aux(LayerStream *s, long version, const void *data, FgError *err) {
    Ctx *c = s->ctx;
    size_t n = layer_store_aux_bytes(c->store);
    if (!n) return fg_fail(err, FG_ERR_INTERNAL, "layer stream: the store has no auxiliary record");
    pthread_mutex_lock(&c->mu);
    while (c->aux_busy && !c->failed) pthread_cond_wait(&c->done_cv, &c->mu);
    int rc = FG_OK;
    if (c->failed) rc = sticky(c, err);
    else {
        memcpy(c->aux_out, data, n);
        c->aux_busy = 1;
        enqueue(c, REQ_AUX, -1, -1, version);
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
    while (c->qlen || c->inflight) pthread_cond_wait(&c->done_cv, &c->mu);
    int rc = c->failed ? sticky(c, err) : FG_OK;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void free_ctx(Ctx *c) {
    for (int i = 0; i < c->n && !c->slot_memory; i++) fg_free(c->slots[i].mem);
    free(c->slots);
    free(c->q);
    fg_free(c->aux);
    fg_free(c->aux_out);
    layer_store_close(c->store);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->req_cv);
    pthread_cond_destroy(&c->done_cv);
    free(c);
}

static int ls_close(LayerStream *s, FgError *err) {
    Ctx *c = s->ctx;
    if (!c) return FG_OK;
    int rc = ls_flush(s, err);
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->req_cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->th, NULL);
    free_ctx(c);
    s->ctx = NULL;
    return rc;
}

static void ls_stats(LayerStream *s, LayerStreamStats *out) {
    Ctx *c = s->ctx;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

int layer_stream_store_open(LayerStream *s, LayerStore *store, int n_slots, FgError *err) {
    return layer_stream_store_open_in(s, store, n_slots, NULL, 0, err);
}

int layer_stream_store_open_in(LayerStream *s, LayerStore *store, int n_slots, void *memory,
                               size_t memory_bytes, FgError *err) {
    memset(s, 0, sizeof *s);
    size_t bytes = layer_store_max_slot_bytes(store);
    if (memory && ((uintptr_t)memory % 4096 || memory_bytes < (size_t)n_slots * bytes)) {
        layer_store_close(store);
        return fg_fail(err, FG_ERR_INTERNAL, "layer stream: the slot memory given (%zu bytes at "
                       "%p) does not hold %d aligned slots of %zu bytes", memory_bytes, memory,
                       n_slots, bytes);
    }
    if (n_slots < 2) {
        layer_store_close(store);
        return fg_fail(err, FG_ERR_INPUT, "layer stream: %d slots; it needs at least 2 (one "
                       "computing, one reading ahead)", n_slots);
    }
    if (layer_store_version(store) < 0) {
        layer_store_close(store);
        return fg_fail(err, FG_ERR_INPUT, "layer stream: the store has no complete version yet");
    }
    Ctx *c = calloc(1, sizeof *c);
    c->store = store, c->n = n_slots;
    c->slots = calloc((size_t)n_slots, sizeof *c->slots);
    c->slot_memory = memory;
    for (int i = 0; i < n_slots; i++) {
        c->slots[i] = (Slot){.layer = -1, .idx = -1, .last_use = 0};
        c->slots[i].mem = memory ? (unsigned char *)memory + (size_t)i * bytes : dio_alloc(bytes);
    }
    c->qcap = 8 * n_slots + 8;
    c->q = calloc((size_t)c->qcap, sizeof *c->q);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->req_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    size_t aux = layer_store_aux_bytes(store);
    if (aux) {
        c->aux = dio_alloc(aux), c->aux_out = dio_alloc(aux);
        int rc = layer_store_read_aux(store, c->aux, err);
        if (rc) {
            free_ctx(c);
            return rc;
        }
    }
    pthread_create(&c->th, NULL, io_thread, c);
    s->ctx = c;
    s->n_slots = n_slots;
    s->slot_bytes = bytes;
    s->version = layer_store_version(store);
    snprintf(s->note, sizeof s->note, "%s", layer_store_note(store));
    s->prefetch = ls_prefetch, s->acquire = ls_acquire, s->release = ls_release;
    s->write_aux = ls_write_aux, s->read_aux = ls_read_aux, s->flush = ls_flush, s->close = ls_close;
    s->stats = ls_stats;
    return FG_OK;
}
