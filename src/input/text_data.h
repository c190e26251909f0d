// A corpus for language modelling (the GPT), memory-mapped, never read whole:
// - data = text: the bytes of one file are the tokens (vocab 256); its first 90% trains, the
//   last 10% validates;
// - data = tokens: two files of little-endian uint16 token ids (fgpipe tokenize, nanoGPT and
//   llm.c write them), one that trains and one that validates.
// Training windows are drawn from a counter-based generator keyed by (seed, step, global
// micro-batch, row), so a run reproduces and data-parallel replicas (which own different
// global micro-batches) draw different windows; validation uses the split's non-overlapping
// windows, in order.
#ifndef FGPIPE_TEXT_DATA_H
#define FGPIPE_TEXT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

// A split: n tokens of token_bytes each, from `at` in a mapping.
typedef struct {
    const uint8_t *at;
    size_t n;
    char path[256];  // the file, for messages
} TokenSplit;

typedef struct {
    TokenSplit train, val;
    int token_bytes;  // 1: bytes of text, 2: uint16 little-endian
    int ctx;          // tokens per window
    int vocab;        // ids must be below this (a window holding another is an error)
    void *map[2];     // what to unmap
    size_t map_bytes[2];
} TextCorpus;

// data = text: maps the file (ctx >= 1). Errors (FG_ERR_INPUT) name the path and the cause:
// missing or unreadable (errno's text), a directory, empty, or too short for one window of
// ctx + 1 bytes in each split (the message says how many bytes are needed).
int text_corpus_load(TextCorpus *tc, const char *path, int ctx, FgError *err);
// data = tokens: maps both files; each needs an even size and at least ctx + 1 tokens. Ids are
// checked against vocab as windows are read (the files are not read at start).
int token_corpus_load(TextCorpus *tc, const char *train_path, const char *val_path, int ctx,
                      int vocab, FgError *err);
// fgpipe eval: one file, all of it the validation split: bytes (token_bytes 1) or uint16 tokens.
int token_file_load(TextCorpus *tc, const char *path, int token_bytes, int ctx, int vocab,
                    FgError *err);
void text_corpus_free(TextCorpus *tc);  // also on a zeroed corpus

// Token i of a split.
static inline int token_at(const TextCorpus *tc, const TokenSplit *s, size_t i) {
    return tc->token_bytes == 1 ? s->at[i] : s->at[2 * i] | s->at[2 * i + 1] << 8;
}

// `rows` training windows for (seed, step, global micro-batch): window r starts uniformly in
// [0, n_train - ctx - 1], a pure function of (seed, step, microbatch, r);
// x[r * ctx + t] = token t of window r (as a float: the embedding reads token ids),
// labels[r * ctx + t] = token t + 1 (the next). Either output may be NULL. An id >= vocab is an
// error that names the file and the token's index.
int text_train_batch(const TextCorpus *tc, uint32_t seed, uint64_t step, uint32_t microbatch,
                     int rows, float *x, Label *labels, FgError *err);

// Validation windows: window w is the ctx + 1 tokens from w * ctx, so the windows' inputs (and
// their labels) tile the split without overlap, a tail of fewer than ctx tokens left out:
// there are floor((n_val - 1) / ctx) of them.
size_t text_val_windows(const TextCorpus *tc);
int text_val_batch(const TextCorpus *tc, size_t first_window, int rows, float *x, Label *labels,
                   FgError *err);

#endif
