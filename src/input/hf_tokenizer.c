// Hugging Face's tokenizer.json into the byte-level BPE's tables (hf_tokenizer.h).
#include "hf_tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "json_scan.h"

typedef struct {
    const char *path;
    char *text;     // the file
    char *scratch;  // room for any of its strings, unescaped
    Bpe *b;
    FgError *err;
} Loader;

static int bad(Loader *l, const char *what) {
    return fg_fail(l->err, FG_ERR_INPUT, "%s: %s", l->path, what);
}

// The string value at v into scratch ("" when v is not a string).
static const char *str(Loader *l, const char *v) {
    long n = v ? json_string(v, l->scratch, NULL) : -1;
    l->scratch[n < 0 ? 0 : n] = '\0';
    return l->scratch;
}

static int is_true(const char *v) { return v && !strncmp(json_ws(v), "true", 4); }

static int count(const char *container) {
    const char *it = container, *key;
    int n = 0;
    while (it && json_next(&it, &key) == 1) it = json_skip(it), n++;
    return it ? n : -1;
}

// model: a BPE over GPT-2's byte alphabet, no byte fallback, no sub-word affixes.
static int check_model(Loader *l, const char *model) {
    const char *type = json_get(model, "type");
    if (!json_is(type, "BPE"))
        return fg_fail(l->err, FG_ERR_INPUT, "%s: model.type is '%s': fgpipe reads byte-level BPE "
                       "tokenizers only (GPT-2, Llama 3, Qwen3), not WordPiece, Unigram or WordLevel",
                       l->path, str(l, type));
    if (is_true(json_get(model, "byte_fallback")))
        return bad(l, "model.byte_fallback is true: a SentencePiece-style BPE (Llama 2, Mistral), "
                      "not a byte-level one");
    const char *affix[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++)
        if (str(l, json_get(model, affix[i]))[0])
            return fg_fail(l->err, FG_ERR_INPUT, "%s: model.%s '%s' is not supported", l->path,
                           affix[i], l->scratch);
    return FG_OK;
}

// One pre-tokenizer: a ByteLevel (its own GPT-2 regex when use_regex, the default) or a Split
// by a regex whose matches and gaps are pieces ("Isolated"). *pattern: the regex (in scratch2).
static int pre_tokenizer(Loader *l, const char *p, char *pattern, int *byte_level) {
    const char *type = json_get(p, "type");
    if (json_is(type, "ByteLevel")) {
        if (is_true(json_get(p, "add_prefix_space")))
            return bad(l, "pre_tokenizer ByteLevel with add_prefix_space is not supported");
        const char *regex = json_get(p, "use_regex");
        if (!regex || is_true(regex)) {
            if (pattern[0]) return bad(l, "pre_tokenizer: a Split and a ByteLevel with use_regex: two regexes");
            strcpy(pattern, bpe_gpt2_pattern);
        }
        *byte_level = 1;
        return FG_OK;
    }
    if (!json_is(type, "Split"))
        return fg_fail(l->err, FG_ERR_INPUT, "%s: pre_tokenizer type '%s' is not supported (Split "
                       "by a regex and ByteLevel are)", l->path, str(l, type));
    const char *regex = json_get(json_get(p, "pattern"), "Regex");
    if (!regex) return bad(l, "pre_tokenizer Split: its pattern is not a {\"Regex\": ...}");
    if (!json_is(json_get(p, "behavior"), "Isolated") || is_true(json_get(p, "invert")))
        return bad(l, "pre_tokenizer Split: only behavior Isolated, not inverted, is supported");
    if (pattern[0] || *byte_level) return bad(l, "pre_tokenizer: one Split, before the ByteLevel");
    strcpy(pattern, str(l, regex));
    return FG_OK;
}

static int load_pre_tokenizer(Loader *l, const char *root) {
    const char *p = json_get(root, "pre_tokenizer"), *norm = json_get(root, "normalizer"), *key;
    char *pattern = calloc(strlen(l->text) + strlen(bpe_gpt2_pattern) + 1, 1);
    int byte_level = 0, rc = pattern ? FG_OK : bad(l, "out of memory");
    if (!rc && json_is(json_get(p, "type"), "Sequence")) {
        const char *it = json_get(p, "pretokenizers");
        int more = it ? 1 : -1;
        while (!rc && it && (more = json_next(&it, &key)) == 1)
            rc = pre_tokenizer(l, it, pattern, &byte_level), it = json_skip(it);
        if (!rc && more < 0) rc = bad(l, "pre_tokenizer: malformed pretokenizers list");
    } else if (!rc && p && *json_ws(p) == '{') {
        rc = pre_tokenizer(l, p, pattern, &byte_level);
    }
    if (!rc && !byte_level) rc = bad(l, "no ByteLevel pre_tokenizer: not a byte-level BPE");
    if (!rc) rc = bpe_set_pattern(l->b, pattern, l->err);
    free(pattern);
    const char *ntype = json_get(norm, "type");
    l->b->nfc = json_is(ntype, "NFC");
    if (!rc && ntype && !l->b->nfc)
        rc = fg_fail(l->err, FG_ERR_INPUT, "%s: normalizer type '%s' is not supported (none or NFC "
                     "are)", l->path, str(l, ntype));
    return rc;
}

