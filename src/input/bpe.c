// Byte-level BPE (bpe.h, bpe_internal.h). Tables are open-addressing hash maps over byte
// strings: the vocabulary (token bytes -> id) and the merge ranks (left bytes, right bytes ->
// rank). GPT-2's files are read here; Hugging Face's tokenizer.json in hf_tokenizer.c.
#include "bpe_internal.h"

#include <stdlib.h>
#include <string.h>

#include "json_scan.h"

// GPT-2's pre-tokenizer (encoder.py): contractions, letters, digits, other symbols, spaces.
const char *const bpe_gpt2_pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

// The slot of a key, or the empty one where it goes. Maps are sized for their entries up
// front (bpe_new), at most half full.
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

int bpe_map_get(const Map *m, const char *a, size_t a_len, const char *b, size_t b_len) {
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

int bpe_next_code_point(const char *s, size_t n, size_t *i) {
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
        int cp = bpe_next_code_point(s, n, &i);
        if (cp < 0 || cp >= 324 || b->byte_of_code[cp] < 0) return -1;
        out[k++] = (char)b->byte_of_code[cp];
    }
    return (long)k;
}

Bpe *bpe_new(size_t n_tokens, size_t n_merges) {
    Bpe *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    init_alphabet(b);
    if (map_init(&b->vocab, n_tokens) || map_init(&b->ranks, n_merges)) bpe_free(b), b = NULL;
    return b;
}

int bpe_set_pattern(Bpe *b, const char *pattern, FgError *err) {
    int code;
    PCRE2_SIZE where;
    b->pattern = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                               &code, &where, NULL);
    if (!b->pattern) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return fg_fail(err, FG_ERR_INPUT, "tokenize: the pre-tokenizer pattern does not compile at "
                       "offset %zu (%s): %.200s", (size_t)where, (char *)msg, pattern);
    }
    if (!(b->match = pcre2_match_data_create_from_pattern(b->pattern, NULL)))
        return fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    return FG_OK;
}

// Room for id in token_bytes; -1 when out of memory.
static int reserve_id(Bpe *b, int id) {
    if (id < b->cap_tokens) return 0;
    int cap = FG_MAX(id + 1, 2 * b->cap_tokens);
    char **bytes = realloc(b->token_bytes, (size_t)cap * sizeof *bytes);
    if (bytes) b->token_bytes = bytes;
    size_t *len = bytes ? realloc(b->token_len, (size_t)cap * sizeof *len) : NULL;
    if (!len) return -1;
    b->token_len = len;
    for (int i = b->cap_tokens; i < cap; i++) b->token_bytes[i] = NULL, b->token_len[i] = 0;
    b->cap_tokens = cap;
    return 0;
}

int bpe_add_token(Bpe *b, const char *alphabet_text, size_t len, int id) {
    if (id < 0 || reserve_id(b, id) || b->token_bytes[id]) return -2;
    char *bytes = malloc(len + 1);
    long n = bytes ? alphabet_to_bytes(b, alphabet_text, len, bytes) : -1;
    Entry *e = n > 0 ? map_slot(&b->vocab, bytes, (size_t)n, NULL, 0) : NULL;
    if (!e) return free(bytes), -1;
    b->token_bytes[id] = bytes, b->token_len[id] = (size_t)n;
    if (e->value < 0) *e = (Entry){bytes, NULL, (size_t)n, 0, id};  // the first id of its bytes
    b->n_tokens = FG_MAX(b->n_tokens, id + 1);
    return 0;
}

int bpe_add_merge(Bpe *b, const char *left, size_t left_len, const char *right, size_t right_len) {
    char *l = malloc(left_len + right_len + 1);
    long nl = l ? alphabet_to_bytes(b, left, left_len, l) : -1;
    long nr = nl > 0 ? alphabet_to_bytes(b, right, right_len, l + nl) : -1;
    if (nr <= 0) return free(l), -1;
    Entry *e = map_slot(&b->ranks, l, (size_t)nl, l + nl, (size_t)nr);
    if (e->value < 0) *e = (Entry){l, l + nl, (size_t)nl, (size_t)nr, b->n_merges};
    else free(l);  // a repeated merge keeps its first (lowest) rank
    b->n_merges++;
    return 0;
}

