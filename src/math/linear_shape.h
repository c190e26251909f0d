// The shape of a linear layer's call (layer_linear.c, cuda/layers_cuda.cu, the low-rank tangents
// of perturb_lowrank.c): with carry c, a token is [x (c), h (k)] and the output [x, h W^T + b], or
// x + h W^T + b when residual (n = c); the weight is [n, k]. With a tail t (LoRA, layer_lora.c)
// a token is [x, h, delta (t = n)] and delta is added to the branch output.
#ifndef FGPIPE_LINEAR_SHAPE_H
#define FGPIPE_LINEAR_SHAPE_H

#include "layer.h"

typedef struct {
    int rows;        // tokens in the call: B * tokens
    int in, out;     // features per token of input and output
    int c, k, n;     // carried features, branch input, branch output
    int out_offset;  // where the branch output goes in an output token
} LinearShape;

static inline LinearShape linear_shape(const Layer *L, int B) {
    LinearShape s;
    s.rows = B * layer_tokens(L);
    s.in = layer_in_token(L);
    s.out = layer_out_token(L);
    s.c = L->carry;
    s.k = s.in - s.c - L->tail;
    layer_branch(L, &s.out_offset, &s.n);
    return s;
}

#endif
