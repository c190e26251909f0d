#include "text_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "philox.h"

// Maps path read-only into tc->map[slot]; errors name `what`, the file and the cause. A
// zero-length file is refused here: mmap cannot map it.
static int map_file(TextCorpus *tc, int slot, const char *what, const char *path,
                    const char *missing_hint, FgError *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fg_fail(err, FG_ERR_INPUT, "%s %s: cannot open: %s%s", what, path, strerror(errno),
                       errno == ENOENT && missing_hint ? missing_hint : "");
    struct stat sb = {0};
    int rc = FG_OK;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode))
        rc = fg_fail(err, FG_ERR_INPUT, "%s %s: %s", what, path, S_ISDIR(sb.st_mode) ?
                     "is a directory, not a regular file" : "not a regular file");
    else if (sb.st_size == 0)
        rc = fg_fail(err, FG_ERR_INPUT, "%s %s is empty", what, path);
    void *map = MAP_FAILED;
    if (!rc && (map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED)
        rc = fg_fail(err, FG_ERR_INPUT, "%s %s: cannot map: %s", what, path, strerror(errno));
    close(fd);
    if (rc) return rc;
    tc->map[slot] = map;
    tc->map_bytes[slot] = (size_t)sb.st_size;
    return FG_OK;
}

static void set_split(TokenSplit *s, const uint8_t *at, size_t n, const char *path) {
    s->at = at;
    s->n = n;
    snprintf(s->path, sizeof s->path, "%s", path);
}

// The smallest file with a window of ctx + 1 bytes in both splits: the validation split has
// n - floor(0.9 n) = ceil(0.1 n) bytes, the training split floor(0.9 n).
static size_t min_corpus_bytes(size_t window) {
    size_t for_val = 10 * window - 9, for_train = (10 * window + 8) / 9;
    return FG_MAX(for_val, for_train);
}

int text_corpus_load(TextCorpus *tc, const char *path, int ctx, FgError *err) {
    *tc = (TextCorpus){.token_bytes = 1, .ctx = ctx, .vocab = 256};
    if (ctx < 1)
        return fg_fail(err, FG_ERR_INPUT, "text_file %s: ctx %d must be at least 1", path, ctx);
    int rc = map_file(tc, 0, "text_file", path, " (launch/text-corpus.sh makes the default corpus)", err);
    if (rc) return rc;
    size_t n = tc->map_bytes[0], train_end = n / 10 * 9 + n % 10 * 9 / 10;  // floor(0.9 n)
    set_split(&tc->train, tc->map[0], train_end, path);
    set_split(&tc->val, (const uint8_t *)tc->map[0] + train_end, n - train_end, path);
    size_t window = (size_t)ctx + 1;
    if (tc->train.n < window || tc->val.n < window) {
        rc = fg_fail(err, FG_ERR_INPUT, "text_file %s: %zu bytes are too few for ctx %d: each "
                     "split (90%% / 10%%) needs one window of %zu bytes, so at least %zu bytes",
                     path, n, ctx, window, min_corpus_bytes(window));
        text_corpus_free(tc);
    }
    return rc;
}

int token_file_ids(const uint8_t *data, size_t bytes, int width, const char *what,
                   const char *path, size_t *offset, FgError *err) {
    int wide = bytes >= TOKEN_HEADER32 && !memcmp(data, TOKEN_FILE_MAGIC32, TOKEN_HEADER32);
    if (wide && width == 2)
        return fg_fail(err, FG_ERR_INPUT, "%s %s: a file of uint32 tokens (header %s), but this "
                       "vocabulary reads uint16 tokens (at most 65536 ids): tokenized for another "
                       "model", what, path, TOKEN_FILE_MAGIC32);
    if (!wide && width == 4)
        return fg_fail(err, FG_ERR_INPUT, "%s %s: a file of uint16 tokens (no %s header), but a "
                       "vocabulary above 65536 ids reads uint32 tokens: tokenize with this model's "
                       "tokenizer (fgpipe tokenize --tokenizer tokenizer.json)", what, path,
                       TOKEN_FILE_MAGIC32);
    *offset = wide ? TOKEN_HEADER32 : 0;
    if ((bytes - *offset) % (size_t)width)
        return fg_fail(err, FG_ERR_INPUT, "%s %s: %zu bytes is %s: not a whole number of uint%d tokens",
                       what, path, bytes - *offset, width == 2 ? "an odd size" : "not a multiple of 4",
                       8 * width);
    return FG_OK;
}