int bpe_add_special(Bpe *b, const char *bytes, size_t len, int id) {
    if (id < 0 || !len || reserve_id(b, id)) return -2;
    if (b->token_bytes[id] && (b->token_len[id] != len || memcmp(b->token_bytes[id], bytes, len)))
        return -2;
    if (!b->token_bytes[id]) {
        if (!(b->token_bytes[id] = malloc(len))) return -2;
        memcpy(b->token_bytes[id], bytes, len), b->token_len[id] = len;
    }
    AddedToken *grown = realloc(b->added, (size_t)(b->n_added + 1) * sizeof *grown);
    if (!grown) return -2;
    b->added = grown;
    int at = b->n_added++;  // insertion keeps them longest first: the longest match wins
    for (; at > 0 && b->added[at - 1].len < len; at--) b->added[at] = b->added[at - 1];
    b->added[at] = (AddedToken){b->token_bytes[id], len, id};
    b->added_first[(unsigned char)bytes[0]] = 1;
    b->n_tokens = FG_MAX(b->n_tokens, id + 1);
    return 0;
}

// encoder.json: {"token": id, ...} with tokens in GPT-2's alphabet.
static int load_vocab(Bpe *b, const char *json, const char *path, FgError *err) {
    char *key = malloc(strlen(json) + 1);
    const char *it = json_ws(json), *k;
    int more = key && *it == '{' ? 1 : -1, rc = FG_OK;
    while (!rc && (more = json_next(&it, &k)) == 1) {
        long key_len = k ? json_string(k, key, NULL) : -1;
        char *end;
        long id = strtol(it, &end, 10);
        if (key_len < 0 || end == it || id > 1 << 30 || bpe_add_token(b, key, (size_t)key_len, (int)id))
            rc = fg_fail(err, FG_ERR_INPUT, "%s: malformed entry near byte %ld (expected \"token\": "
                         "id, tokens in GPT-2's byte alphabet, each id once)", path, (long)(it - json));
        it = end;
    }
    free(key);
    if (!rc && more < 0) rc = fg_fail(err, FG_ERR_INPUT, "%s: not a JSON object", path);
    return rc;
}

// vocab.bpe: a "#version" line, then one merge "left right" per line, by rank.
static int load_merges(Bpe *b, char *text, const char *path, FgError *err) {
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (!line[0] || (line == text && !strncmp(line, "#version", 8))) continue;
        char *space = strchr(line, ' ');
        if (!space || bpe_add_merge(b, line, (size_t)(space - line), space + 1, strlen(space + 1)))
            return fg_fail(err, FG_ERR_INPUT, "%s: merge %d is not two tokens of GPT-2's alphabet: '%.40s'",
                           path, b->n_merges + 1, line);
    }
    return FG_OK;
}

const char *bpe_token_bytes(const Bpe *b, int token, size_t *len) {
    int known = token >= 0 && token < b->n_tokens && b->token_bytes[token];
    *len = known ? b->token_len[token] : 0;
    return known ? b->token_bytes[token] : NULL;
}

int bpe_vocab_size(const Bpe *b) { return b->n_tokens; }

void bpe_free(Bpe *b) {
    if (!b) return;
    for (int i = 0; i < b->cap_tokens; i++) free(b->token_bytes[i]);
    for (size_t i = 0; b->ranks.slots && i <= b->ranks.mask; i++)
        if (b->ranks.slots[i].value >= 0) free((char *)b->ranks.slots[i].a);
    free(b->token_bytes);
    free(b->token_len);
    free(b->vocab.slots);
    free(b->ranks.slots);
    free(b->added);
    pcre2_match_data_free(b->match);
    pcre2_code_free(b->pattern);
    free(b);
}

static size_t count_char(const char *s, char c) {
    size_t n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

int bpe_load(const char *encoder_json, const char *vocab_bpe, Bpe **out, FgError *err) {
    const char *hint = "(launch/gpt2-vocab.sh fetches GPT-2's encoder.json and vocab.bpe)";
    size_t n;
    Bpe *b = NULL;
    char *json = fg_read_file("the BPE vocabulary", encoder_json, hint, &n, err), *merges = NULL;
    int rc = json ? FG_OK : FG_ERR_INPUT;
    if (!rc && !(merges = fg_read_file("the BPE merges", vocab_bpe, hint, &n, err))) rc = FG_ERR_INPUT;
    if (!rc && !(b = bpe_new(count_char(json, ':'), count_char(merges, '\n') + 1)))
        rc = fg_fail(err, FG_ERR_INTERNAL, "tokenize: out of memory");
    if (!rc) rc = load_vocab(b, json, encoder_json, err);
    if (!rc) rc = load_merges(b, merges, vocab_bpe, err);
    if (!rc) rc = bpe_set_pattern(b, bpe_gpt2_pattern, err);
    fg_free(json);
    fg_free(merges);
    if (rc) bpe_free(b), b = NULL;
    *out = b;
    return rc;
}
