#include "text_data.h"

#include <string.h>

#include "philox.h"

// Reads all of path into tc->bytes; every failure is an error that names the file and the cause.
static int read_whole(TextCorpus *tc, const char *path, FgError *err) {
    tc->bytes = (uint8_t *)fg_read_file("text_file", path,
                                        " (launch/text-corpus.sh makes the default corpus)",
                                        &tc->n_bytes, err);
    return tc->bytes ? FG_OK : err->code;
}

// The smallest file with a window of ctx + 1 bytes in both splits: the validation split has
// n - floor(0.9 n) = ceil(0.1 n) bytes, the training split floor(0.9 n).
static size_t min_corpus_bytes(size_t window) {
    size_t for_val = 10 * window - 9, for_train = (10 * window + 8) / 9;
    return FG_MAX(for_val, for_train);
}

int text_corpus_load(TextCorpus *tc, const char *path, int ctx, FgError *err) {
    memset(tc, 0, sizeof *tc);
    if (ctx < 1)
        return fg_fail(err, FG_ERR_INPUT, "text_file %s: ctx %d must be at least 1", path, ctx);
    int rc = read_whole(tc, path, err);
    tc->ctx = ctx;
    tc->train_end = tc->n_bytes / 10 * 9 + tc->n_bytes % 10 * 9 / 10;  // floor(0.9 n), no overflow
    size_t window = (size_t)ctx + 1;
    if (!rc && tc->n_bytes == 0) rc = fg_fail(err, FG_ERR_INPUT, "text_file %s is empty", path);
    else if (!rc && (tc->train_end < window || tc->n_bytes - tc->train_end < window))
        rc = fg_fail(err, FG_ERR_INPUT, "text_file %s: %zu bytes are too few for ctx %d: each "
                     "split (90%% / 10%%) needs one window of %zu bytes, so at least %zu bytes",
                     path, tc->n_bytes, ctx, window, min_corpus_bytes(window));
    if (rc) text_corpus_free(tc);
    return rc;
}

void text_corpus_free(TextCorpus *tc) {
    fg_free(tc->bytes);
    memset(tc, 0, sizeof *tc);
}

static void put_window(const TextCorpus *tc, size_t start, int r, float *x, Label *labels) {
    const uint8_t *w = tc->bytes + start;
    size_t at = (size_t)r * tc->ctx;
    for (int t = 0; t < tc->ctx; t++) {
        if (x) x[at + t] = (float)w[t];
        if (labels) labels[at + t] = w[t + 1];
    }
}

void text_train_batch(const TextCorpus *tc, uint32_t seed, uint64_t step, uint32_t microbatch,
                      int rows, float *x, Label *labels) {
    // Starts are uniform over [0, train_end - ctx - 1] up to a modulo bias of at most
    // (number of starts) / 2^64: nothing at any corpus size.
    uint64_t starts = tc->train_end - (size_t)tc->ctx;
    for (int r = 0; r < rows; r++) {
        Philox4 ctr = {{(uint32_t)step, (uint32_t)(step >> 32), microbatch, (uint32_t)r}};
        Philox4 u = philox4x32_10(ctr, seed, 0x74657874u /* "text" */);
        uint64_t draw = ((uint64_t)u.v[0] << 32) | u.v[1];
        put_window(tc, (size_t)(draw % starts), r, x, labels);
    }
}

size_t text_val_windows(const TextCorpus *tc) {
    return (tc->n_bytes - tc->train_end - 1) / (size_t)tc->ctx;
}

void text_val_batch(const TextCorpus *tc, size_t first_window, int rows, float *x,
                    Label *labels) {
    for (int r = 0; r < rows; r++)
        put_window(tc, tc->train_end + (first_window + (size_t)r) * tc->ctx, r, x, labels);
}
