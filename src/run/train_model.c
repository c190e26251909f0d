// The model a config describes (an MLP, a GPT, a Llama), built for training or for inference,
// with its frozen layers marked: what `fgpipe train`, `plan`, `eval` and `generate` all start from.
#include <stdio.h>
#include <string.h>

#include "train_internal.h"

// freeze = "a,b.c": layer a and every layer named b.c or b.c.*; a name that matches no layer
// is an error. The GPT's tied copies freeze together (they must stay equal).
static int apply_freeze(const char *list, Model *m, FgError *err) {
    char names[sizeof ((Config *)0)->net.freeze];
    snprintf(names, sizeof names, "%s", list);
    for (char *save = NULL, *name = strtok_r(names, ", ", &save); name; name = strtok_r(NULL, ", ", &save)) {
        size_t n = strlen(name);
        int hits = 0;
        for (int l = 0; l < m->n_layers; l++) {
            const char *ln = m->layers[l].name;
            if (strncmp(ln, name, n) == 0 && (ln[n] == 0 || ln[n] == '.')) m->layers[l].frozen = 1, hits++;
        }
        if (!hits) return fg_fail(err, FG_ERR_INPUT, "freeze: no layer is named '%s' or starts with "
                                  "'%s.' (layer names: docs/gpt.md, fc1.., relu1..)", name, name);
    }
    if (m->tied_first >= 0 && (m->layers[m->tied_first].frozen || m->layers[m->tied_last].frozen))
        m->layers[m->tied_first].frozen = m->layers[m->tied_last].frozen = 1;
    return FG_OK;
}

// The validated config's lora_targets as bits (config_validate refused bad names).
static int lora_mask(const NetConfig *n) {
    int mask = 0;
    FgError err;
    return n->lora_rank > 0 && !config_lora_targets(n->lora_targets, &mask, &err) ? mask : 0;
}

LlamaShape train_llama_shape(const NetConfig *n, int training) {
    RopeParams rope = {.theta = (float)n->rope_theta, .factor = (float)n->rope_scaling_factor,
                       .low = (float)n->rope_scaling_low_freq_factor,
                       .high = (float)n->rope_scaling_high_freq_factor,
                       .original = n->rope_scaling_original_max_position_embeddings};
    return (LlamaShape){.n_layer = n->n_layer, .n_embd = n->n_embd, .n_head = n->n_head,
                        .n_kv_head = n->n_kv_head, .head_dim = n->head_dim,
                        .intermediate = n->intermediate_size, .ctx = n->ctx, .vocab = n->vocab,
                        .pad_vocab = n->pad_vocab, .rms_eps = (float)n->rms_norm_eps, .rope = rope,
                        .qk_norm = n->qk_norm, .tie_embeddings = n->tie_embeddings,
                        .fused_head = training, .head_block = n->head_block,
                        .lora_rank = n->lora_rank, .lora_alpha = (float)n->lora_alpha,
                        .lora_targets = lora_mask(n)};
}

int train_build_model(const Config *c, int training, Model *m, FgError *err) {
    int rc;
    if (strcmp(c->net.model, "gpt") == 0) {
        GptShape g = {.n_layer = c->net.n_layer, .n_embd = c->net.n_embd, .n_head = c->net.n_head,
                      .ctx = c->net.ctx, .vocab = c->net.vocab, .pad_vocab = c->net.pad_vocab,
                      .fused_head = training, .head_block = c->net.head_block};
        rc = model_build_gpt(m, g, err);
    } else if (strcmp(c->net.model, "llama") == 0) {
        rc = model_build_llama(m, train_llama_shape(&c->net, training), err);
    } else {
        rc = model_build_mlp(m, c->net.model, c->net.activation, err);
    }
    if (!rc && training) model_set_row_blocks(m, c->layout.table_block_rows);
    return rc ? rc : apply_freeze(c->net.freeze, m, err);
}
