// The Llama / Qwen3 builder (model.h). Block b is a chain of layers h.b.* over [x, branch]
// tokens (layer.h), as the GPT's:
//   input_norm [x, rms(x)] -> qkv [x, q, k, v] -> (qk_norm) -> rope -> attn [x, att] ->
//   o_proj x + att Wo^T -> post_norm [x, rms(x)] -> gate_up [x, g, u] -> swiglu [x, silu(g) u]
//   -> down_proj x + (silu(g) u) Wd^T.
// Layer names are short (a layer store keeps 15 characters of each); tensor names are Hugging
// Face's.
// The fused projections hold Hugging Face's separate tensors as views of one weight: q_proj,
// k_proj, v_proj are the rows of qkv's [(H + 2 Hkv) d, C], gate_proj and up_proj those of
// gate_up's [2 I, C].
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "head_loss.h"
#include "model_build.h"

#define LLAMA_INIT_STD 0.02f  // transformers' initializer_range

static Layer llama_layer(LayerKind kind, int block, const char *suffix, const LlamaShape *g,
                         int in, int out) {
    char name[64];  // "h.95.input_norm": unique in 15 characters (a layer store's names)
    snprintf(name, sizeof name, "h.%d.%s", block, suffix);
    Layer L = layer_of(kind, name, g->ctx * in, g->ctx * out);
    L.tokens = g->ctx;
    L.carry = g->n_embd;
    L.heads = g->n_head;
    L.kv_heads = g->n_kv_head;
    L.head_dim = g->head_dim;
    L.eps = g->rms_eps;
    L.rope = g->rope;
    return L;
}

// A tensor of layer L named "layers.<block>.<hf>" (Hugging Face's name less "model.").
static TensorView *add_named(Model *m, const Layer *L, int block, const char *hf, size_t offset,
                             int rows, int cols, float init_std, float init_value) {
    char name[96];  // n_layer <= 96: the names fit TensorView's 48 characters
    snprintf(name, sizeof name, "layers.%d.%s", block, hf);
    return add_tensor(m, L, name, offset, rows, cols, init_std, init_value);
}

static void add_rmsnorm(Model *m, Layer L, int block, const char *hf) {
    const Layer *n = add_layer(m, L);
    add_named(m, n, block, hf, 0, layer_in_token(n), 1, 0, 1);
}

// "<prefix>.weight" with ".lora_<which>" before ".weight": PEFT's names of an adapter's tensors.
static void lora_name(char *out, size_t size, const char *weight, char which) {
    snprintf(out, size, "%.*s.lora_%c.weight", (int)(strlen(weight) - strlen(".weight")), weight,
             which);
}

// The LoRA adapter of a projection from k branch features whose parts are adapted where bit
// i of mask is set (layer_lora.c): A [r, k] of each, then B [rows, r] of each.
static void add_lora(Model *m, int b, const char *suffix, const LlamaShape *g, int k,
                     const char *const *parts, const int *rows, int n_parts, int mask, int n) {
    char name[40], tensor[64];
    snprintf(name, sizeof name, "%s_lora", suffix);
    const int C = g->n_embd, r = g->lora_rank;
    Layer L = llama_layer(LAYER_LORA, b, name, g, C + k, C + k + n);
    L.lora_rank = r;
    L.lora_scale = g->lora_alpha / (float)r;
    L.lora_mask = mask;
    for (int i = 0; i < n_parts; i++) L.lora_parts[i] = rows[i];
    const Layer *a = add_layer(m, L);
    size_t at = 0;
    for (int i = 0; i < n_parts; i++) {  // PEFT's kaiming_uniform(a = sqrt(5)): U(+-1/sqrt(k))
        if (!(mask >> i & 1)) continue;
        lora_name(tensor, sizeof tensor, parts[i], 'A');
        add_named(m, a, b, tensor, at, r, k, 0, 0)->init_uniform = 1.0f / sqrtf((float)k);
        at += (size_t)r * k;
    }
    for (int i = 0; i < n_parts; i++) {
        if (!(mask >> i & 1)) continue;
        lora_name(tensor, sizeof tensor, parts[i], 'B');
        add_named(m, a, b, tensor, at, rows[i], r, 0, 0);
        at += (size_t)rows[i] * r;
    }
}

