// The JSON cursor (json_scan.h).
#include "json_scan.h"

#include <stdlib.h>
#include <string.h>

const char *json_ws(const char *p) {
    while (p && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

static const char *skip_string(const char *p) {
    if (*p++ != '"') return NULL;
    for (; *p && *p != '"'; p++)
        if (*p == '\\' && !*++p) return NULL;
    return *p == '"' ? p + 1 : NULL;
}

const char *json_skip(const char *p) {
    p = json_ws(p);
    if (!p || !*p) return NULL;
    if (*p == '"') return skip_string(p);
    if (*p == '{' || *p == '[') {
        const char *it = p, *key;
        int more;
        while ((more = json_next(&it, &key)) == 1) it = json_skip(it);
        return more == 0 ? it : NULL;
    }
    const char *q = p;  // a number, true, false or null
    while (*q && !strchr(",}] \n\r\t", *q)) q++;
    return q > p ? q : NULL;
}

int json_next(const char **it, const char **key) {
    const char *p = json_ws(*it);
    if (!p) return -1;
    char open = *p;
    if (open == '{' || open == '[') {  // the first call: at the bracket
        p = json_ws(p + 1);
        if (*p == (open == '{' ? '}' : ']')) return *it = p + 1, 0;
    } else if (*p == ',') {
        p = json_ws(p + 1);
    } else if (*p == '}' || *p == ']') {
        return *it = p + 1, 0;
    } else {
        return -1;
    }
    *key = NULL;
    if (*p == '"') {  // "key": value in an object (an array's string element has no colon)
        const char *after = json_ws(skip_string(p));
        if (after && *after == ':') *key = p, p = json_ws(after + 1);
    }
    *it = p;
    return *p ? 1 : -1;
}

const char *json_get(const char *p, const char *key) {
    const char *it = json_ws(p), *k;
    if (!it || *it != '{') return NULL;
    size_t len = strlen(key);
    while (json_next(&it, &k) == 1) {
        if (k && !strncmp(k + 1, key, len) && k[len + 1] == '"') return it;
        if (!(it = json_skip(it))) return NULL;
    }
    return NULL;
}

int json_is(const char *p, const char *s) {
    size_t len = strlen(s);
    p = json_ws(p);
    return p && *p == '"' && !strncmp(p + 1, s, len) && p[len + 1] == '"';
}

static int put_utf8(char *d, unsigned cp) {
    if (cp < 0x80) return d[0] = (char)cp, 1;
    if (cp < 0x800) return d[0] = (char)(0xC0 | cp >> 6), d[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return d[0] = (char)(0xE0 | cp >> 12), d[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
               d[2] = (char)(0x80 | (cp & 0x3F)), 3;
    return d[0] = (char)(0xF0 | cp >> 18), d[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
           d[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), d[3] = (char)(0x80 | (cp & 0x3F)), 4;
}

static long hex4(const char *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

long json_string(const char *p, char *dst, const char **end) {
    const char *s = json_ws(p);
    char *d = dst;
    if (!s || *s++ != '"') return -1;
    while (*s && *s != '"') {
        if (*s != '\\') { *d++ = *s++; continue; }
        s++;
        if (*s == 'u') {
            long cp = hex4(s + 1);
            s += 5;
            if (cp >= 0xD800 && cp < 0xDC00 && s[0] == '\\' && s[1] == 'u') {  // a surrogate pair
                long low = hex4(s + 2);
                if (low >= 0xDC00 && low < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00), s += 6;
            }
            if (cp < 0) return -1;
            d += put_utf8(d, (unsigned)cp);
        } else {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t", *at = *s ? strchr(from, *s) : NULL;
            if (!at) return -1;
            *d++ = to[at - from], s++;
        }
    }
    if (*s != '"') return -1;
    if (end) *end = s + 1;
    return d - dst;
}
