// `fgpipe eval`: a GPT checkpoint's mean loss over a file of tokens (or bytes of text), on one
// CPU rank: every non-overlapping window of ctx + 1 tokens, as the validation split is scored;
// in memory (eval.c), or with --mem-budget streamed through the budget from a layer store in
// --weights-dir, layer-major in passes of many windows (eval_streamed.c): the same loss.
#ifndef FGPIPE_EVAL_H
#define FGPIPE_EVAL_H

#include <stdio.h>

#include "common.h"
#include "layer_stream.h"
#include "storage.h"

typedef struct {
    const char *checkpoint;
    const char *tokens_path;   // uint16 tokens (fgpipe tokenize), or
    const char *text_path;     // bytes, for a byte-level model (vocab 256)
    const char *summary_path;  // JSON: loss, accuracy, windows, tokens (NULL: none)
    const char *logits_path;   // the first window's logits, float32 [ctx][vocab] (NULL: none)
    int ctx;                   // tokens per window; 0: the model's
    int batch;                 // windows per forward pass (in memory)
    double mem_budget;         // bytes (0: in memory): stream the layers through this much
    const char *weights_dir;   // local flash for the layer store (with mem_budget)
} EvalArgs;

// What an evaluation found: the mean loss in nats per token and the next-token accuracy over
// `windows` windows of ctx tokens.
typedef struct {
    double loss, accuracy;
    long windows, tokens;
    int ctx;
} EvalResult;

// Prints one line to out; errors name the file and the cause (a token outside the vocabulary,
// ctx above the model's, a byte file for a BPE model, a budget below the floor, ...). streams:
// how a layer store is made (mpi/main.c; used with mem_budget only).
int eval_checkpoint(const EvalArgs *a, Storage *io, const LayerStreams *streams, FILE *out,
                    FgError *err);

// eval_checkpoint's streamed evaluation (a->mem_budget > 0): one stage of the engine over a
// layer store made from the checkpoint in a->weights_dir (eval_streamed.c); the stage says its
// windows a pass, passes, bytes read and time against the bound on stderr.
int eval_streamed(const EvalArgs *a, Storage *io, const LayerStreams *streams, EvalResult *res,
                  FgError *err);

#endif
