// The shared slots of a node's replicas of one stage (slot_share.h).
//
// The block: a header page (where the last acquired layer of each store lies), then each
// store's slots, 4 KiB aligned for direct I/O. Offsets, not pointers, cross ranks: each rank
// maps the block at its own address.
#include "slot_share.h"

#include <stdint.h>
#include <string.h>

enum { HEADER_BYTES = 4096, ALIGN = 4096 };

typedef struct {
    int64_t layer, count, n_bufs, version;
    int64_t off[4];   // buffer b at base + off[b]
} SharedView;

typedef struct {
    SharedView view[SHARE_STORES];
} SharedHeader;

static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

int slot_share_open(SlotShare *sh, NodeShare *node, const size_t bytes[SHARE_STORES], FgError *err) {
    *sh = (SlotShare){.node = node, .io = node->rank == 0};
    // The block's start need not be aligned: the I/O rank's offsets are, at every rank's address
    // (a shared mapping keeps offsets within a page), and ALIGN more bytes leave room.
    size_t total = HEADER_BYTES + ALIGN;
    for (int i = 0; i < SHARE_STORES; i++) total += align_up(bytes[i]);
    int rc = node->alloc_shared(node, sh->io ? total : 0, &sh->base, err);
    if (rc) return rc;
    size_t at = align_up((uintptr_t)sh->base + HEADER_BYTES) - (uintptr_t)sh->base;
    if ((rc = node->bcast(node, &at, sizeof at, err))) return rc;
    for (int i = 0; i < SHARE_STORES; i++) {
        sh->slots_off[i] = at, sh->slots_bytes[i] = bytes[i];
        at += align_up(bytes[i]);
    }
    return FG_OK;
}

void *slot_share_memory(const SlotShare *sh, int store) {
    return sh->io && sh->slots_bytes[store] ? sh->base + sh->slots_off[store] : NULL;
}

void slot_share_publish(SlotShare *sh, int store, const LayerView *v) {
    SharedView *s = &((SharedHeader *)sh->base)->view[store];
    *s = (SharedView){.layer = v->layer, .count = (int64_t)v->count, .n_bufs = v->n_bufs,
                      .version = v->version};
    for (int b = 0; b < v->n_bufs; b++) s->off[b] = (unsigned char *)v->buf[b] - sh->base;
}

void slot_share_view(const SlotShare *sh, int store, LayerView *v) {
    const SharedView *s = &((const SharedHeader *)sh->base)->view[store];
    *v = (LayerView){.layer = (int)s->layer, .count = (size_t)s->count, .n_bufs = (int)s->n_bufs,
                     .version = (long)s->version};
    for (int b = 0; b < v->n_bufs; b++) v->buf[b] = (float *)(sh->base + s->off[b]);
}

int slot_share_barrier(SlotShare *sh, FgError *err) { return sh->node->barrier(sh->node, err); }

static const char *term_names[] = {"first layer", "last layer", "buffers per layer (optimizer, "
                                   "estimator)", "step buffers per layer", "slots (mem_budget)",
                                   "largest layer", "parameters", "--resume-weights", "seed",
                                   "mode", "optimizer"};
enum { N_TERMS = sizeof term_names / sizeof *term_names, AGREE = N_TERMS };

// The first term in which a and b differ, or AGREE.
static int differing_term(const ShareTerms *a, const ShareTerms *b) {
    const int64_t *x = &a->first, *y = &b->first;
    for (int i = 0; i < N_TERMS; i++)
        if (x[i] != y[i]) return i;
    return AGREE;
}

int slot_share_agree(SlotShare *sh, const ShareTerms *mine, const char *store, FgError *err) {
    NodeShare *n = sh->node;
    ShareTerms io = *mine;
    int rc = n->bcast(n, &io, sizeof io, err);
    if (rc) return rc;
    // Every rank learns the first term any of them differs in, so each names it.
    int term = differing_term(mine, &io), first = term;
    if ((rc = n->all(n, &first, err)) || first == AGREE) return rc;
    const int64_t *have = &mine->first, *want = &io.first;
    if (term == first)
        return fg_fail(err, FG_ERR_INPUT, "the replicas of this stage on this node share the "
                       "layer store %s, but this rank (replica %d of the node) has %s = %lld and "
                       "the node's I/O rank %lld: start every replica with the same config and "
                       "flags", store, n->rank, term_names[first], (long long)have[first],
                       (long long)want[first]);
    return fg_fail(err, FG_ERR_INPUT, "the replicas of this stage on this node share the layer "
                   "store %s, but another replica there has another %s (this rank, replica %d of "
                   "the node: %lld): start every replica with the same config and flags", store,
                   term_names[first], n->rank, (long long)have[first]);
}

int slot_share_outcome(SlotShare *sh, int rc, void *data, size_t bytes, const char *store,
                       FgError *err) {
    NodeShare *n = sh->node;
    int code = rc, rc2 = n->bcast(n, &code, sizeof code, sh->io && rc ? &(FgError){0} : err);
    if (rc2 && !rc) return rc2;
    if (code) return sh->io ? rc : fg_fail(err, code, "the node's I/O rank for this stage failed "
                                           "on the shared layer store %s (its error says why)", store);
    return bytes ? n->bcast(n, data, bytes, err) : FG_OK;
}

void slot_share_close(SlotShare *sh) {
    if (sh->node && sh->base) sh->node->free_shared(sh->node);
    sh->base = NULL;
}
