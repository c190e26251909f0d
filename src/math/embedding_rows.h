// The token embedding over row blocks of its table (layer_embedding.c), for a table streamed a
// block at a time (docs/out-of-core.md): the table is [wte (vocab rows); wpe (tokens rows)] of
// C floats, and a call sees its rows [r0, r0 + n) only, P (dP) pointing at row r0. Called on
// the blocks in ascending order, covering the table, y and dP are the whole-table forward's
// and backward's bit for bit: a token's row is gathered when its block comes, its position
// row added when wpe's block comes (one add, as the whole lookup's). The JVP's ydot_k is the
// forward on the blocks of tangent k.
#ifndef FGPIPE_EMBEDDING_ROWS_H
#define FGPIPE_EMBEDDING_ROWS_H

#include "layer.h"

// y [B * tokens, C]: the ids [B * tokens] whose rows are among the block's, and the positions
// the block holds (every row of y is written by the block of its id first).
void embedding_rows_forward(const Layer *L, const float *P, int r0, int n, const float *ids,
                            float *y, int B);
// Whether the forward over ids [B * tokens] reads any row of the block [r0, r0 + n): one of
// their ids' rows, or a position row (block 0 always: the JVP's tangents of a frozen table are
// zeroed there).
int embedding_rows_read(const Layer *L, int r0, int n, const float *ids, int B);
// dP += the gradient of the block's rows, the tokens in order (ids repeat).
void embedding_rows_backward(const Layer *L, int r0, int n, const float *ids, const float *dy,
                             float *dP, int B);

#endif
