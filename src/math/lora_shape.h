// The shape of a LoRA adapter's call (layer_lora.c, cuda/lora_cuda.cu): a token [x (C), h (k)]
// becomes [x, h, delta (n)]; the projection's rows are up to three parts, each adapted or not
// (L->lora_mask); the parameters are every adapted part's A [r, k], then every adapted part's
// B [n_part, r].
#ifndef FGPIPE_LORA_SHAPE_H
#define FGPIPE_LORA_SHAPE_H

#include "layer.h"

typedef struct {
    size_t rows;              // tokens in the call: B * tokens
    int C, k, in, out, r, P;  // carried, branch input, token in and out, rank, adapted parts
    int off[3], n[3];         // adapted part j: rows [off, off + n) of delta
} LoraShape;

static inline LoraShape lora_shape(const Layer *L, int B) {
    LoraShape s;
    s.rows = (size_t)B * layer_tokens(L);
    s.C = L->carry, s.in = layer_in_token(L), s.out = layer_out_token(L);
    s.k = s.in - s.C, s.r = L->lora_rank, s.P = 0;
    for (int i = 0, at = 0; i < 3; at += L->lora_parts[i], i++)
        if (L->lora_mask >> i & 1) s.off[s.P] = at, s.n[s.P++] = L->lora_parts[i];
    return s;
}

// Where adapted part j's B starts in the parameters (after every part's A).
static inline size_t lora_b_offset(const LoraShape *s, int j) {
    size_t at = (size_t)s->P * s->r * s->k;
    for (int i = 0; i < j; i++) at += (size_t)s->n[i] * s->r;
    return at;
}

#endif
