// GPT-2's byte-level BPE (bpe.h). Tables are open-addressing hash maps over byte strings: the
// vocabulary (token bytes -> id) and the merge ranks (left bytes, right bytes -> rank).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "bpe.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

// GPT-2's pre-tokenizer (encoder.py): contractions, letters, digits, other symbols, spaces.
static const char *const kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct {
    const char *a, *b;  // a token's bytes (b NULL), or a merge's left and right
    size_t a_len, b_len;
    int value;          // id or rank; -1: empty slot
} Entry;

typedef struct {
    Entry *slots;
    size_t mask;
} Map;

struct Bpe {
    Map vocab, ranks;
    char **token_bytes;  // [n_tokens]: each id's bytes (owned), lengths in token_len
    size_t *token_len;
    int n_tokens;
    int byte_of_code[324];  // GPT-2's alphabet: code point -> byte (-1: not in it)
    pcre2_code *pattern;
    pcre2_match_data *match;
};

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return (h ^ n) * 1099511628211ull;
}

static int map_init(Map *m, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].value = -1;
    m->mask = cap - 1;
    return 0;
}

static Entry *map_slot(const Map *m, const char *a, size_t a_len, const char *b, size_t b_len) {
    uint64_t h = hash_bytes(hash_bytes(14695981039346656037ull, a, a_len), b ? b : "", b_len);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        Entry *e = &m->slots[i];
        if (e->value < 0) return e;
        if (e->a_len == a_len && e->b_len == b_len && !memcmp(e->a, a, a_len) &&
            (!b_len || !memcmp(e->b, b, b_len)))
            return e;
    }
}

static int map_get(const Map *m, const char *a, size_t a_len, const char *b, size_t b_len) {
    return map_slot(m, a, a_len, b, b_len)->value;
}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
static void init_alphabet(Bpe *b) {
    int code_of_byte[256], n = 0;
    for (int c = 0; c < 256; c++) {
        int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
        code_of_byte[c] = printable ? c : 256 + n++;
    }
    for (int i = 0; i < 324; i++) b->byte_of_code[i] = -1;
    for (int c = 0; c < 256; c++) b->byte_of_code[code_of_byte[c]] = c;
}

// One UTF-8 code point of s[*i..n), advancing *i; -1 when malformed.
static int next_code_point(const char *s, size_t n, size_t *i) {
    unsigned char c = (unsigned char)s[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n) return -1;
    int cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) cp = (cp << 6) | ((unsigned char)s[*i + k] & 0x3F);
    *i += (size_t)len;
    return cp;
}

// A token string of GPT-2's alphabet (UTF-8) as the raw bytes it stands for, into out (its
// length returned); -1 when a character is outside the alphabet.
static long alphabet_to_bytes(const Bpe *b, const char *s, size_t n, char *out) {
    size_t i = 0, k = 0;
    while (i < n) {
        int cp = next_code_point(s, n, &i);
        if (cp < 0 || cp >= 324 || b->byte_of_code[cp] < 0) return -1;
        out[k++] = (char)b->byte_of_code[cp];
    }
    return (long)k;
}

// The next JSON string of encoder.json at *p (unescaped in place into dst), advancing *p.
static long json_string(char **p, char *dst) {
    char *s = *p, *d = dst;
    if (*s++ != '"') return -1;
    while (*s && *s != '"') {
        if (*s != '\\') { *d++ = *s++; continue; }
        s++;
        if (*s == 'u') {
            unsigned cp = (unsigned)strtoul((char[5]){s[1], s[2], s[3], s[4], 0}, NULL, 16);
            s += 5;
            if (cp < 0x80) *d++ = (char)cp;
            else if (cp < 0x800) *d++ = (char)(0xC0 | cp >> 6), *d++ = (char)(0x80 | (cp & 0x3F));
            else *d++ = (char)(0xE0 | cp >> 12), *d++ = (char)(0x80 | ((cp >> 6) & 0x3F)),
                 *d++ = (char)(0x80 | (cp & 0x3F));
        } else {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = strchr(from, *s);
            if (!at || !*s) return -1;
            *d++ = to[at - from], s++;
        }
    }
    if (*s != '"') return -1;
    *p = s + 1;
    return d - dst;
}

