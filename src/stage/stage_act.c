// The element type of a stage's activations (Stage.act_type, stage.h): FP32, or BF16 between
// layers (precision = bf16 on the CPU). Layers compute in FP32 on FP32 work buffers; each
// layer's output is rounded to BF16 once (to nearest even, bf16.h) where it is made, so what a
// stash keeps and a message carries in BF16 bytes widens back to the very floats the next layer
// read: a pipeline of 2 stages computes what 1 computes, bit for bit. The model's input (token
// ids, pixels) and its last layer's output (logits, a fused head's records) stay FP32.
#include "bf16.h"
#include "stage.h"

void stage_set_act_type(Stage *st, FgDtype type) {
    st->act_type = type;  // BF16 runs only where the CPU has it (config validation): the vector loop
    st->act_convert = type == FG_BF16 && !cpu_bf16_missing() ? bf16_convert_avx512 : bf16_convert_scalar;
}

FgDtype stage_act_type(const Stage *st, int l) {
    return l > 0 && l < st->model->n_layers ? st->act_type : FG_F32;
}

size_t stage_act_floats(const Stage *st, int l, size_t n) {
    return stage_act_type(st, l) == FG_BF16 ? (n + 1) / 2 : n;
}

void stage_act_store(const Stage *st, int l, void *dst, const float *x, size_t n) {
    if (stage_act_type(st, l) == FG_F32) st->be->copy(st->be, dst, x, n * sizeof(float));
    else st->act_convert(x, dst, n);  // serial (bf16_widen says why)
}

const float *stage_act_load(const Stage *st, int l, const void *src, float *scratch, size_t n) {
    if (stage_act_type(st, l) == FG_F32) return src;
    bf16_widen(src, scratch, n);
    return scratch;
}

void stage_round_output(const Stage *st, int l, float *y, int rows) {
    if (stage_act_type(st, l + 1) == FG_BF16)
        bf16_round_floats(st->act_convert, y, (size_t)rows * st->model->layers[l].out);
}
