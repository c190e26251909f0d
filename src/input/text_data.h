// A text corpus for byte-level language modelling (the GPT): tokens are bytes, vocab 256.
// The first 90% of the file trains, the last 10% validates. Training windows are drawn from a
// counter-based generator keyed by (seed, step, global micro-batch, row), so a run reproduces
// and data-parallel replicas (which own different global micro-batches) draw different windows;
// validation uses the split's non-overlapping windows, in order.
#ifndef FGPIPE_TEXT_DATA_H
#define FGPIPE_TEXT_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct {
    uint8_t *bytes;    // the whole file
    size_t n_bytes;
    size_t train_end;  // floor(0.9 n_bytes): [0, train_end) trains, [train_end, n_bytes) validates
    int ctx;           // tokens per window
} TextCorpus;

// Loads the whole file (ctx >= 1). Errors (FG_ERR_INPUT) name the path and the cause: missing or
// unreadable (errno's text), a directory, a read error, empty, or too short for one window of
// ctx + 1 bytes in each split (the message says how many bytes are needed).
int text_corpus_load(TextCorpus *tc, const char *path, int ctx, FgError *err);
void text_corpus_free(TextCorpus *tc);  // also on a zeroed corpus

// `rows` training windows for (seed, step, global micro-batch): window r starts uniformly in
// [0, train_end - ctx - 1], a pure function of (seed, step, microbatch, r);
// x[r * ctx + t] = byte t of window r (as a float: the embedding reads token ids),
// labels[r * ctx + t] = byte t + 1 (the next). Either output may be NULL.
void text_train_batch(const TextCorpus *tc, uint32_t seed, uint64_t step, uint32_t microbatch,
                      int rows, float *x, Label *labels);

// Validation windows: window w is the ctx + 1 bytes from train_end + w * ctx, so the windows'
// inputs (and their labels) tile the split without overlap, a tail of fewer than ctx bytes
// left out: there are floor((n_bytes - train_end - 1) / ctx) of them.
size_t text_val_windows(const TextCorpus *tc);
void text_val_batch(const TextCorpus *tc, size_t first_window, int rows, float *x,
                    Label *labels);

#endif
