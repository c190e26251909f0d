// Causal attention's shape, token layout and score dot product, for the CPU
// (layer_attention.c) and the GPU (cuda/attention_cuda.cu). A token is [x, q, k, v] in and
// [x, att] out (layer.h); one score is a dot over a head's hs features summed in order, the
// same bits on both.
#ifndef FGPIPE_ATTENTION_MATH_H
#define FGPIPE_ATTENTION_MATH_H

#include <math.h>
#include <stddef.h>

#include "host_device.h"
#include "layer.h"

typedef struct {
    int B, T, C, H, hs;
    int in, out;  // floats per input and output token: 4C, 2C
    float scale;  // 1 / sqrt(hs)
} AttnShape;

static inline AttnShape attn_shape(const Layer *L, int B) {
    AttnShape s;
    s.B = B;
    s.T = layer_tokens(L);
    s.C = L->carry;
    s.H = L->heads;
    s.hs = s.C / s.H;
    s.in = layer_in_token(L);
    s.out = layer_out_token(L);
    s.scale = 1.0f / sqrtf((float)s.hs);
    return s;
}

// Where head h's part of q, k, v (part 1, 2, 3) of token t of sample b starts.
FG_HD size_t attn_at_in(const AttnShape *s, int b, int t, int part, int h) {
    return ((size_t)b * s->T + t) * s->in + (size_t)part * s->C + (size_t)h * s->hs;
}
FG_HD size_t attn_at_out(const AttnShape *s, int b, int t, int h) {
    return ((size_t)b * s->T + t) * s->out + s->C + (size_t)h * s->hs;
}

FG_HD float fg_dot_hs(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d += a[i] * b[i];
    return d;
}

#endif
