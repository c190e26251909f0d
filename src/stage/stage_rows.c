// A token table in row blocks (Layer.block_rows > 0: the embedding or the fused head;
// docs/out-of-core.md, "Row blocks of the token table"): ops F and B a block of rows at a time,
// the blocks in ascending order, the numbers of the whole-layer calls bit for bit
// (embedding_rows.h, head_loss.h), and with weight tangents the block's rows of them (the
// config refuses the other perturbations). On the CPU only: the config refuses blocks on a
// device, whose head has no row form.
#include "embedding_rows.h"
#include "head_loss.h"
#include "perturbation.h"

// A token table's row ops, by layer kind (rows_of): the embedding's and the fused head's.
typedef struct {
    // Bytes of what a lane carries from block to block (0: nothing).
    size_t (*state_bytes)(const Layer *L, int rows, int K);
    // Rows [r0, r0 + n) of the table for a lane; pdot: their K tangents (NULL: none), t: whether
    // the call carries tangents at all.
    void (*forward)(Stage *st, const Layer *L, const float *p, int r0, int n, const float *pdot,
                    size_t count, int t, const float *x, const float *xdot, const Label *labels,
                    float *y, float *ydot, int rows, void *state);
    // After the last block: the lane's score (a head), or nothing.
    void (*finish)(const Stage *st, const Layer *L, const void *state, HeadScore *h, int tangents,
                   float *rec, int rows);
    void (*backward)(const Layer *L, const float *p, int r0, int n, const float *x, const float *dy,
                     float *dx, float *grad, int rows);
    // Whether the forward of these inputs reads rows [r0, r0 + n) at all.
    int (*read)(const Layer *L, int r0, int n, const float *x, int rows);
} RowsOps;

static size_t no_state(const Layer *L, int rows, int K) {
    (void)L, (void)rows, (void)K;
    return 0;
}

static void embedding_forward(Stage *st, const Layer *L, const float *p, int r0, int n, const float *pdot,
                              size_t count, int t, const float *x, const float *xdot, const Label *labels,
                              float *y, float *ydot, int rows, void *state) {
    (void)xdot, (void)labels, (void)state;
    const int K = st->tangents;
    embedding_rows_forward(L, p, r0, n, x, y, rows);
    size_t plane = (size_t)rows * L->out;
    if (t && !pdot && r0 == 0) st->be->zero(st->be, ydot, (size_t)K * plane * sizeof(float));
    for (int k = 0; pdot && k < K; k++)  // ids carry no tangent: the table's alone
        embedding_rows_forward(L, pdot + (size_t)k * count, r0, n, x, ydot + k * plane, rows);
}

static void embedding_finish(const Stage *st, const Layer *L, const void *state, HeadScore *h,
                             int tangents, float *rec, int rows) {
    (void)st, (void)L, (void)state, (void)h, (void)tangents, (void)rec, (void)rows;
}

static void embedding_backward(const Layer *L, const float *p, int r0, int n, const float *x,
                               const float *dy, float *dx, float *grad, int rows) {
    (void)p, (void)dx;  // ids: no input adjoint
    if (grad) embedding_rows_backward(L, r0, n, x, dy, grad, rows);
}

static void head_forward(Stage *st, const Layer *L, const float *p, int r0, int n, const float *pdot,
                         size_t count, int t, const float *x, const float *xdot, const Label *labels,
                         float *y, float *ydot, int rows, void *state) {
    (void)y, (void)ydot;
    if (!t) {
        head_rows_forward(L, p, r0, n, x, labels, rows, state);
        return;
    }
    HeadTangents ht = {.Wdot = pdot, .wdot_stride = count};
    head_rows_jvp(L, p, r0, n, x, xdot, labels, rows, st->tangents, &ht, state);
}

