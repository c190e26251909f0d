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

#define MODEL_MAX_LAYERS 512  // GPT-2 1.5B: 48 blocks of 8 layers + 3
#define MODEL_MAX_TENSORS (2 * MODEL_MAX_LAYERS)

typedef struct {
    char name[48];     // "<group>.<tensor>": "fc1.weight", "h.0.attn.c_attn.bias", "wpe.weight"
    int layer;         // owning layer index
    size_t offset;     // into the flat buffer
    int rows, cols;    // cols == 1 for vectors
    float init_std;    // initial values ~ N(0, init_std^2) when > 0, else all init_value
    float init_value;
    float init_uniform; // > 0: initial values ~ U(-init_uniform, init_uniform) instead (LoRA's A)
    uint32_t init_key; // keys the initial draw: tensors with one key start equal (tied copies)
} TensorView;

typedef struct {
    int n_layers;
    Layer layers[MODEL_MAX_LAYERS];
    int n_tensors;
    TensorView tensors[MODEL_MAX_TENSORS];
    size_t n_params;
    int in_features;  // floats per input sample (pixels; token ids for a GPT)
    int classes;      // classes per label (the GPT: its vocabulary, 256 bytes or 50257 tokens)
    int logit_stride; // floats per label position of the model's output: classes, or the GPT's
                      // vocabulary padded to a multiple of pad_vocab (the pad columns unscored)
    int tokens;       // labels per sample: 1 (MLP), ctx (GPT: the next byte at every position)
    int max_width;    // widest activation, sizes the work buffers
    int tied_first, tied_last;  // GPT: the layers holding the two copies of wte (else -1)
    int fused_head;   // the last layer is the head fused with the loss (head_loss.h)
} Model;

// The GPT of docs/gpt.md: tokens 0..vocab-1 (bytes: 256), n_layer pre-LayerNorm blocks of width n_embd with
// n_head heads over ctx positions, a final LayerNorm and a head tied to the token embedding
// (two copies, kept equal by summing their gradients). Tensors are named as in Hugging
// Face's GPT-2 with fgpipe's [out, in] orientation.
// Token table and head have vocab rounded up to a multiple of pad_vocab rows.
// fused_head: the head and the loss in one (head_loss.h): the model's output is a record of
// HEAD_RECORD floats per token instead of its logits (training on the CPU; evaluation and
// generation build the model unfused, for the logits).
typedef struct {
    int n_layer, n_embd, n_head, ctx, vocab, pad_vocab;
    int fused_head;
    int head_block;  // fused_head: vocabulary columns per block (0: HEAD_BLOCK_COLUMNS)
} GptShape;
int model_build_gpt(Model *m, GptShape shape, FgError *err);

// Llama and Qwen3 (transformers' LlamaForCausalLM, Qwen3ForCausalLM; docs/gpt.md, "Llama and
// Qwen3"): n_layer pre-RMSNorm blocks of width n_embd, n_head query heads and n_kv_head kv
// heads of head_dim features with rotary positions, a SwiGLU MLP of `intermediate` features,
// no biases, a final RMSNorm and a head tied to the token table or not. qk_norm: Qwen3's
// RMSNorm of every q and k head before the rotation. Tensors are named as Hugging Face names
// them, less the "model." prefix ("layers.0.self_attn.q_proj.weight", "norm.weight",
// "lm_head.weight").
typedef struct {
    int n_layer, n_embd, n_head, n_kv_head, head_dim, intermediate, ctx, vocab, pad_vocab;
    float rms_eps;
    RopeParams rope;
    int qk_norm, tie_embeddings;
    int fused_head, head_block;  // as GptShape's
    // LoRA (layer_lora.c): rank r > 0 adds adapters on the projections in lora_targets (bits
    // LORA_Q..LORA_DOWN) scaled by lora_alpha / r, and freezes every other layer.
    int lora_rank, lora_targets;
    float lora_alpha;
} LlamaShape;
enum { LORA_Q = 1, LORA_K = 2, LORA_V = 4, LORA_O = 8, LORA_GATE = 16, LORA_UP = 32, LORA_DOWN = 64 };
int model_build_llama(Model *m, LlamaShape shape, FgError *err);

// How the loss reads the model's output rows.
static inline LogitRows model_logit_rows(const Model *m) {
    return (LogitRows){m->classes, m->logit_stride};
}

// Builds an MLP from "784-1024-1024-10" and an activation name ("relu" or "gelu"): linear
// layers between consecutive widths, the activation after every linear layer but the last.
int model_build_mlp(Model *m, const char *widths, const char *activation, FgError *err);

// Each tensor's init (MLP: Kaiming-normal weights, std sqrt(2/in), and zero biases; GPT:
// N(0, 0.02) matrices and embeddings, LayerNorm weights 1), drawn from the counter-based
// generator with the seed, so initial weights do not depend on how the model is split.
void model_init_params(const Model *m, float *params, uint32_t seed);
// The same values for layers [first, last) only, into their slice (a pipeline stage's).
void model_init_range(const Model *m, int first, int last, float *params, uint32_t seed);
// The initial values of floats [first, first + n) of layer l's parameters (a row block) into out,
// those of model_init_range bit for bit.
void model_init_part(const Model *m, int l, size_t first, size_t n, float *out, uint32_t seed);
// Row blocks (config table_block_rows > 0): the token table's layers (embedding, fused head) of
// more rows than `rows` get block_rows = rows; a layer's largest block in floats is then
// model_largest_block.
void model_set_row_blocks(Model *m, int rows);  // rows 0: every table whole
// The most rows of a token table (embedding, fused head) among layers [first, last); 0: none.
int model_table_rows(const Model *m, int first, int last);
size_t model_largest_block(const Model *m, int first, int last);
// The same over the layers that train (not frozen): what one layer's gradient or parameter
// tangents hold (a LoRA base's token table needs neither); at least 1.
size_t model_largest_trained_block(const Model *m, int first, int last);

// Parameters owned by layers [first, last): where they start and how many.
size_t model_range_offset(const Model *m, int first);
size_t model_range_count(const Model *m, int first, int last);

// Layer by layer access to a stage's tensors (checkpoints, --save-params): visit is called for
// each layer with parameters, in order, by ranges of its floats: bufs[b] holds floats
// [first, first + count) of the layer's slice of buffer b (bufs[b][0] is float `first`). A layer
// comes whole (first 0, count param_count) or, in row blocks, block by block ascending
// (layer_block), so a token table passes through a block-sized buffer. A visitor returns FG_OK
// to go on.
typedef int (*LayerVisitor)(void *arg, const Layer *L, size_t first, size_t count, float *const *bufs,
                            FgError *err);
// Over n_buffers buffers that each hold layers [first, last) in the flat layout (from
// model_range_offset(m, first)).
int model_visit_layers(const Model *m, int first, int last, float *const *buffers, int n_buffers,
                       LayerVisitor visit, void *arg, FgError *err);

#endif
