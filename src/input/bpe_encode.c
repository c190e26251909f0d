// Encoding with a byte-level BPE (bpe.h): added tokens first, then the pre-tokenizer's pieces
// of the text between them, each merged by rank. The same loop for GPT-2 and Hugging Face's
// tokenizers; what differs is in the tables (bpe_internal.h).
#include "bpe_internal.h"

#include <stdlib.h>
#include <string.h>

#include "unicode_nfc.h"

// Adjacent slices of one piece of text.
typedef struct {
    const char *s;
    size_t len;
} Symbol;

typedef struct {
    uint32_t *ids;
    size_t n, cap;
    Symbol *sym;   // scratch for one piece, grown to the longest
    size_t sym_cap;
} Out;

// One piece: its bytes merged by rank, lowest first, each pass merging every occurrence of
// the pair left to right (encoder.py's bpe; Hugging Face's priority queue gives the same),
// then looked up. With ignore_merges a piece that is a token is taken whole. The count of
// tokens, or -1 when a symbol has no token.
static int encode_piece(const Bpe *b, const char *s, size_t n, Symbol *sym, uint32_t *out) {
    int whole = b->ignore_merges ? bpe_map_get(&b->vocab, s, n, NULL, 0) : -1;
    if (whole >= 0) return out[0] = (uint32_t)whole, 1;
    size_t count = n;
    for (size_t i = 0; i < n; i++) sym[i] = (Symbol){s + i, 1};
    while (count > 1) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < count; i++) {
            int r = bpe_map_get(&b->ranks, sym[i].s, sym[i].len, sym[i + 1].s, sym[i + 1].len);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) break;
        Symbol first = sym[at], second = sym[at + 1];
        size_t kept = 0;
        for (size_t i = 0; i < count; i++) {
            int pair = i + 1 < count && sym[i].len == first.len && sym[i + 1].len == second.len &&
                       !memcmp(sym[i].s, first.s, first.len) && !memcmp(sym[i + 1].s, second.s, second.len);
            // Symbols are adjacent slices of s: a merged pair is the slice over both.
            sym[kept++] = pair ? (Symbol){sym[i].s, sym[i].len + sym[i + 1].len} : sym[i];
            i += (size_t)pair;
        }
        count = kept;
    }
    for (size_t i = 0; i < count; i++) {
        int id = bpe_map_get(&b->vocab, sym[i].s, sym[i].len, NULL, 0);
        if (id < 0) return -1;
        out[i] = (uint32_t)id;
    }
    return (int)count;
}

// Room for k more ids and a piece of `len` bytes; -1 when out of memory.
static int reserve(Out *o, size_t k, size_t len) {
    if (o->n + k > o->cap) {
        size_t cap = 2 * o->cap + k + 16;
        uint32_t *ids = realloc(o->ids, cap * sizeof *ids);
        if (!ids) return -1;
        o->ids = ids, o->cap = cap;
    }
    if (len > o->sym_cap) {
        Symbol *sym = realloc(o->sym, len * sizeof *sym);
        if (!sym) return -1;
        o->sym = sym, o->sym_cap = len;
    }
    return 0;
}

static int piece(const Bpe *b, const char *s, size_t len, size_t offset, Out *o, FgError *err) {
    if (!len) return FG_OK;
    if (reserve(o, len, len)) return fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    int k = encode_piece(b, s, len, o->sym, o->ids + o->n);
    if (k < 0)
        return fg_fail(err, FG_ERR_INPUT, "tokenize: a piece at byte %zu has no token (a byte "
                       "missing from the vocabulary?)", offset);
    o->n += (size_t)k;
    return FG_OK;
}

// The pre-tokenizer's split of s[0..n) (a stretch between added tokens, UTF-8 checked), each
// match a piece and, as Hugging Face's Split "Isolated" keeps them, the text between matches.
static int split(const Bpe *b, const char *s, size_t n, size_t offset, Out *o, FgError *err) {
    size_t at = 0;
    int rc = FG_OK;
    while (!rc && at < n) {
        int m = pcre2_match(b->pattern, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK | PCRE2_NOTEMPTY,
                            b->match, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) return fg_fail(err, FG_ERR_INTERNAL, "tokenize: pattern match failed (%d)", m);
        PCRE2_SIZE *span = pcre2_get_ovector_pointer(b->match);
        rc = piece(b, s + at, span[0] - at, offset + at, o, err);
        if (!rc) rc = piece(b, s + span[0], span[1] - span[0], offset + span[0], o, err);
        at = span[1];
    }
    return rc ? rc : piece(b, s + at, n - at, offset + at, o, err);
}

// A stretch between added tokens: normalized (NFC, where the tokenizer says so), then split.
static int stretch(const Bpe *b, const char *s, size_t n, size_t offset, Out *o, FgError *err) {
    if (!b->nfc || unicode_is_ascii(s, n)) return split(b, s, n, offset, o, err);
    size_t len;
    char *normal = unicode_nfc(s, n, &len);
    if (!normal) return fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    int rc = split(b, normal, len, offset, o, err);
    free(normal);
    return rc;
}

// The first added token in s[at..n), longest where several start at one byte: its offset (n
// when none) and its index in b->added.
static size_t next_added(const Bpe *b, const char *s, size_t n, size_t at, int *which) {
    for (size_t i = at; b->n_added && i < n; i++) {
        if (!b->added_first[(unsigned char)s[i]]) continue;
        for (int k = 0; k < b->n_added; k++) {
            const AddedToken *t = &b->added[k];
            if (t->len <= n - i && !memcmp(s + i, t->bytes, t->len)) return *which = k, i;
        }
    }
    return n;
}

// The offset of the first malformed UTF-8 sequence of s[0..n) (n if none).
static size_t first_bad_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t at = i;
        int cp = bpe_next_code_point(s, n, &i);
        for (size_t k = at + 1; cp >= 0 && k < i; k++)
            if (((unsigned char)s[k] & 0xC0) != 0x80) cp = -1;
        if (cp < 0 || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF ||
            (i - at > 1 && cp < (i - at == 2 ? 0x80 : i - at == 3 ? 0x800 : 0x10000)))
            return at;
    }
    return n;
}

int bpe_encode(const Bpe *b, const char *text, size_t n, uint32_t **tokens, size_t *count,
               FgError *err) {
    size_t bad = first_bad_utf8(text, n);
    if (bad < n) return fg_fail(err, FG_ERR_INPUT, "tokenize: the text is not UTF-8 at byte %zu", bad);
    Out o = {*tokens, *count, *count, NULL, 0};
    int rc = FG_OK;
    for (size_t at = 0; !rc && at < n;) {
        int k = 0;
        size_t next = next_added(b, text, n, at, &k);
        rc = stretch(b, text + at, next - at, at, &o, err);
        if (!rc && next < n) {
            if (reserve(&o, 1, 0)) rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
            else o.ids[o.n++] = (uint32_t)b->added[k].id;
        }
        at = next < n ? next + b->added[k].len : n;
    }
    *tokens = o.ids;
    *count = o.n;
    free(o.sym);
    return rc;
}
