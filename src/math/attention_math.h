// Causal attention's shape, token layout and score dot product, for the CPU
// (layer_attention.c) and the GPU (cuda/attention_cuda.cu). A token is [x (C), q (H hs),
// k (Hkv hs), v (Hkv hs)] in and [x, att (H hs)] out (layer.h); the GPT has Hkv = H and
// hs = C / H, Llama grouped-query attention Hkv < H: query head h reads kv head h / (H / Hkv).
// One score is a dot over a head's hs features summed in order, the same bits on both.
#ifndef FGPIPE_ATTENTION_MATH_H
#define FGPIPE_ATTENTION_MATH_H

#include <math.h>
#include <stddef.h>

#include "host_device.h"
#include "layer.h"

typedef struct {
    int B, T, C, H, hs;
    int Hkv, group;  // kv heads, query heads per kv head
    int in, out;     // floats per input and output token: C + (H + 2 Hkv) hs, C + H hs
    float scale;  // 1 / sqrt(hs)
} AttnShape;

static inline AttnShape attn_shape(const Layer *L, int B) {
    AttnShape s;
    s.B = B;
    s.T = layer_tokens(L);
    s.C = L->carry;
    s.H = L->heads;
    s.hs = layer_head_dim(L);
    s.Hkv = layer_kv_heads(L);
    s.group = s.H / s.Hkv;
    s.in = layer_in_token(L);
    s.out = layer_out_token(L);
    s.scale = 1.0f / sqrtf((float)s.hs);
    return s;
}

// Where query head h's part of q, k, v (part 1, 2, 3) of token t of sample b starts.
FG_HD size_t attn_at_in(const AttnShape *s, int b, int t, int part, int h) {
    size_t at = ((size_t)b * s->T + t) * s->in + s->C;
    if (part == 1) return at + (size_t)h * s->hs;
    at += (size_t)s->H * s->hs + (size_t)(h / s->group) * s->hs;
    return part == 2 ? at : at + (size_t)s->Hkv * s->hs;
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
