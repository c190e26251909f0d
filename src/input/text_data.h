// A corpus for language modelling (the GPT), memory-mapped, never read whole:
// - data = text: the bytes of one file are the tokens (vocab 256); its first 90% trains, the
//   last 10% validates;
// - data = tokens: two files of token ids (fgpipe tokenize writes them), one that trains and one
//   that validates. Their width follows the model's vocabulary (token_width): up to 65536 ids,
//   bare little-endian uint16 as nanoGPT and llm.c write them (GPT-2's 50257); above, the
//   8-byte header "FGTOKU32" then little-endian uint32 (Llama 3's 128256, Qwen3's 151936). A
//   file of the other width is refused by name: the header is there or it is not. (A uint16
//   file whose first four ids spell the header, 18246 20308 21835 12851, would be misread.)
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
    int token_bytes;  // 1: bytes of text, 2: uint16, 4: uint32 (little-endian)
    int ctx;          // tokens per window
    int vocab;        // ids must be below this (a window holding another is an error)
    void *map[2];     // what to unmap
    size_t map_bytes[2];
} TextCorpus;

// data = text: maps the file (ctx >= 1). Errors (FG_ERR_INPUT) name the path and the cause:
// missing or unreadable (errno's text), a directory, empty, or too short for one window of
// ctx + 1 bytes in each split (the message says how many bytes are needed).
int text_corpus_load(TextCorpus *tc, const char *path, int ctx, FgError *err);
#define TOKEN_FILE_MAGIC32 "FGTOKU32"  // the header of uint32 token files (8 bytes, no NUL)
enum { TOKEN_HEADER32 = 8 };

// The bytes per token id of a token file for vocabulary `vocab`: 2 up to 65536, else 4.
static inline int token_width(int vocab) { return vocab > 65536 ? 4 : 2; }
// Where the ids of a token file (`bytes` at data) start, for ids of `width` bytes: after the
// header (uint32) or at 0 (uint16). A file of the other width, or not a whole number of ids,
// is an error naming what, path and the widths.
int token_file_ids(const uint8_t *data, size_t bytes, int width, const char *what,
                   const char *path, size_t *offset, FgError *err);

// data = tokens: maps both files, ids of token_width(vocab) bytes; each needs at least ctx + 1
// tokens. Ids are checked against vocab as windows are read (the files are not read at start).
int token_corpus_load(TextCorpus *tc, const char *train_path, const char *val_path, int ctx,
                      int vocab, FgError *err);
// fgpipe eval: one file, all of it the validation split: bytes (token_bytes 1) or token ids
// (token_bytes token_width(vocab)).
int token_file_load(TextCorpus *tc, const char *path, int token_bytes, int ctx, int vocab,
                    FgError *err);
void text_corpus_free(TextCorpus *tc);  // also on a zeroed corpus

// Token i of a split.
static inline int token_at(const TextCorpus *tc, const TokenSplit *s, size_t i) {
    const uint8_t *p = s->at + i * (size_t)tc->token_bytes;
    return tc->token_bytes == 1 ? p[0] : tc->token_bytes == 2 ? p[0] | p[1] << 8
                                : (int)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
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
