// `fgpipe eval`: a GPT checkpoint's mean loss over a file of tokens (or bytes of text), on one
// CPU rank: every non-overlapping window of ctx + 1 tokens, as the validation split is scored.
#ifndef FGPIPE_EVAL_H
#define FGPIPE_EVAL_H

#include <stdio.h>

#include "common.h"
#include "storage.h"

typedef struct {
    const char *checkpoint;
    const char *tokens_path;   // uint16 tokens (fgpipe tokenize), or
    const char *text_path;     // bytes, for a byte-level model (vocab 256)
    const char *summary_path;  // JSON: loss, accuracy, windows, tokens (NULL: none)
    const char *logits_path;   // the first window's logits, float32 [ctx][vocab] (NULL: none)
    int ctx;                   // tokens per window; 0: the model's
    int batch;                 // windows per forward pass
} EvalArgs;

// Prints one line to out; errors name the file and the cause (a token outside the vocabulary,
// ctx above the model's, a byte file for a BPE model, ...).
int eval_checkpoint(const EvalArgs *a, Storage *io, FILE *out, FgError *err);

#endif
