// The builders' common steps (model.c), for the model files that build one family each
// (model.c: MLP and GPT; model_llama.c: Llama and Qwen3).
#ifndef FGPIPE_MODEL_BUILD_H
#define FGPIPE_MODEL_BUILD_H

#include "model.h"

// Appends layer L (kind, name, widths and shape fields set) and gives it its parameters.
Layer *add_layer(Model *m, Layer L);
// A view of `rows x cols` floats of layer L's parameters from `offset` on (relative to the
// layer), named "<L's name>.<tensor>" or, when tensor has a dot, `tensor` itself.
TensorView *add_tensor(Model *m, const Layer *L, const char *tensor, size_t offset, int rows,
                       int cols, float init_std, float init_value);
// A layer of one token per sample.
Layer layer_of(LayerKind kind, const char *name, int in, int out);
// A language model's head over T tokens of width C: V (padded) logit rows of `classes` real
// tokens, fused with the loss unless fused_head is 0 (head_block columns at a time, <= 0: the
// default); its weight tensor is the caller's to add. Also sets the model's input and output
// sizes.
Layer *add_lm_head(Model *m, int T, int C, int V, int classes, int fused_head, int head_block);

#endif