static int load_vocab(Bpe *b, char *json, const char *path, FgError *err) {
    size_t n_entries = 0;
    for (char *s = json; *s; s++) n_entries += *s == ':';
    b->token_bytes = calloc(n_entries, sizeof *b->token_bytes);
    b->token_len = calloc(n_entries, sizeof *b->token_len);
    if (!b->token_bytes || !b->token_len || map_init(&b->vocab, n_entries))
        return fg_fail(err, FG_ERR_INTERNAL, "%s: out of memory", path);
    char *p = strchr(json, '{'), *key = malloc(strlen(json) + 1);
    int rc = FG_OK;
    for (p = p ? p + 1 : NULL; p && !rc;) {
        while (*p == ' ' || *p == ',' || *p == '\n') p++;
        if (*p == '}') break;
        long key_len = json_string(&p, key), bytes_len = -1;
        char *bytes = key_len >= 0 ? malloc((size_t)key_len + 1) : NULL;
        if (bytes) bytes_len = alphabet_to_bytes(b, key, (size_t)key_len, bytes);
        while (*p == ' ' || *p == ':') p++;
        char *end;
        long id = strtol(p, &end, 10);
        if (bytes_len < 0 || end == p || id < 0 || (size_t)id >= n_entries || b->token_bytes[id]) {
            free(bytes);
            rc = fg_fail(err, FG_ERR_INPUT, "%s: malformed entry near byte %ld (expected \"token\": "
                         "id, ids below %zu, each once)", path, (long)(p - json), n_entries);
            break;
        }
        p = end;
        b->token_bytes[id] = bytes, b->token_len[id] = (size_t)bytes_len;
        *map_slot(&b->vocab, bytes, (size_t)bytes_len, NULL, 0) =
            (Entry){bytes, NULL, (size_t)bytes_len, 0, (int)id};
        b->n_tokens = FG_MAX(b->n_tokens, (int)id + 1);
    }
    free(key);
    if (!rc && !p) rc = fg_fail(err, FG_ERR_INPUT, "%s: not a JSON object", path);
    return rc;
}

// vocab.bpe: a "#version" line, then one merge "left right" per line, by rank.
static int load_merges(Bpe *b, char *text, const char *path, FgError *err) {
    size_t lines = 0;
    for (char *s = text; *s; s++) lines += *s == '\n';
    if (map_init(&b->ranks, lines + 1)) return fg_fail(err, FG_ERR_INTERNAL, "%s: out of memory", path);
    int rank = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!line[0] || (line == text && !strncmp(line, "#version", 8))) continue;
        char *space = strchr(line, ' ');
        long left = -1, right = -1;
        char *l = NULL, *r = NULL;
        if (space) {
            l = malloc(strlen(line) + 1), r = l + (space - line);
            left = alphabet_to_bytes(b, line, (size_t)(space - line), l);
            right = alphabet_to_bytes(b, space + 1, strlen(space + 1), r);
        }
        if (left <= 0 || right <= 0) {
            free(l);
            return fg_fail(err, FG_ERR_INPUT, "%s: merge %d is not two tokens of GPT-2's alphabet: '%.40s'",
                           path, rank + 1, line);
        }
        Entry *e = map_slot(&b->ranks, l, (size_t)left, r, (size_t)right);
        if (e->value < 0) *e = (Entry){l, r, (size_t)left, (size_t)right, rank};
        else free(l);
        rank++;
    }
    return FG_OK;
}

// One piece of the pre-tokenizer's split: its bytes merged by rank, lowest first, each pass
// merging every occurrence of the pair left to right (encoder.py's bpe), then looked up.
typedef struct {
    const char *s;
    size_t len;
} Symbol;

static int encode_piece(const Bpe *b, const char *s, size_t n, Symbol *sym, uint16_t *out) {
    size_t count = n;
    for (size_t i = 0; i < n; i++) sym[i] = (Symbol){s + i, 1};
    while (count > 1) {
        int best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < count; i++) {
            int r = map_get(&b->ranks, sym[i].s, sym[i].len, sym[i + 1].s, sym[i + 1].len);
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
        int id = map_get(&b->vocab, sym[i].s, sym[i].len, NULL, 0);
        if (id < 0) return -1;
        out[i] = (uint16_t)id;
    }
    return (int)count;
}

// The offset of the first malformed UTF-8 sequence of s[0..n) (n if none).
static size_t first_bad_utf8(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t at = i;
        int cp = next_code_point(s, n, &i);
        for (size_t k = at + 1; cp >= 0 && k < i; k++)
            if (((unsigned char)s[k] & 0xC0) != 0x80) cp = -1;
        if (cp < 0) return at;
    }
    return n;
}