// The largest of n ids (little-endian, as the file holds them on every machine fgpipe runs on):
// a branch-free pass the compiler vectorises, so a whole file is checked at memory speed.
static uint32_t max_id16(const uint16_t *v, size_t n) {
    uint16_t m = 0;
    for (size_t i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}
static uint32_t max_id32(const uint32_t *v, size_t n) {
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

// Every id of the split below the vocabulary, checked once at start over the whole file (not
// only in the windows a run happens to draw); the first one beyond is named.
static int check_ids(const TextCorpus *tc, const TokenSplit *s, const char *what, FgError *err) {
    if (tc->token_bytes == 1 || (tc->token_bytes == 2 && tc->vocab >= 65536)) return FG_OK;
    uint32_t top = tc->token_bytes == 2 ? max_id16((const uint16_t *)s->at, s->n)
                                        : max_id32((const uint32_t *)s->at, s->n);
    if (top < (uint32_t)tc->vocab) return FG_OK;
    size_t i = 0;
    while (i < s->n && (uint32_t)token_at(tc, s, i) < (uint32_t)tc->vocab) i++;
    return fg_fail(err, FG_ERR_INPUT, "%s %s: token %zu is %u, outside the vocabulary of %d "
                   "(vocab; the largest id in the file is %u): the file was tokenized for another "
                   "model", what, s->path, i, (unsigned)token_at(tc, s, i), tc->vocab, top);
}

// One file of tokens as a split: a whole number of tokens, at least one window, every id in
// the vocabulary.
static int map_tokens(TextCorpus *tc, int slot, TokenSplit *s, const char *what, const char *path,
                      FgError *err) {
    int rc = map_file(tc, slot, what, path, tc->token_bytes > 1 ?
                      " (fgpipe tokenize --in TEXT --out FILE makes one)" : "", err);
    if (rc) return rc;
    size_t bytes = tc->map_bytes[slot], offset = 0;
    if (tc->token_bytes > 1)
        rc = token_file_ids(tc->map[slot], bytes, tc->token_bytes, what, path, &offset, err);
    if (rc) return rc;
    size_t n = (bytes - offset) / (size_t)tc->token_bytes;
    if (n < (size_t)tc->ctx + 1)
        return fg_fail(err, FG_ERR_INPUT, "%s %s: %zu tokens are too few for one window of ctx + "
                       "1 = %d tokens", what, path, n, tc->ctx + 1);
    set_split(s, (const uint8_t *)tc->map[slot] + offset, n, path);
    return check_ids(tc, s, what, err);
}

int token_file_load(TextCorpus *tc, const char *path, int token_bytes, int ctx, int vocab,
                    FgError *err) {
    *tc = (TextCorpus){.token_bytes = token_bytes, .ctx = ctx, .vocab = vocab};
    if (ctx < 1) return fg_fail(err, FG_ERR_INPUT, "%s: ctx %d must be at least 1", path, ctx);
    int rc = map_tokens(tc, 0, &tc->val, token_bytes > 1 ? "--tokens" : "--text", path, err);
    if (!rc) madvise(tc->map[0], tc->map_bytes[0], MADV_SEQUENTIAL);
    if (rc) text_corpus_free(tc);
    return rc;
}

int token_corpus_load(TextCorpus *tc, const char *train_path, const char *val_path, int ctx,
                      int vocab, FgError *err) {
    *tc = (TextCorpus){.token_bytes = token_width(vocab), .ctx = ctx, .vocab = vocab};
    if (ctx < 1)
        return fg_fail(err, FG_ERR_INPUT, "train_tokens %s: ctx %d must be at least 1", train_path, ctx);
    int rc = map_tokens(tc, 0, &tc->train, "train_tokens", train_path, err);
    if (!rc) rc = map_tokens(tc, 1, &tc->val, "val_tokens", val_path, err);
    // Windows are drawn at random: read-ahead would fetch pages no window needs.
    if (!rc) madvise(tc->map[0], tc->map_bytes[0], MADV_RANDOM);
    if (rc) text_corpus_free(tc);
    return rc;
}

void text_corpus_free(TextCorpus *tc) {
    for (int i = 0; i < 2; i++)
        if (tc->map[i]) munmap(tc->map[i], tc->map_bytes[i]);
    memset(tc, 0, sizeof *tc);
}

static int put_window(const TextCorpus *tc, const TokenSplit *s, size_t start, int r, float *x,
                      Label *labels, FgError *err) {
    size_t at = (size_t)r * tc->ctx;
    for (int t = 0; t <= tc->ctx; t++) {
        int id = token_at(tc, s, start + t);
        if (id >= tc->vocab)
            return fg_fail(err, FG_ERR_INPUT, "%s: token %zu is %d, outside the vocabulary of %d "
                           "(vocab): the file was tokenized for another model", s->path, start + t,
                           id, tc->vocab);
        if (x && t < tc->ctx) x[at + t] = (float)id;
        if (labels && t > 0) labels[at + t - 1] = (Label)id;
    }
    return FG_OK;
}

int text_train_batch(const TextCorpus *tc, uint32_t seed, uint64_t step, uint32_t microbatch,
                     int rows, float *x, Label *labels, FgError *err) {
    // Starts are uniform over [0, n_train - ctx - 1] up to a modulo bias of at most
    // (number of starts) / 2^64: nothing at any corpus size.
    uint64_t starts = tc->train.n - (size_t)tc->ctx;
    int rc = FG_OK;
    for (int r = 0; r < rows && !rc; r++) {
        Philox4 ctr = {{(uint32_t)step, (uint32_t)(step >> 32), microbatch, (uint32_t)r}};
        Philox4 u = philox4x32_10(ctr, seed, 0x74657874u /* "text" */);
        uint64_t draw = ((uint64_t)u.v[0] << 32) | u.v[1];
        rc = put_window(tc, &tc->train, (size_t)(draw % starts), r, x, labels, err);
    }
    return rc;
}

size_t text_val_windows(const TextCorpus *tc) {
    return (tc->val.n - 1) / (size_t)tc->ctx;
}

int text_val_batch(const TextCorpus *tc, size_t first_window, int rows, float *x, Label *labels,
                   FgError *err) {
    int rc = FG_OK;
    for (int r = 0; r < rows && !rc; r++)
        rc = put_window(tc, &tc->val, (first_window + (size_t)r) * tc->ctx, r, x, labels, err);
    return rc;
}
