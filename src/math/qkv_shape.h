// The layout of a token of projected queries, keys and values, [x (C), q (H d), k (Hkv d),
// v (Hkv d)], that the ops between a Llama block's qkv projection and its attention keep
// (layer_qk_norm.c, layer_rope.c; attention_math.h reads the same layout).
#ifndef FGPIPE_QKV_SHAPE_H
#define FGPIPE_QKV_SHAPE_H

#include <stddef.h>

#include "host_device.h"
#include "layer.h"

typedef struct {
    size_t rows;   // tokens in the call
    int T;         // tokens per sample (a row's position is its index mod T)
    int width;     // floats per token, in and out
    int C, H, Hkv, d;
} QkvShape;

static inline QkvShape qkv_shape(const Layer *L, int B) {
    QkvShape s = {(size_t)B * layer_tokens(L), layer_tokens(L), layer_in_token(L), L->carry,
                  L->heads, layer_kv_heads(L), layer_head_dim(L)};
    return s;
}

// Where head j of the q and k heads (j < H: query head j, else kv head j - H) starts in a token.
FG_HD int qkv_head_at(const QkvShape *s, int j) { return s->C + j * s->d; }

// Copies the parts of n tokens that the op leaves as they are: x and v (layer_qk_norm.c).
void qkv_copy_rest(const QkvShape *s, size_t n, const float *from, float *to);

// The rotary embedding's table for T positions of heads of d features (layer_rope.c): cs
// [T, d/2, 2], the (cos, sin) of every position's and pair's angle, computed in double and
// rounded to float; malloc'd, the caller frees it. The GPU uploads the same table.
float *rope_table(const Layer *L, int T, int d);

// One pair of features of a head turned by (co, si): what the CPU and the GPU compute.
FG_HD void rope_turn(float lo, float hi, float co, float si, float *out_lo, float *out_hi) {
    *out_lo = lo * co - hi * si;
    *out_hi = hi * co + lo * si;
}

#endif
