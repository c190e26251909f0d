// What passes between a stage's layers, in one element type (Stage.act_type, stage.h): FP32 or
// BF16. With precision = bf16 on the CPU the activations, the JVP's tangents and backprop's
// adjoints between layers are BF16. Layers compute in FP32 on FP32 work buffers; each layer's
// output (and its output tangents) is rounded to BF16 once where it is made, and each input
// adjoint where a backward op makes it, so what a stash keeps and a message carries in BF16
// bytes widens back to the very floats the next layer read: a pipeline of 2 stages computes
// what 1 computes, bit for bit, wherever the cut falls. The model's input (token ids, pixels)
// and its last layer's output (logits, a fused head's records) and their adjoints stay FP32.
// The conversions are the backend's (narrow16, widen16, round16: the same bits on the CPU and
// the GPU), on the stage's buffers where they lie.
#include "stage.h"

void stage_set_act_type(Stage *st, FgDtype type) { st->act_type = type; }

FgDtype stage_act_type(const Stage *st, int l) {
    return l > 0 && l < st->model->n_layers ? st->act_type : FG_F32;
}

size_t stage_act_floats(const Stage *st, int l, size_t n) {
    return stage_act_type(st, l) == FG_BF16 ? (n + 1) / 2 : n;
}

size_t stage_act_bytes(const Stage *st, int l, size_t n) { return sizeof(float) * stage_act_floats(st, l, n); }

size_t stage_message_bytes(const Stage *st, int l, size_t n, int K) {
    return stage_act_bytes(st, l, n) + stage_act_bytes(st, l, n * (size_t)K);
}

void *stage_act_at(const Stage *st, int l, void *base, size_t n) {
    return (char *)base + n * (stage_act_type(st, l) == FG_BF16 ? sizeof(uint16_t) : sizeof(float));
}

void stage_act_store(const Stage *st, int l, void *dst, const float *x, size_t n) {
    if (stage_act_type(st, l) == FG_F32) st->be->copy(st->be, dst, x, n * sizeof(float));
    else st->be->narrow16(st->be, x, dst, n, 0);
}

const float *stage_act_load(const Stage *st, int l, const void *src, float *scratch, size_t n) {
    if (stage_act_type(st, l) == FG_F32) return src;
    st->be->widen16(st->be, src, scratch, n);
    return scratch;
}

static void round_counted(const Stage *st, int l, float *x, size_t n, size_t at) {
    if (stage_act_type(st, l) != FG_BF16) return;
    st->be->round16(st->be, x, n, st->not_finite ? st->not_finite + at : NULL);
}

void stage_act_round(const Stage *st, int l, float *x, size_t n) { round_counted(st, l, x, n, (size_t)l); }

void stage_adjoint_round(const Stage *st, int l, float *x, size_t n) {
    round_counted(st, l, x, n, (size_t)st->model->n_layers + (size_t)l);
}

void stage_round_output(const Stage *st, int l, float *y, int rows) {
    stage_act_round(st, l + 1, y, (size_t)rows * st->model->layers[l].out);
}

float *stage_act_buffer(const Stage *st, int l, float *kept, float *work) {
    return kept && stage_act_type(st, l) == FG_F32 ? kept : work;
}

void stage_act_keep(const Stage *st, int l, void *kept, const float *x, size_t n) {
    if (kept && kept != (const void *)x) stage_act_store(st, l, kept, x, n);
}