static int load_vocab(Loader *l, const char *vocab) {
    const char *it = vocab, *key;
    int more = vocab && *json_ws(vocab) == '{' ? 1 : -1;
    while (more == 1 && (more = json_next(&it, &key)) == 1) {
        long len = key ? json_string(key, l->scratch, NULL) : -1;
        char *end;
        long id = strtol(it, &end, 10);
        int added = len >= 0 && end > it && id <= 1 << 30 ? bpe_add_token(l->b, l->scratch, (size_t)len, (int)id) : -3;
        if (added)
            return fg_fail(l->err, FG_ERR_INPUT, "%s: model.vocab entry near byte %ld: %s", l->path,
                           (long)(it - l->text), added == -1 ? "not in GPT-2's byte alphabet"
                           : added == -2 ? "its id is negative or taken twice" : "not \"token\": id");
        it = end;
    }
    return more < 0 ? bad(l, "model.vocab is not a JSON object of \"token\": id") : FG_OK;
}

// merges: ["a b", ...] (older files) or [["a", "b"], ...]; rank = position.
static int load_merges(Loader *l, const char *merges) {
    const char *it = merges, *key;
    int more = merges && *json_ws(merges) == '[' ? 1 : -1;
    while (more == 1 && (more = json_next(&it, &key)) == 1) {
        char *s = l->scratch, *right = NULL;
        long n = -1, nr = -1;
        const char *pair = json_ws(it), *second;
        if (*pair == '"' && (n = json_string(pair, s, NULL)) >= 0) {
            s[n] = '\0';
            if ((right = strchr(s, ' '))) nr = n - (right - s) - 1, n = right - s, right++;
        } else if (*pair == '[' && json_next(&pair, &key) == 1 && (n = json_string(pair, s, &second)) >= 0 &&
                   json_next(&second, &key) == 1) {
            right = s + n, nr = json_string(second, right, NULL);
        }
        if (nr < 0 || bpe_add_merge(l->b, s, (size_t)n, right, (size_t)nr))
            return fg_fail(l->err, FG_ERR_INPUT, "%s: merge %d is not two tokens of GPT-2's byte "
                           "alphabet", l->path, l->b->n_merges + 1);
        it = json_skip(it);
    }
    return more < 0 ? bad(l, "model.merges is not a JSON list") : FG_OK;
}

static int load_added(Loader *l, const char *added) {
    const char *it = added, *key;
    int more = added ? 1 : 0;
    while (more == 1 && (more = json_next(&it, &key)) == 1) {
        const char *flags[] = {"lstrip", "rstrip", "single_word"};
        for (int i = 0; i < 3; i++)
            if (is_true(json_get(it, flags[i])))
                return fg_fail(l->err, FG_ERR_INPUT, "%s: added token '%s' has %s: not supported",
                               l->path, str(l, json_get(it, "content")), flags[i]);
        const char *idv = json_get(it, "id"), *content = json_get(it, "content");
        long n = content ? json_string(content, l->scratch, NULL) : -1;
        long id = idv ? strtol(idv, NULL, 10) : -1;
        if (n <= 0 || id < 0 || id > 1 << 30 || bpe_add_special(l->b, l->scratch, (size_t)n, (int)id))
            return fg_fail(l->err, FG_ERR_INPUT, "%s: added token near byte %ld: needs a content and "
                           "an id not taken by another token", l->path, (long)(it - l->text));
        it = json_skip(it);
    }
    return more < 0 ? bad(l, "added_tokens is not a JSON list") : FG_OK;
}

int hf_tokenizer_load(const char *path, Bpe **out, FgError *err) {
    size_t n;
    Loader l = {.path = path, .err = err};
    *out = NULL;
    l.text = fg_read_file("the tokenizer", path, " (launch/hf-tokenizer.sh fetches Llama 3's and "
                          "Qwen3's tokenizer.json)", &n, err);
    if (!l.text) return FG_ERR_INPUT;
    const char *model = json_get(l.text, "model");
    int rc = (l.scratch = malloc(n + 1)) ? FG_OK : bad(&l, "out of memory");
    if (!rc && !model) rc = bad(&l, "no \"model\" object: not a Hugging Face tokenizer.json");
    int n_vocab = model ? count(json_get(model, "vocab")) : -1;
    int n_merges = model ? count(json_get(model, "merges")) : -1;
    int n_added = count(json_get(l.text, "added_tokens"));
    if (!rc) rc = check_model(&l, model);
    if (!rc && (n_vocab < 0 || n_merges < 0))
        rc = bad(&l, "model.vocab or model.merges is missing or malformed");
    if (!rc && !(l.b = bpe_new((size_t)n_vocab + (size_t)FG_MAX(n_added, 0), (size_t)n_merges)))
        rc = bad(&l, "out of memory");
    if (!rc) l.b->ignore_merges = is_true(json_get(model, "ignore_merges"));
    if (!rc) rc = load_vocab(&l, json_get(model, "vocab"));
    if (!rc) rc = load_merges(&l, json_get(model, "merges"));
    if (!rc) rc = load_added(&l, json_get(l.text, "added_tokens"));
    if (!rc) rc = load_pre_tokenizer(&l, l.text);
    free(l.scratch);
    fg_free(l.text);
    if (rc) bpe_free(l.b), l.b = NULL;
    *out = l.b;
    return rc;
}