// A bias-free linear of the block from k branch features to the parts' rows (a fused
// projection when there are several parts), output [x, branch] or x + branch (residual).
// Parts whose bit (from `target`, the part's LORA_* bit) is in g->lora_targets get a LoRA
// adapter before it, whose delta the projection adds (its tail).
static void add_projection(Model *m, int b, const char *suffix, const LlamaShape *g, int k,
                           const char *const *parts, const int *rows, int n_parts, int residual,
                           int target) {
    int n = 0, mask = 0;
    for (int i = 0; i < n_parts; i++) {
        n += rows[i];
        if (g->lora_rank > 0 && g->lora_targets & target << i) mask |= 1 << i;
    }
    const int C = g->n_embd, tail = mask ? n : 0;
    if (mask) add_lora(m, b, suffix, g, k, parts, rows, n_parts, mask, n);
    Layer L = llama_layer(LAYER_LINEAR, b, suffix, g, C + k + tail, residual ? C : C + n);
    L.residual = residual;
    L.no_bias = 1;
    L.tail = tail;
    const Layer *fc = add_layer(m, L);
    size_t at = 0;
    for (int i = 0; i < n_parts; i++) {
        add_named(m, fc, b, parts[i], at, rows[i], k, LLAMA_INIT_STD, 0);
        at += (size_t)rows[i] * k;
    }
}

static void add_llama_block(Model *m, int b, const LlamaShape *g) {
    const int C = g->n_embd, d = g->head_dim, I = g->intermediate;
    const int q = g->n_head * d, kv = g->n_kv_head * d, qkv = q + 2 * kv;
    add_rmsnorm(m, llama_layer(LAYER_RMSNORM, b, "input_norm", g, C, 2 * C), b,
                "input_layernorm.weight");
    static const char *const qkv_names[] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                            "self_attn.v_proj.weight"};
    add_projection(m, b, "qkv", g, C, qkv_names, (int[]){q, kv, kv}, 3, 0, LORA_Q);
    if (g->qk_norm) {
        const Layer *n = add_layer(m, llama_layer(LAYER_QKNORM, b, "qk_norm", g, C + qkv,
                                                  C + qkv));
        add_named(m, n, b, "self_attn.q_norm.weight", 0, d, 1, 0, 1);
        add_named(m, n, b, "self_attn.k_norm.weight", (size_t)d, d, 1, 0, 1);
    }
    add_layer(m, llama_layer(LAYER_ROPE, b, "rope", g, C + qkv, C + qkv));
    add_layer(m, llama_layer(LAYER_ATTENTION, b, "attn", g, C + qkv, C + q));
    static const char *const o_name[] = {"self_attn.o_proj.weight"};
    add_projection(m, b, "o_proj", g, q, o_name, (int[]){C}, 1, 1, LORA_O);
    add_rmsnorm(m, llama_layer(LAYER_RMSNORM, b, "post_norm", g, C, 2 * C), b,
                "post_attention_layernorm.weight");
    static const char *const mlp_names[] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    add_projection(m, b, "gate_up", g, C, mlp_names, (int[]){I, I}, 2, 0, LORA_GATE);
    add_layer(m, llama_layer(LAYER_SWIGLU, b, "swiglu", g, C + 2 * I, C + I));
    static const char *const down_name[] = {"mlp.down_proj.weight"};
    add_projection(m, b, "down_proj", g, I, down_name, (int[]){C}, 1, 1, LORA_DOWN);
}

