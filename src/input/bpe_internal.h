// What the tokenizer loaders (bpe.c for GPT-2's files, hf_tokenizer.c for Hugging Face's
// tokenizer.json) share: the tables of a byte-level BPE and the calls that fill them. One
// merge loop, one byte alphabet, one pre-tokenizer loop serve both.
#ifndef FGPIPE_BPE_INTERNAL_H
#define FGPIPE_BPE_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bpe.h"

typedef struct {
    const char *a, *b;  // a token's bytes (b NULL), or a merge's left and right
    size_t a_len, b_len;
    int value;          // id or rank; -1: empty slot
} Entry;

typedef struct {
    Entry *slots;
    size_t mask;
} Map;

// A token matched in the text before pre-tokenization (<|endoftext|>, <|im_start|>, ...).
typedef struct {
    const char *bytes;  // token_bytes[id]
    size_t len;
    int id;
} AddedToken;

struct Bpe {
    Map vocab, ranks;
    char **token_bytes;  // [n_tokens]: each id's bytes (owned), lengths in token_len
    size_t *token_len;
    int n_tokens, cap_tokens, n_merges;
    int byte_of_code[324];  // GPT-2's alphabet: code point -> byte (-1: not in it)
    AddedToken *added;      // longest first
    int n_added;
    unsigned char added_first[256];  // 1: some added token starts with this byte
    int ignore_merges;      // a piece that is a token is that token, unmerged (Llama 3)
    int nfc;                // the text is put in Unicode NFC first (Qwen3)
    pcre2_code *pattern;
    pcre2_match_data *match;
};

// GPT-2's pre-tokenizer (encoder.py), also Hugging Face's ByteLevel with use_regex.
extern const char *const bpe_gpt2_pattern;

// Room for n_tokens vocabulary entries and n_merges merges, the byte alphabet; NULL: no memory.
Bpe *bpe_new(size_t n_tokens, size_t n_merges);
// The pre-tokenizer's split pattern (PCRE2 syntax, as Hugging Face writes it).
int bpe_set_pattern(Bpe *b, const char *pattern, FgError *err);
// Vocabulary entry `id`, written in GPT-2's byte alphabet (UTF-8). -1: a character outside the
// alphabet; -2: the id is negative or already taken.
int bpe_add_token(Bpe *b, const char *alphabet_text, size_t len, int id);
// The next merge by rank, its halves written in the alphabet; -1 when either is not.
int bpe_add_merge(Bpe *b, const char *left, size_t left_len, const char *right, size_t right_len);
// A token matched before pre-tokenization, as raw bytes; -2 when the id is taken by another
// text (an added token that is also a vocabulary entry of the same bytes is allowed).
int bpe_add_special(Bpe *b, const char *bytes, size_t len, int id);
// The value of a key in a map (a token's id, a merge's rank), -1 when absent; b NULL for a token.
int bpe_map_get(const Map *m, const char *a, size_t a_len, const char *b, size_t b_len);
// One UTF-8 code point of s[*i..n), advancing *i; -1 when malformed.
int bpe_next_code_point(const char *s, size_t n, size_t *i);

#endif
