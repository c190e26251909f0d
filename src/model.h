// A model: an ordered list of layers whose parameters live in one flat buffer.
//
// Each layer's tensors are named views into that buffer ("fc1.weight" [out, in],
// "fc1.bias" [out]), so a stage can send, save or stream its parameters as one contiguous
// range: the layers [first, last) own params[layers[first].param_offset ..
// layers[last-1].param_offset + layers[last-1].param_count).
#ifndef FGPIPE_MODEL_H
#define FGPIPE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "layer.h"

#define MODEL_MAX_LAYERS 64
#define MODEL_MAX_TENSORS (2 * MODEL_MAX_LAYERS)

typedef struct {
    char name[32];     // "<layer>.<tensor>"
    int layer;         // owning layer index
    size_t offset;     // into the flat buffer
    int rows, cols;    // cols == 1 for vectors
} TensorView;

typedef struct {
    int n_layers;
    Layer layers[MODEL_MAX_LAYERS];
    int n_tensors;
    TensorView tensors[MODEL_MAX_TENSORS];
    size_t n_params;
    int in_features, classes;
    int max_width;  // widest activation, sizes the work buffers
} Model;

// Builds an MLP from "784-1024-1024-10" and an activation name ("relu" or "gelu"): linear
// layers between consecutive widths, the activation after every linear layer but the last.
int model_build_mlp(Model *m, const char *widths, const char *activation, FgError *err);

// Kaiming-normal weights (std sqrt(2/in)) and zero biases, drawn from the counter-based
// generator with the seed, so initial weights do not depend on how the model is split.
void model_init_params(const Model *m, float *params, uint32_t seed);
// The same values for layers [first, last) only, into their slice (a pipeline stage's).
void model_init_range(const Model *m, int first, int last, float *params, uint32_t seed);

// Parameters owned by layers [first, last): where they start and how many.
size_t model_range_offset(const Model *m, int first);
size_t model_range_count(const Model *m, int first, int last);

// Layer by layer access to a stage's tensors (checkpoints, --save-params): visit is called for
// each layer with parameters, in order, with bufs[b] the layer's slice of buffer b. A visitor
// returns FG_OK to go on.
typedef int (*LayerVisitor)(void *arg, const Layer *L, float *const *bufs, FgError *err);
// Over n_buffers buffers that each hold layers [first, last) in the flat layout (from
// model_range_offset(m, first)).
int model_visit_layers(const Model *m, int first, int last, float *const *buffers, int n_buffers,
                       LayerVisitor visit, void *arg, FgError *err);

#endif
