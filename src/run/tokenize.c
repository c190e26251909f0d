// `fgpipe tokenize`: text -> GPT-2 tokens as little-endian uint16 (the format nanoGPT and
// llm.c read), or with --decode tokens -> text. Runs on one process, no MPI.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize.h"

#include "bpe.h"

typedef struct {
    const char *in, *out, *vocab_dir;
    int decode;
} TokenizeArgs;

static int parse(int argc, char **argv, TokenizeArgs *a, FgError *err) {
    *a = (TokenizeArgs){.vocab_dir = "data/gpt2"};
    for (int i = 0; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--in") == 0 && more) a->in = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && more) a->out = argv[++i];
        else if (strcmp(argv[i], "--vocab") == 0 && more) a->vocab_dir = argv[++i];
        else if (strcmp(argv[i], "--decode") == 0) a->decode = 1;
        else return fg_fail(err, FG_ERR_INPUT, "tokenize: unknown or incomplete argument '%s' (see fgpipe --help)", argv[i]);
    }
    if (!a->in || !a->out) return fg_fail(err, FG_ERR_INPUT, "tokenize needs --in FILE and --out FILE");
    return FG_OK;
}

static int write_all(const char *path, const void *data, size_t n, FgError *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return fg_fail(err, FG_ERR_INPUT, "tokenize: cannot create %s", path);
    int bad = fwrite(data, 1, n, f) != n;
    bad |= fclose(f) != 0;
    if (bad) remove(path);
    return bad ? fg_fail(err, FG_ERR_INPUT, "tokenize: writing %s failed (disk full?)", path) : FG_OK;
}

static int encode_file(const Bpe *b, const char *text, size_t n, const char *out, FgError *err) {
    uint16_t *tokens = NULL;
    size_t count = 0;
    int rc = bpe_encode(b, text, n, &tokens, &count, err);
    unsigned char *le = rc ? NULL : malloc(2 * count + 1);
    for (size_t i = 0; le && i < count; i++) le[2 * i] = tokens[i] & 0xFF, le[2 * i + 1] = tokens[i] >> 8;
    if (!rc) rc = le ? write_all(out, le, 2 * count, err) : fg_fail(err, FG_ERR_INTERNAL, "out of memory");
    if (!rc) fprintf(stderr, "fgpipe: %zu bytes -> %zu tokens (%.2f bytes per token) in %s\n", n, count,
                     count ? (double)n / count : 0.0, out);
    free(tokens);
    free(le);
    return rc;
}

static int decode_file(const Bpe *b, const unsigned char *le, size_t n, const char *out, FgError *err) {
    if (n % 2) return fg_fail(err, FG_ERR_INPUT, "tokenize --decode: %zu bytes is not a whole number of uint16 tokens", n);
    size_t len = 0, k;
    for (size_t i = 0; i < n / 2; i++) {  // the text's length first: tokens are 1 to 128 bytes
        int token = le[2 * i] | le[2 * i + 1] << 8;
        if (!bpe_token_bytes(b, token, &k))
            return fg_fail(err, FG_ERR_INPUT, "tokenize --decode: token %zu is %d, not in the vocabulary (%d tokens)",
                           i, token, bpe_vocab_size(b));
        len += k;
    }
    char *text = malloc(len + 1);
    if (!text) return fg_fail(err, FG_ERR_INTERNAL, "out of memory");
    for (size_t i = 0, at = 0; i < n / 2; i++) {
        const char *bytes = bpe_token_bytes(b, le[2 * i] | le[2 * i + 1] << 8, &k);
        memcpy(text + at, bytes, k), at += k;
    }
    int rc = write_all(out, text, len, err);
    free(text);
    return rc;
}

int tokenize_command(int argc, char **argv, FgError *err) {
    TokenizeArgs a;
    char encoder[4096], merges[4096];
    Bpe *b = NULL;
    size_t n = 0;
    char *in = NULL;
    int rc = parse(argc, argv, &a, err);
    snprintf(encoder, sizeof encoder, "%s/encoder.json", a.vocab_dir);
    snprintf(merges, sizeof merges, "%s/vocab.bpe", a.vocab_dir);
    if (!rc) rc = bpe_load(encoder, merges, &b, err);
    if (!rc && !(in = fg_read_file(a.decode ? "the tokens" : "the text", a.in, NULL, &n, err))) rc = FG_ERR_INPUT;
    if (!rc) rc = a.decode ? decode_file(b, (const unsigned char *)in, n, a.out, err)
                           : encode_file(b, in, n, a.out, err);
    fg_free(in);
    bpe_free(b);
    return rc;
}
