// A token table in row blocks (Layer.block_rows > 0: the embedding or the fused head;
// docs/out-of-core.md, "Row blocks of the token table"): ops F and B a block of rows at a time,
// the blocks in ascending order, the numbers of the whole-layer calls bit for bit
// (embedding_rows.h, head_loss.h). On the CPU only: the config refuses blocks on a device, whose
// head has no row form.
#include "embedding_rows.h"
#include "head_loss.h"
#include "stage.h"

size_t stage_rows_state_bytes(const Stage *st, int l, int rows) {
    const Layer *L = &st->model->layers[l];
    return L->head_block && L->block_rows ? head_rows_state_bytes(L, rows, 0) : 0;
}

void stage_rows_forward(const Stage *st, int l, const float *p, int r0, int n, const float *x,
                        const Label *labels, float *y, int rows, void *state) {
    const Layer *L = &st->model->layers[l];
    if (L->head_block) head_rows_forward(L, p, r0, n, x, labels, rows, state);
    else embedding_rows_forward(L, p, r0, n, x, y, rows);
}

void stage_rows_finish(const Stage *st, int l, const void *state, HeadScore *h, float *rec,
                       int rows) {
    const Layer *L = &st->model->layers[l];
    if (L->head_block) h->loss = head_rows_finish(L, state, h->labels, rows, h->weight, rec, &h->correct);
}

void stage_rows_backward(const Stage *st, int l, const float *p, int r0, int n, const float *x,
                         const float *dy, float *dx, float *grad, int rows) {
    const Layer *L = &st->model->layers[l];
    if (L->head_block) head_rows_backward(L, p, r0, n, x, dy, dx, grad, rows);
    else if (grad) embedding_rows_backward(L, r0, n, x, dy, grad, rows);  // ids: no input adjoint
}