static void head_finish(const Stage *st, const Layer *L, const void *state, HeadScore *h,
                        int tangents, float *rec, int rows) {
    if (tangents)
        h->loss = head_rows_jvp_finish(L, state, h->labels, rows, st->tangents, h->weight, 0, rec, h->d);
    else
        h->loss = head_rows_finish(L, state, h->labels, rows, h->weight, rec, &h->correct);
    if (tangents) h->correct = 0;
}

static int every_block(const Layer *L, int r0, int n, const float *x, int rows) {
    (void)L, (void)r0, (void)n, (void)x, (void)rows;
    return 1;  // a head scores every row of its table
}

static const RowsOps embedding_rows = {no_state, embedding_forward, embedding_finish, embedding_backward,
                                       embedding_rows_read};
static const RowsOps head_rows = {head_rows_state_bytes, head_forward, head_finish, head_rows_backward,
                                  every_block};
// The kinds that come in row blocks (model.c: the token tables).
static const RowsOps *const rows_by_kind[LAYER_KIND_COUNT] = {[LAYER_EMBEDDING] = &embedding_rows,
                                                              [LAYER_HEAD_LOSS] = &head_rows};

static const RowsOps *rows_of(const Layer *L) { return rows_by_kind[L->kind]; }

size_t stage_rows_state_bytes(const Stage *st, int l, int rows) {
    const Layer *L = &st->model->layers[l];
    return L->block_rows ? rows_of(L)->state_bytes(L, rows, st->tangents) : 0;
}

// The K weight tangents' rows of the block [first, first + count) into st->pdot [K, count] (the
// guide's rows replace tangent 0), each dotted with the reference's rows (t->ref: the block's).
static void block_tangents(Stage *st, int l, const ParamTangents *t, size_t first, size_t count) {
    TangentKey key = t->key;
    key.layer = (uint32_t)l;
    for (int k = 0; k < st->tangents; k++) {
        key.k = (uint32_t)k;
        float *dst = st->pdot + (size_t)k * count;
        double ref_dot = 0.0;
        if (k == 0 && t->guide) {
            st->be->copy(st->be, dst, t->guide, count * sizeof(float));
            if (t->ref) ref_dot = st->be->dot(st->be, t->ref, dst, count);
        } else if (t->ref) {
            ref_dot = tangent_fill_dot(key, first, count, dst, t->ref);
        } else {
            tangent_fill(key, first, count, dst);
        }
        if (t->ref) t->ref_dots[k] += ref_dot;
    }
}

void stage_rows_forward(Stage *st, int l, const float *p, size_t first, size_t count,
                        const ParamTangents *t, const float *x, const float *xdot,
                        const Label *labels, float *y, float *ydot, int rows, void *state) {
    const Layer *L = &st->model->layers[l];
    const int r0 = (int)(first / layer_row_floats(L)), n = (int)(count / layer_row_floats(L));
    const int perturbed = t && st->plan[l].trains;
    if (perturbed) block_tangents(st, l, t, first, count);
    rows_of(L)->forward(st, L, p, r0, n, perturbed ? st->pdot : NULL, count, t != NULL, x, xdot, labels,
                        y, ydot, rows, state);
}

int stage_rows_read(const Stage *st, int l, int b, const float *x, int rows) {
    const Layer *L = &st->model->layers[l];
    size_t first, count;
    layer_block(L, b, &first, &count);
    const size_t C = layer_row_floats(L);
    return rows_of(L)->read(L, (int)(first / C), (int)(count / C), x, rows);
}

void stage_rows_finish(const Stage *st, int l, const void *state, HeadScore *h, int tangents,
                       float *rec, int rows) {
    const Layer *L = &st->model->layers[l];
    rows_of(L)->finish(st, L, state, h, tangents, rec, rows);
}

void stage_rows_backward(const Stage *st, int l, const float *p, int r0, int n, const float *x,
                         const float *dy, float *dx, float *grad, int rows) {
    const Layer *L = &st->model->layers[l];
    rows_of(L)->backward(L, p, r0, n, x, dy, dx, grad, rows);
}
