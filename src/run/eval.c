#include "eval.h"

#include <math.h>
#include <string.h>

#include "checkpoint_model.h"
#include "head_loss.h"
#include "layer.h"
#include "out_file.h"
#include "text_data.h"

typedef struct {
    double loss_sum;  // nats, summed over tokens
    long correct, tokens, windows;
} EvalTotals;

static int open_file(const EvalArgs *a, const Model *m, int T, TextCorpus *tc, FgError *err) {
    if (!a->tokens_path == !a->text_path)
        return fg_fail(err, FG_ERR_INPUT, "eval needs one of --tokens FILE (token ids: fgpipe tokenize) and "
                       "--text FILE (bytes)");
    if (T > m->tokens)
        return fg_fail(err, FG_ERR_INPUT, "eval: --ctx %d is more than checkpoint %s's ctx %d (it "
                       "has no position embedding beyond)", T, a->checkpoint, m->tokens);
    if (a->text_path && m->classes != 256)
        return fg_fail(err, FG_ERR_INPUT, "eval: --text %s reads bytes, but checkpoint %s has vocab "
                       "%d: tokenize the text (fgpipe tokenize) and pass --tokens", a->text_path,
                       a->checkpoint, m->classes);
    return a->tokens_path ? token_file_load(tc, a->tokens_path, token_width(m->classes), T, m->classes, err)
                          : token_file_load(tc, a->text_path, 1, T, 256, err);
}

static int write_logits(const char *path, const float *logits, const Model *m, int T, FgError *err) {
    OutFile o;
    FILE *f = out_file_open(&o, "eval --logits", path, err);
    if (!f) return FG_ERR_INPUT;
    for (int t = 0; t < T; t++)  // the vocabulary's columns, not the padding
        fwrite(logits + (size_t)t * m->logit_stride, sizeof(float), (size_t)m->classes, f);
    return out_file_commit(&o, err);
}

// Windows of T tokens run through the model at its own ctx: the positions after T are padding
// that causal attention keeps from the first T predictions. A window's loss is the fused head's
// on its logits (blocks of head_block columns, head_loss_of_logits), summed window by window:
// a streamed evaluation's (eval_streamed.c) numbers, bit for bit.
static int score_windows(const EvalArgs *a, CheckpointModel *cm, const TextCorpus *tc, int T,
                         EvalTotals *tot, FgError *err) {
    const Model *m = &cm->model;
    const int ctx = m->tokens, B = a->batch;
    size_t windows = text_val_windows(tc);
    float *xw = fg_alloc_floats((size_t)B * T), *x = fg_alloc_floats((size_t)B * ctx);
    Label *labels = fg_alloc_bytes((size_t)B * T * sizeof(Label));
    int rc = FG_OK;
    for (size_t w0 = 0; w0 < windows && !rc; w0 += (size_t)B) {
        int rows = (int)FG_MIN((size_t)B, windows - w0);
        if ((rc = text_val_batch(tc, w0, rows, xw, labels, err))) break;
        for (int r = 0; r < rows; r++)
            memcpy(x + (size_t)r * ctx, xw + (size_t)r * T, (size_t)T * sizeof(float));
        const float *logits = checkpoint_model_forward(cm, x, rows);
        for (int r = 0; r < rows; r++) {
            int correct = 0;
            const float *z = logits + (size_t)r * ctx * m->logit_stride;
            tot->loss_sum += (double)head_loss_of_logits(z, labels + (size_t)r * T, T, model_logit_rows(m),
                                                         cm->cfg.net.head_block, &correct) * T;
            tot->correct += correct;
        }
        if (w0 == 0 && a->logits_path) rc = write_logits(a->logits_path, logits, m, T, err);
    }
    tot->windows = (long)windows;
    tot->tokens = (long)windows * T;
    fg_free(xw);
    fg_free(x);
    fg_free(labels);
    return rc;
}

// The loss and accuracy at full precision (%.17g: a double read back is the same double).
static int write_summary(const EvalArgs *a, const EvalResult *e, FgError *err) {
    OutFile o;
    FILE *f = out_file_open(&o, "eval --summary-json", a->summary_path, err);
    if (!f) return FG_ERR_INPUT;
    fprintf(f, "{\"loss\": %.17g, \"accuracy\": %.17g, \"windows\": %ld, \"tokens\": %ld, \"ctx\": %d",
            e->loss, e->accuracy, e->windows, e->tokens, e->ctx);
    if (a->text_path) fprintf(f, ", \"bits_per_byte\": %.17g", e->loss / M_LN2);
    fputs("}\n", f);
    return out_file_commit(&o, err);
}

static int eval_in_memory(const EvalArgs *a, Storage *io, EvalResult *res, FgError *err) {
    CheckpointModel cm;
    TextCorpus tc = {0};
    EvalTotals tot = {0};
    int rc = checkpoint_model_load(&cm, io, a->checkpoint, a->batch, "eval", err), T = 0;
    if (!rc) T = a->ctx ? a->ctx : cm.model.tokens;
    if (!rc) rc = open_file(a, &cm.model, T, &tc, err);
    if (!rc) rc = score_windows(a, &cm, &tc, T, &tot, err);
    *res = (EvalResult){.loss = tot.loss_sum / (double)tot.tokens,
                        .accuracy = (double)tot.correct / (double)tot.tokens,
                        .windows = tot.windows, .tokens = tot.tokens, .ctx = T};
    text_corpus_free(&tc);
    checkpoint_model_free(&cm);
    return rc;
}

int eval_checkpoint(const EvalArgs *a, Storage *io, const LayerStreams *streams, FILE *out,
                    FgError *err) {
    EvalResult e = {0};
    int rc = a->mem_budget > 0 ? eval_streamed(a, io, streams, &e, err) : eval_in_memory(a, io, &e, err);
    if (!rc) {
        fprintf(out, "eval: %s on %s: %ld windows of %d tokens: loss %.4f nats/token", a->checkpoint,
                a->tokens_path ? a->tokens_path : a->text_path, e.windows, e.ctx, e.loss);
        if (a->text_path) fprintf(out, " (%.4f bits/byte)", e.loss / M_LN2);
        fprintf(out, ", next-token accuracy %.4f\n", e.accuracy);
    }
    if (!rc && a->summary_path) rc = write_summary(a, &e, err);
    return rc;
}
