// `fgpipe tokenize`: text -> token ids, or with --decode ids -> text, with GPT-2's BPE files or
// a Hugging Face tokenizer.json. Ids are written as text_data.h reads them: little-endian
// uint16 (the format nanoGPT and llm.c read) for vocabularies up to 65536, else the FGTOKU32
// header and uint32. Runs on one process, no MPI.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenize.h"

#include "bpe.h"
#include "hf_tokenizer.h"
#include "text_data.h"

typedef struct {
    const char *in, *out, *vocab_dir, *tokenizer;
    int decode;
} TokenizeArgs;

static int parse(int argc, char **argv, TokenizeArgs *a, FgError *err) {
    *a = (TokenizeArgs){.vocab_dir = NULL};
    for (int i = 0; i < argc; i++) {
        int more = i + 1 < argc;
        if (strcmp(argv[i], "--in") == 0 && more) a->in = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && more) a->out = argv[++i];
        else if (strcmp(argv[i], "--vocab") == 0 && more) a->vocab_dir = argv[++i];
        else if (strcmp(argv[i], "--tokenizer") == 0 && more) a->tokenizer = argv[++i];
        else if (strcmp(argv[i], "--decode") == 0) a->decode = 1;
        else return fg_fail(err, FG_ERR_INPUT, "tokenize: unknown or incomplete argument '%s' (see fgpipe --help)", argv[i]);
    }
    if (!a->in || !a->out) return fg_fail(err, FG_ERR_INPUT, "tokenize needs --in FILE and --out FILE");
    if (a->vocab_dir && a->tokenizer)
        return fg_fail(err, FG_ERR_INPUT, "tokenize: --vocab DIR (GPT-2's files) or --tokenizer JSON, not both");
    if (!a->vocab_dir) a->vocab_dir = "data/gpt2";
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
    uint32_t *tokens = NULL;
    size_t count = 0;
    int rc = bpe_encode(b, text, n, &tokens, &count, err);
    const int width = token_width(bpe_vocab_size(b));
    const size_t header = width == 4 ? TOKEN_HEADER32 : 0;
    unsigned char *le = rc ? NULL : malloc(header + (size_t)width * count + 1);
    if (le) memcpy(le, TOKEN_FILE_MAGIC32, header);
    for (size_t i = 0; le && i < count; i++)
        for (int k = 0; k < width; k++) le[header + (size_t)width * i + k] = (unsigned char)(tokens[i] >> 8 * k);
    if (!rc) rc = le ? write_all(out, le, header + (size_t)width * count, err)
                     : fg_fail(err, FG_ERR_INTERNAL, "out of memory");
    if (!rc) fprintf(stderr, "fgpipe: %zu bytes -> %zu tokens (%.2f bytes per token) in %s, uint%d\n",
                     n, count, count ? (double)n / count : 0.0, out, 8 * width);
    free(tokens);
    free(le);
    return rc;
}

static uint32_t id_at(const unsigned char *p, int width) {
    uint32_t id = 0;
    for (int k = 0; k < width; k++) id |= (uint32_t)p[k] << 8 * k;
    return id;
}

static int decode_file(const Bpe *b, const unsigned char *file, size_t n, const char *path,
                       const char *out, FgError *err) {
    const int width = token_width(bpe_vocab_size(b));
    size_t offset, len = 0, k;
    int rc = token_file_ids(file, n, width, "tokenize --decode", path, &offset, err);
    if (rc) return rc;
    const unsigned char *ids = file + offset;
    size_t count = (n - offset) / (size_t)width;
    for (size_t i = 0; i < count; i++) {  // the text's length first: tokens are 1 to 256 bytes
        uint32_t token = id_at(ids + (size_t)width * i, width);
        if (token >= (uint32_t)bpe_vocab_size(b) || !bpe_token_bytes(b, (int)token, &k))
            return fg_fail(err, FG_ERR_INPUT, "tokenize --decode: token %zu is %u, not in the vocabulary (%d tokens)",
                           i, (unsigned)token, bpe_vocab_size(b));
        len += k;
    }
    char *text = malloc(len + 1);
    if (!text) return fg_fail(err, FG_ERR_INTERNAL, "out of memory");
    for (size_t i = 0, at = 0; i < count; i++) {
        const char *bytes = bpe_token_bytes(b, (int)id_at(ids + (size_t)width * i, width), &k);
        memcpy(text + at, bytes, k), at += k;
    }
    rc = write_all(out, text, len, err);
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
    if (!rc && a.tokenizer) {
        rc = hf_tokenizer_load(a.tokenizer, &b, err);
    } else if (!rc) {
        snprintf(encoder, sizeof encoder, "%s/encoder.json", a.vocab_dir);
        snprintf(merges, sizeof merges, "%s/vocab.bpe", a.vocab_dir);
        rc = bpe_load(encoder, merges, &b, err);
    }
    if (!rc && !(in = fg_read_file(a.decode ? "the tokens" : "the text", a.in, NULL, &n, err))) rc = FG_ERR_INPUT;
    if (!rc) rc = a.decode ? decode_file(b, (const unsigned char *)in, n, a.in, a.out, err)
                           : encode_file(b, in, n, a.out, err);
    fg_free(in);
    bpe_free(b);
    return rc;
}