static int llama_check(const LlamaShape *g, FgError *err) {
    if (g->n_layer < 1 || g->n_embd < 1 || g->n_head < 1 || g->n_kv_head < 1 || g->head_dim < 2 ||
        g->intermediate < 1 || g->ctx < 1 || g->vocab < 1 || g->pad_vocab < 1)
        return fg_fail(err, FG_ERR_INPUT, "model llama: n_layer %d, n_embd %d, n_head %d, n_kv_head "
                       "%d, intermediate_size %d, ctx %d, vocab %d, pad_vocab %d must be positive and "
                       "head_dim %d at least 2", g->n_layer, g->n_embd, g->n_head, g->n_kv_head,
                       g->intermediate, g->ctx, g->vocab, g->pad_vocab, g->head_dim);
    if (g->n_head % g->n_kv_head)
        return fg_fail(err, FG_ERR_INPUT, "model llama: n_kv_head %d does not divide n_head %d",
                       g->n_kv_head, g->n_head);
    if (g->head_dim % 2)
        return fg_fail(err, FG_ERR_INPUT, "model llama: head_dim %d is odd (the rotary embedding "
                       "turns pairs of features)", g->head_dim);
    if (!(g->rms_eps > 0) || !(g->rope.theta > 1))
        return fg_fail(err, FG_ERR_INPUT, "model llama: rms_norm_eps %g must be positive and "
                       "rope_theta %g above 1", g->rms_eps, g->rope.theta);
    if (g->rope.factor > 0 && !(g->rope.original > 0 && g->rope.low > 0 && g->rope.high > g->rope.low))
        return fg_fail(err, FG_ERR_INPUT, "model llama: rope_scaling_factor %g needs "
                       "rope_scaling_original_max_position_embeddings > 0 (%d) and 0 < "
                       "rope_scaling_low_freq_factor (%g) < rope_scaling_high_freq_factor (%g)",
                       g->rope.factor, g->rope.original, g->rope.low, g->rope.high);
    if (g->lora_rank < 0 || (g->lora_rank > 0 && (!(g->lora_targets & 127) || g->lora_targets & ~127 ||
                                                   !(g->lora_alpha > 0))))
        return fg_fail(err, FG_ERR_INPUT, "model llama: lora_rank %d needs lora_targets (any of "
                       "q,k,v,o,gate,up,down) and lora_alpha %g > 0", g->lora_rank, g->lora_alpha);
    if ((g->lora_rank > 0 ? 14 : 10) * g->n_layer + 3 > MODEL_MAX_LAYERS)
        return fg_fail(err, FG_ERR_INPUT, "model llama: n_layer %d needs more than %d layers",
                       g->n_layer, MODEL_MAX_LAYERS);
    long long widest = (long long)g->n_embd + FG_MAX((g->n_head + 2LL * g->n_kv_head) * g->head_dim,
                                                     2LL * g->intermediate);
    if ((long long)g->ctx * widest > (1 << 30))
        return fg_fail(err, FG_ERR_INPUT, "model llama: ctx %d x %lld floats per token is too wide",
                       g->ctx, widest);
    return FG_OK;
}

int model_build_llama(Model *m, LlamaShape g, FgError *err) {
    memset(m, 0, sizeof *m);
    m->tied_first = m->tied_last = -1;
    int rc = llama_check(&g, err);
    if (rc) return rc;
    const int C = g.n_embd, T = g.ctx, V = (g.vocab + g.pad_vocab - 1) / g.pad_vocab * g.pad_vocab;
    if ((long long)V * C > (1LL << 31) || (long long)T * V > (1 << 30))
        return fg_fail(err, FG_ERR_INPUT, "model llama: a token table of %d x %d or ctx %d x %d "
                       "logits per sample is too large", V, C, T, V);
    Layer L = layer_of(LAYER_EMBEDDING, "embed_tokens", T, T * C);
    L.tokens = T, L.vocab = V, L.no_positions = 1;
    const Layer *emb = add_layer(m, L);
    const TensorView *wte = add_tensor(m, emb, "embed_tokens.weight", 0, V, C, LLAMA_INIT_STD, 0);
    for (int b = 0; b < g.n_layer; b++) add_llama_block(m, b, &g);
    L = layer_of(LAYER_RMSNORM, "norm", T * C, T * C);
    L.tokens = T, L.eps = g.rms_eps;
    add_tensor(m, add_layer(m, L), "norm.weight", 0, C, 1, 0, 1);
    const Layer *head = add_lm_head(m, T, C, V, g.vocab, g.fused_head, g.head_block);
    TensorView *w = add_tensor(m, head, "lm_head.weight", 0, V, C, LLAMA_INIT_STD, 0);
    if (g.tie_embeddings) {  // two copies kept equal, as the GPT's (docs/gpt.md)
        w->init_key = wte->init_key;
        m->tied_first = emb->index;
        m->tied_last = head->index;
    }
    for (int l = 0; g.lora_rank > 0 && l < m->n_layers; l++)  // LoRA trains the adapters only
        m->layers[l].frozen = m->layers[l].kind != LAYER_LORA;
    return FG_OK;
}
