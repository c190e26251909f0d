// Tests for the language-model corpus (text_data.c): bytes of text and files of uint16 tokens.
// Text: the 90/10 split, training windows drawn from Philox (inside the split, labels = next byte, reproducible, different per micro-batch,
// uniform), validation windows that tile the split, and every load error by path and cause.
// Corpora are written into a fresh mkdtemp directory under /tmp.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text_data.h"
#include "test_util.h"

static char tmpdir[256];

static int group_setup(void **state) {
    (void)state;
    return scratch_dir(tmpdir, sizeof tmpdir, "/tmp/fgpipe_test_text");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_tree(tmpdir);
}

// Writes n bytes to <tmpdir>/name; byte i is the low byte of a 64-bit LCG, so windows at
// different offsets differ and a window's position can be found by its contents.
static void write_corpus(char *path, size_t size, const char *name, size_t n, uint64_t seed) {
    snprintf(path, size, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    Rng rng = {seed};
    for (size_t i = 0; i < n; i++) assert_int_not_equal(fputc((int)(rng_next(&rng) >> 56), f), EOF);
    assert_int_equal(fclose(f), 0);
}

static void load_ok(TextCorpus *tc, const char *name, size_t n, int ctx) {
    char path[512];
    write_corpus(path, sizeof path, name, n, 42);
    FgError err = {0};
    assert_int_equal(text_corpus_load(tc, path, ctx, &err), FG_OK);
    assert_int_equal((tc->train.n + tc->val.n), n);
    assert_int_equal(tc->ctx, ctx);
}

// Where window r of a batch starts: the unique s with bytes[s .. s+ctx] equal to the window,
// found by scanning the whole file (the LCG bytes make 17-byte matches elsewhere vanishingly
// unlikely; a second match fails the test rather than passing it).
static size_t find_start(const TextCorpus *tc, const float *x, const Label *labels) {
    size_t found = SIZE_MAX;
    for (size_t s = 0; s + (size_t)tc->ctx < (tc->train.n + tc->val.n); s++) {
        int same = 1;
        for (int t = 0; t < tc->ctx && same; t++)
            same = tc->train.at[s + t] == (uint8_t)x[t] && tc->train.at[s + t + 1] == labels[t];
        if (same) {
            assert_int_equal(found, SIZE_MAX);
            found = s;
        }
    }
    assert_int_not_equal(found, SIZE_MAX);
    return found;
}

static void test_split(void **state) {
    (void)state;
    const size_t sizes[] = {1000, 1001, 1009, 12345};
    for (int i = 0; i < 4; i++) {
        TextCorpus tc;
        load_ok(&tc, "split.txt", sizes[i], 8);
        assert_int_equal(tc.train.n, sizes[i] * 9 / 10);  // floor of 90%
        text_corpus_free(&tc);
        assert_null(tc.train.at);
        assert_null(tc.map[0]);
    }
}

static void test_train_windows(void **state) {
    (void)state;
    enum { CTX = 16, ROWS = 8 };
    TextCorpus tc;
    load_ok(&tc, "train.txt", 5000, CTX);
    float x[ROWS * CTX];
    Label labels[ROWS * CTX], labels_only[ROWS * CTX];
    float x_only[ROWS * CTX];
    for (uint64_t step = 0; step < 20; step++) {
        assert_int_equal(text_train_batch(&tc, 7, step, 3, ROWS, x, labels, NULL), FG_OK);
        for (int r = 0; r < ROWS; r++) {
            size_t s = find_start(&tc, x + r * CTX, labels + r * CTX);
            assert_true(s + CTX + 1 <= tc.train.n);  // the whole window trains
            for (int t = 0; t < CTX; t++) {
                assert_true(x[r * CTX + t] == (float)tc.train.at[s + t]);  // token ids, exact
                assert_int_equal(labels[r * CTX + t], tc.train.at[s + t + 1]);
            }
        }
        // Either output alone is the same as both: the end stages of a pipeline agree.
        assert_int_equal(text_train_batch(&tc, 7, step, 3, ROWS, NULL, labels_only, NULL), FG_OK);
        assert_int_equal(text_train_batch(&tc, 7, step, 3, ROWS, x_only, NULL, NULL), FG_OK);
        assert_memory_equal(labels_only, labels, sizeof labels);
        assert_memory_equal(x_only, x, sizeof x);
    }
    text_corpus_free(&tc);
}

// Starts of a batch as byte offsets (x[0] alone is ambiguous; find_start uses the whole window).
static void batch_starts(const TextCorpus *tc, uint32_t seed, uint64_t step, uint32_t mb,
                         int rows, size_t *starts) {
    float *x = malloc(sizeof(float) * (size_t)rows * tc->ctx);
    Label *labels = malloc((size_t)rows * tc->ctx * sizeof(Label));
    assert_int_equal(text_train_batch(tc, seed, step, mb, rows, x, labels, NULL), FG_OK);
    for (int r = 0; r < rows; r++)
        starts[r] = find_start(tc, x + (size_t)r * tc->ctx, labels + (size_t)r * tc->ctx);
    free(x);
    free(labels);
}

static void test_reproducible(void **state) {
    (void)state;
    enum { CTX = 16, ROWS = 4 };
    TextCorpus tc;
    load_ok(&tc, "repro.txt", 20000, CTX);
    size_t a[ROWS], b[ROWS], other[ROWS];
    batch_starts(&tc, 11, 5, 2, ROWS, a);
    batch_starts(&tc, 11, 5, 2, ROWS, b);
    assert_memory_equal(a, b, sizeof a);  // a pure function of (seed, step, micro-batch, row)
    // Any change of seed, step (low or high word) or micro-batch gives other windows: with
    // ~18000 starts, four rows all agreeing by chance has probability ~1e-17.
    const struct { uint32_t seed; uint64_t step; uint32_t mb; } changed[] = {
        {12, 5, 2}, {11, 6, 2}, {11, 5 + (1ull << 32), 2}, {11, 5, 3}, {11, 5, 2 + 65536}};
    for (size_t i = 0; i < sizeof changed / sizeof changed[0]; i++) {
        batch_starts(&tc, changed[i].seed, changed[i].step, changed[i].mb, ROWS, other);
        int same = 0;
        for (int r = 0; r < ROWS; r++) same += other[r] == a[r];
        assert_true(same < ROWS);
    }
    // Rows within a batch are different draws too.
    assert_true(a[0] != a[1] || a[1] != a[2] || a[2] != a[3]);
    text_corpus_free(&tc);
}

// Histogram of starts over many draws: every start in [0, train_end - ctx - 1] is possible,
// and the counts per bin match a uniform distribution (chi-square with a bound that a biased or
// truncated range fails).
static void test_uniform(void **state) {
    (void)state;
    enum { CTX = 8, BINS = 20, MBS = 400, ROWS = 50 };
    TextCorpus tc;
    load_ok(&tc, "uniform.txt", 2000, CTX);
    const size_t n_starts = tc.train.n - CTX;  // starts 0 .. train_end - ctx - 1
    size_t hist[BINS] = {0}, lo = SIZE_MAX, hi = 0, starts[ROWS];
    for (uint32_t mb = 0; mb < MBS; mb++) {
        batch_starts(&tc, 3, 1, mb, ROWS, starts);
        for (int r = 0; r < ROWS; r++) {
            assert_true(starts[r] < n_starts);
            hist[starts[r] * BINS / n_starts]++;
            lo = FG_MIN(lo, starts[r]);
            hi = FG_MAX(hi, starts[r]);
        }
    }
    // 20000 draws over 1792 starts: both ends are reached with probability 1 - 2e-5.
    assert_int_equal(lo, 0);
    assert_int_equal(hi, n_starts - 1);
    double expect = (double)MBS * ROWS / BINS, chi2 = 0.0;
    for (int b = 0; b < BINS; b++) {
        size_t width = (size_t)(b + 1) * n_starts / BINS - (size_t)b * n_starts / BINS;
        double e = expect * (double)width * BINS / (double)n_starts;  // unequal bin widths
        chi2 += ((double)hist[b] - e) * ((double)hist[b] - e) / e;
    }
    // 19 degrees of freedom: P(chi2 > 50) ~ 1e-4, while a half-range draw scores ~20000.
    assert_true(chi2 < 50.0);
    text_corpus_free(&tc);
}

static void test_validation(void **state) {
    (void)state;
    const struct { size_t n; int ctx; } cases[] = {{1000, 9}, {1000, 10}, {1000, 99}, {4321, 7}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        TextCorpus tc;
        const int T = cases[c].ctx;
        load_ok(&tc, "val.txt", cases[c].n, T);
        size_t n_val = (tc.train.n + tc.val.n) - tc.train.n, w_count = text_val_windows(&tc);
        assert_int_equal(w_count, (n_val - 1) / (size_t)T);
        // The last window fits, one more would not.
        assert_true(tc.train.n + (w_count - 1) * T + T < (tc.train.n + tc.val.n));
        assert_true(tc.train.n + w_count * T + T >= (tc.train.n + tc.val.n));
        float *x = malloc(sizeof(float) * w_count * T);
        Label *labels = malloc(w_count * T * sizeof(Label));
        assert_int_equal(text_val_batch(&tc, 0, (int)w_count, x, labels, NULL), FG_OK);
        // Inputs tile [train_end, train_end + count * ctx) in order, labels are the next bytes.
        for (size_t i = 0; i < w_count * T; i++) {
            assert_true(x[i] == (float)tc.train.at[tc.train.n + i]);
            assert_int_equal(labels[i], tc.train.at[tc.train.n + i + 1]);
        }
        // A batch from first_window > 0 is the same windows.
        if (w_count > 1) {
            Label tail[128];
            assert_int_equal(text_val_batch(&tc, 1, 1, NULL, tail, NULL), FG_OK);
            assert_memory_equal(tail, labels + T, (size_t)T * sizeof(Label));
        }
        free(x);
        free(labels);
        text_corpus_free(&tc);
    }
}

// The load fails with FG_ERR_INPUT and a message holding the path and each of the needles.
static void expect_error(const char *path, int ctx, const char *needle1, const char *needle2) {
    TextCorpus tc;
    FgError err = {0};
    assert_int_equal(text_corpus_load(&tc, path, ctx, &err), FG_ERR_INPUT);
    assert_int_equal(err.code, FG_ERR_INPUT);
    assert_null(tc.train.at);
    assert_null(tc.map[0]);
    if (!strstr(err.msg, path) || !strstr(err.msg, needle1) ||
        (needle2 && !strstr(err.msg, needle2)))
        fail_msg("message \"%s\" lacks \"%s\" / \"%s\" / \"%s\"", err.msg, path, needle1,
                 needle2 ? needle2 : "");
}

static void test_errors(void **state) {
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/no-such-file.txt", tmpdir);
    expect_error(path, 8, "No such file or directory", "text-corpus.sh");
    expect_error(tmpdir, 8, "is a directory", NULL);
    write_corpus(path, sizeof path, "empty.txt", 0, 1);
    expect_error(path, 8, "is empty", NULL);
    // ctx 9: windows of 10 bytes; the validation split needs ceil(0.1 n) >= 10, so n >= 91.
    write_corpus(path, sizeof path, "short.txt", 90, 1);
    expect_error(path, 9, "too few for ctx 9", "at least 91 bytes");
    // The bound is exact: 91 bytes load.
    write_corpus(path, sizeof path, "just.txt", 91, 1);
    TextCorpus tc;
    FgError err = {0};
    assert_int_equal(text_corpus_load(&tc, path, 9, &err), FG_OK);
    assert_int_equal(text_val_windows(&tc), 1);
    text_corpus_free(&tc);
    // ctx 1: windows of 2 bytes; floor(0.9 n) >= 2 needs n >= 3 (ceil(0.1 n) >= 2 needs 11).
    write_corpus(path, sizeof path, "tiny.txt", 10, 1);
    expect_error(path, 1, "too few for ctx 1", "at least 11 bytes");
    expect_error(path, 0, "ctx 0 must be at least 1", NULL);
}

// Writes n little-endian tokens of `width` bytes (4: after the FGTOKU32 header): token i =
// (i * 7919 + seed) % modulus.
static void write_ids(char *path, size_t size, const char *name, size_t n, unsigned modulus,
                      unsigned seed, int odd_byte, int width) {
    snprintf(path, size, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (width == 4) assert_int_equal(fwrite(TOKEN_FILE_MAGIC32, 1, TOKEN_HEADER32, f), TOKEN_HEADER32);
    for (size_t i = 0; i < n; i++) {
        unsigned id = (unsigned)((i * 7919 + seed) % modulus);
        for (int k = 0; k < width; k++) assert_int_not_equal(fputc((int)((id >> 8 * k) & 255), f), EOF);
    }
    if (odd_byte) fputc(0, f);
    assert_int_equal(fclose(f), 0);
}

static void write_tokens(char *path, size_t size, const char *name, size_t n, unsigned modulus,
                         unsigned seed, int odd_byte) {
    write_ids(path, size, name, n, modulus, seed, odd_byte, 2);
}

// Training windows hold the ids of files written by write_ids (3000 tokens, seed 1) and labels
// the next ones; validation window 2 of the second (seed 2) is its tokens from 2 CTX.
enum { CTX = 8, ROWS = 4 };
static void check_windows(const TextCorpus *tc, unsigned vocab) {
    float x[ROWS * CTX];
    Label labels[ROWS * CTX];
    FgError err = {0};
    assert_int_equal(text_train_batch(tc, 3, 0, 0, ROWS, x, labels, &err), FG_OK);
    for (int r = 0; r < ROWS; r++) {
        // Token i is (7919 i + 1) mod V, so the window's start follows from its first id.
        size_t start = SIZE_MAX;
        for (size_t i = 0; i + CTX < 3000 && start == SIZE_MAX; i++)
            if ((float)token_at(tc, &tc->train, i) == x[r * CTX]) start = i;
        assert_int_not_equal(start, SIZE_MAX);
        for (int t = 0; t < CTX; t++) {
            assert_true(x[r * CTX + t] == (float)(((start + t) * 7919 + 1) % vocab));
            assert_int_equal(labels[r * CTX + t], ((start + t + 1) * 7919 + 1) % vocab);
        }
    }
    assert_int_equal(text_val_windows(tc), (100 - 1) / CTX);
    assert_int_equal(text_val_batch(tc, 2, 1, x, labels, &err), FG_OK);
    for (int t = 0; t < CTX; t++) {
        assert_true(x[t] == (float)(((2 * CTX + t) * 7919 + 2) % vocab));
        assert_int_equal(labels[t], ((2 * CTX + t + 1) * 7919 + 2) % vocab);
    }
}

// data = tokens: windows hold the files' uint16 ids (above 255), labels the next; validation
// windows tile the second file; an id >= vocab anywhere, an odd size and a short file are named
// errors.
static void test_tokens(void **state) {
    (void)state;
    enum { VOCAB = 50257 };
    char train[512], val[512];
    write_tokens(train, sizeof train, "train.bin", 3000, VOCAB, 1, 0);
    write_tokens(val, sizeof val, "val.bin", 100, VOCAB, 2, 0);
    TextCorpus tc;
    FgError err = {0};
    assert_int_equal(token_corpus_load(&tc, train, val, CTX, VOCAB, &err), FG_OK);
    assert_int_equal(tc.train.n, 3000);
    assert_int_equal(tc.val.n, 100);
    check_windows(&tc, VOCAB);
    text_corpus_free(&tc);
    // The same files read by a model of a smaller vocabulary: refused as they load (the whole
    // file is checked, not only the windows a run draws), naming the file and the first id.
    assert_int_equal(token_corpus_load(&tc, train, val, CTX, 300, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, train) || !strstr(err.msg, "outside the vocabulary of 300"))
        fail_msg("message \"%s\"", err.msg);
    assert_null(tc.map[0]);
    char bad[512];
    write_tokens(bad, sizeof bad, "odd.bin", 100, VOCAB, 0, 1);
    assert_int_equal(token_corpus_load(&tc, bad, val, CTX, VOCAB, &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "odd size"));
    assert_null(tc.map[0]);
    write_tokens(bad, sizeof bad, "short.bin", CTX, VOCAB, 0, 0);
    assert_int_equal(token_corpus_load(&tc, train, bad, CTX, VOCAB, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, "val_tokens") || !strstr(err.msg, "8 tokens are too few"))
        fail_msg("message \"%s\"", err.msg);
    snprintf(bad, sizeof bad, "%s/none.bin", tmpdir);
    assert_int_equal(token_corpus_load(&tc, train, bad, CTX, VOCAB, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, "No such file") || !strstr(err.msg, "fgpipe tokenize"))
        fail_msg("message \"%s\"", err.msg);
}

// Above vocab 65536 (Qwen3's 151936) the files hold uint32 after the FGTOKU32 header: ids above
// 65535 reach the inputs and the labels whole; a file of the other width is refused by name,
// either way, and so is a uint32 file that is not a whole number of ids.
static void test_tokens32(void **state) {
    (void)state;
    enum { VOCAB = 151936 };
    char train[512], val[512], narrow[512];
    write_ids(train, sizeof train, "train32.bin", 3000, VOCAB, 1, 0, 4);
    write_ids(val, sizeof val, "val32.bin", 100, VOCAB, 2, 0, 4);
    TextCorpus tc;
    FgError err = {0};
    assert_int_equal(token_corpus_load(&tc, train, val, CTX, VOCAB, &err), FG_OK);
    assert_int_equal(tc.token_bytes, 4);
    assert_int_equal(tc.train.n, 3000);
    int above = 0;  // the files do hold ids a uint16 would cut
    for (size_t i = 0; i < tc.train.n; i++) above |= token_at(&tc, &tc.train, i) > 65535;
    assert_true(above);
    check_windows(&tc, VOCAB);
    text_corpus_free(&tc);
    write_tokens(narrow, sizeof narrow, "narrow.bin", 3000, 50257, 1, 0);
    assert_int_equal(token_corpus_load(&tc, narrow, val, CTX, VOCAB, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, narrow) || !strstr(err.msg, "a file of uint16 tokens"))
        fail_msg("message \"%s\"", err.msg);
    assert_int_equal(token_corpus_load(&tc, narrow, val, CTX, 50257, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, val) || !strstr(err.msg, "a file of uint32 tokens"))
        fail_msg("message \"%s\"", err.msg);
    write_ids(narrow, sizeof narrow, "odd32.bin", 100, VOCAB, 0, 1, 4);
    assert_int_equal(token_corpus_load(&tc, train, narrow, CTX, VOCAB, &err), FG_ERR_INPUT);
    if (!strstr(err.msg, "odd32.bin") || !strstr(err.msg, "not a whole number of uint32 tokens"))
        fail_msg("message \"%s\"", err.msg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),      cmocka_unit_test(test_train_windows),
        cmocka_unit_test(test_reproducible), cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_validation), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_tokens),     cmocka_unit_test(test_tokens32),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