int bpe_encode(const Bpe *b, const char *text, size_t n, uint16_t **tokens, size_t *count,
               FgError *err) {
    // Scratch for one piece (a word, a number, a run of spaces), grown to the longest.
    size_t piece_cap = 64;
    Symbol *sym = malloc(piece_cap * sizeof *sym);
    uint16_t *piece = malloc(piece_cap * sizeof *piece);
    int rc = sym && piece ? FG_OK : fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    size_t cap = *count + n / 2 + 16, at = 0;
    uint16_t *out = rc ? NULL : realloc(*tokens, cap * sizeof *out);
    if (!rc && !out) rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    while (!rc && at < n) {
        // The first match checks that all of the text is UTF-8; the others need not again.
        int m = pcre2_match(b->pattern, (PCRE2_SPTR)text, n, at, at ? PCRE2_NO_UTF_CHECK : 0,
                            b->match, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            rc = m <= PCRE2_ERROR_UTF8_ERR1 && m >= PCRE2_ERROR_UTF8_ERR21
                     ? fg_fail(err, FG_ERR_INPUT, "tokenize: the text is not UTF-8 at byte %zu",
                               first_bad_utf8(text, n))
                     : fg_fail(err, FG_ERR_INTERNAL, "tokenize: pattern match failed (%d)", m);
            break;
        }
        PCRE2_SIZE *span = pcre2_get_ovector_pointer(b->match);
        size_t len = span[1] - span[0];
        if (len > piece_cap) {
            Symbol *s2 = realloc(sym, len * sizeof *sym);
            uint16_t *p2 = s2 ? realloc(piece, len * sizeof *piece) : NULL;
            if (s2) sym = s2;
            if (p2) piece = p2;
            if (!s2 || !p2) { rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory"); break; }
            piece_cap = len;
        }
        int k = encode_piece(b, text + span[0], len, sym, piece);
        if (k < 0) {
            rc = fg_fail(err, FG_ERR_INPUT, "tokenize: a piece at byte %zu has no token (not GPT-2's "
                         "vocabulary?)", (size_t)span[0]);
            break;
        }
        if (*count + (size_t)k > cap) {
            uint16_t *grown = realloc(out, (cap = 2 * cap + (size_t)k) * sizeof *out);
            if (!grown) { rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory"); break; }
            out = grown;
        }
        memcpy(out + *count, piece, (size_t)k * sizeof *out);
        *count += (size_t)k;
        at = span[1] > span[0] ? span[1] : span[1] + 1;
    }
    if (out) *tokens = out;
    free(sym);
    free(piece);
    return rc;
}

const char *bpe_token_bytes(const Bpe *b, int token, size_t *len) {
    int known = token >= 0 && token < b->n_tokens && b->token_bytes[token];
    *len = known ? b->token_len[token] : 0;
    return known ? b->token_bytes[token] : NULL;
}

int bpe_vocab_size(const Bpe *b) { return b->n_tokens; }

void bpe_free(Bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->n_tokens; i++) free(b->token_bytes[i]);
    for (size_t i = 0; b->ranks.slots && i <= b->ranks.mask; i++)
        if (b->ranks.slots[i].value >= 0) free((char *)b->ranks.slots[i].a);
    free(b->token_bytes);
    free(b->token_len);
    free(b->vocab.slots);
    free(b->ranks.slots);
    pcre2_match_data_free(b->match);
    pcre2_code_free(b->pattern);
    free(b);
}

int bpe_load(const char *encoder_json, const char *vocab_bpe, Bpe **out, FgError *err) {
    const char *hint = "(launch/gpt2-vocab.sh fetches GPT-2's encoder.json and vocab.bpe)";
    Bpe *b = calloc(1, sizeof *b);
    size_t n;
    char *json = NULL, *merges = NULL;
    int rc = b ? FG_OK : fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    if (!rc) init_alphabet(b);
    if (!rc && !(json = fg_read_file("the BPE vocabulary", encoder_json, hint, &n, err))) rc = FG_ERR_INPUT;
    if (!rc && !(merges = fg_read_file("the BPE merges", vocab_bpe, hint, &n, err))) rc = FG_ERR_INPUT;
    if (!rc) rc = load_vocab(b, json, encoder_json, err);
    if (!rc) rc = load_merges(b, merges, vocab_bpe, err);
    int code;
    PCRE2_SIZE where;
    if (!rc && !(b->pattern = pcre2_compile((PCRE2_SPTR)kPattern, PCRE2_ZERO_TERMINATED,
                                            PCRE2_UTF | PCRE2_UCP, &code, &where, NULL)))
        rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: the pre-tokenizer pattern does not compile (%d)", code);
    if (!rc && !(b->match = pcre2_match_data_create_from_pattern(b->pattern, NULL)))
        rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    fg_free(json);
    fg_free(merges);
    if (rc) bpe_free(b), b = NULL;
    *out = b;
    return rc;
}
