#include "generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "hf_tokenizer.h"
#include "checkpoint_model.h"
#include "philox.h"

// The next token from logits [V]: the most likely at temperature 0, else a draw from the
// softmax of logits / temperature over the top_k most likely, with uniform u in [0, 1).
// scratch holds V floats, weight V doubles.
static int sample_token(const float *logits, int V, double temperature, int top_k, float u,
                        float *scratch, double *weight) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0) return best;
    int k = top_k > 0 && top_k < V ? top_k : V;
    float kth = -INFINITY;  // the k-th largest logit: tokens below it are left out
    if (k < V) {
        memcpy(scratch, logits, (size_t)V * sizeof(float));
        for (int i = 0; i < k; i++)  // partial selection sort: k passes
            for (int j = i + 1; j < V; j++)
                if (scratch[j] > scratch[i]) {
                    float t = scratch[i];
                    scratch[i] = scratch[j], scratch[j] = t;
                }
        kth = scratch[k - 1];
    }
    double sum = 0;
    for (int i = 0; i < V; i++) {
        weight[i] = logits[i] >= kth ? exp((logits[i] - logits[best]) / temperature) : 0.0;
        sum += weight[i];
    }
    double target = u * sum, acc = 0;
    for (int i = 0; i < V; i++)
        if (weight[i] > 0 && (acc += weight[i]) > target) return i;
    return best;
}

static float uniform_at(uint32_t seed, uint32_t position) {
    Philox4 ctr = {{position, 0x67656e65u /* "gene" */, 0, 0}};
    Philox4 r = philox4x32_10(ctr, seed, 0x7465787au /* "text" */);
    return (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);
}

// The tokens of a text for this model: its bytes (vocab 256), else GPT-2's BPE of it; and how
// to write a token back. bpe stays NULL for a byte-level model.
typedef struct {
    Bpe *bpe;
    uint32_t *ids;
    size_t n, cap;
} Tokens;

static int load_vocabulary(const GenerateArgs *a, const Model *m, Tokens *t, FgError *err) {
    if (m->classes == 256 && !a->tokenizer) return FG_OK;
    if (a->tokenizer) {  // the model's table may be padded past the tokenizer's ids (Qwen3)
        int rc = hf_tokenizer_load(a->tokenizer, &t->bpe, err);
        if (!rc && bpe_vocab_size(t->bpe) > m->classes)
            rc = fg_fail(err, FG_ERR_INPUT, "generate: checkpoint %s has vocab %d, fewer than the "
                         "%d tokens of %s", a->checkpoint, m->classes, bpe_vocab_size(t->bpe), a->tokenizer);
        return rc;
    }
    char encoder[4096], merges[4096];
    snprintf(encoder, sizeof encoder, "%s/encoder.json", a->vocab_dir);
    snprintf(merges, sizeof merges, "%s/vocab.bpe", a->vocab_dir);
    int rc = bpe_load(encoder, merges, &t->bpe, err);
    if (!rc && bpe_vocab_size(t->bpe) != m->classes)
        rc = fg_fail(err, FG_ERR_INPUT, "generate: checkpoint %s has vocab %d, the BPE in %s has %d "
                     "tokens (--vocab DIR)", a->checkpoint, m->classes, a->vocab_dir,
                     bpe_vocab_size(t->bpe));
    return rc;
}

static int encode_prompt(const GenerateArgs *a, Tokens *t, FgError *err) {
    const char *prompt = a->prompt[0] ? a->prompt : "\n";
    size_t len = strlen(prompt);
    if (t->bpe) return bpe_encode(t->bpe, prompt, len, &t->ids, &t->n, err);
    t->ids = malloc(len * sizeof *t->ids);
    for (size_t i = 0; i < len; i++) t->ids[t->n++] = (unsigned char)prompt[i];
    return FG_OK;
}

static void write_token(const Tokens *t, int id, FILE *out) {
    size_t len = 1;
    unsigned char byte = (unsigned char)id;
    const char *bytes = t->bpe ? bpe_token_bytes(t->bpe, id, &len) : (const char *)&byte;
    if (len) fwrite(bytes, 1, len, out);  // ids past the tokenizer's (a padded table) write nothing
}

// Samples a->tokens tokens after the prompt, each from a window of the last T tokens; the
// positions after them are padding that causal attention keeps from the prediction.
static void sample_text(const GenerateArgs *a, CheckpointModel *cm, Tokens *t, FILE *out) {
    const int T = cm->model.tokens, V = cm->model.classes, stride = cm->model.logit_stride;
    float *x = fg_alloc_floats((size_t)T), *scratch = fg_alloc_floats((size_t)V);
    double *weight = fg_alloc_bytes((size_t)V * sizeof(double));
    t->ids = realloc(t->ids, (t->n + (size_t)a->tokens) * sizeof *t->ids);
    for (size_t i = 0; i < t->n; i++) write_token(t, t->ids[i], out);
    for (int i = 0; i < a->tokens; i++) {
        size_t start = t->n > (size_t)T ? t->n - T : 0, len = t->n - start;
        memset(x, 0, (size_t)T * sizeof(float));
        for (size_t j = 0; j < len; j++) x[j] = (float)t->ids[start + j];
        const float *logits = checkpoint_model_forward(cm, x, 1);
        int id = sample_token(logits + (len - 1) * stride, V, a->temperature, a->top_k,
                              uniform_at(a->seed, (uint32_t)i), scratch, weight);
        t->ids[t->n++] = (uint32_t)id;
        write_token(t, id, out);
        fflush(out);
    }
    fputc('\n', out);
    fg_free(x);
    fg_free(scratch);
    fg_free(weight);
}

int generate_text(const GenerateArgs *a, Storage *io, FILE *out, FgError *err) {
    CheckpointModel cm;
    Tokens t = {0};
    int rc = checkpoint_model_load(&cm, io, a->checkpoint, 1, "generate", err);
    if (!rc) rc = load_vocabulary(a, &cm.model, &t, err);
    if (!rc) rc = encode_prompt(a, &t, err);
    if (!rc) sample_text(a, &cm, &t, out);
    free(t.ids);
    bpe_free(t.bpe);
    checkpoint_model_free(&cm);
    return rc;
}
