// Canonical composition (unicode_nfc.h), over code points, with binary searches in the tables.
#include "unicode_nfc.h"

#include <stdlib.h>

#include "bpe_internal.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

int unicode_is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80) return 0;
    return 1;
}

// The row of `key` in a table sorted by its first `cols` columns (rows of `width` words); -1.
static long find(const uint32_t *table, size_t rows, int width, int cols, const uint32_t *key) {
    size_t lo = 0, hi = rows;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *r = table + mid * (size_t)width;
        int cmp = r[0] != key[0] ? (r[0] < key[0] ? -1 : 1) : cols < 2 || r[1] == key[1] ? 0 : r[1] < key[1] ? -1 : 1;
        if (!cmp) return (long)mid;
        if (cmp < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

static int ccc(uint32_t cp) {
    long r = find(&unicode_ccc[0][0], unicode_n_ccc, 2, 1, &cp);
    return r < 0 ? 0 : (int)unicode_ccc[r][1];
}

// cp's full canonical decomposition appended at out; the count.
static size_t decompose(uint32_t cp, uint32_t *out) {
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        out[0] = L_BASE + s / N_COUNT, out[1] = V_BASE + s % N_COUNT / T_COUNT;
        return t ? (out[2] = T_BASE + t, 3) : 2;
    }
    long r = find(&unicode_decomp[0][0], unicode_n_decomp, UNICODE_NFC_WIDTH + 1, 1, &cp);
    if (r < 0) return out[0] = cp, 1;
    size_t k = 0;
    while (k < UNICODE_NFC_WIDTH && unicode_decomp[r][k + 1]) out[k] = unicode_decomp[r][k + 1], k++;
    return k;
}

// The primary composite of (a, b), 0 when none.
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    uint32_t key[2] = {a, b};
    long r = find(&unicode_compose[0][0], unicode_n_compose, 3, 2, key);
    return r < 0 ? 0 : unicode_compose[r][2];
}

// Canonical order (a stable sort of each run of marks by class), then composition: a mark
// joins the last starter when no mark between them has a class as high or is a starter.
static size_t order_and_compose(uint32_t *cp, size_t n) {
    for (size_t i = 1; i < n; i++) {
        int c = ccc(cp[i]);
        for (size_t j = i; c && j > 0 && ccc(cp[j - 1]) > c; j--) {
            uint32_t t = cp[j]; cp[j] = cp[j - 1], cp[j - 1] = t;
        }
    }
    size_t out = 0, starter = 0;
    int last = 256;  // the class of the last mark kept after the starter; 0: none; 256: no starter yet
    for (size_t i = 0; i < n; i++) {
        int c = ccc(cp[i]);
        uint32_t both = last < c || last == 0 ? compose(cp[starter], cp[i]) : 0;
        if (both) { cp[starter] = both; continue; }
        if (c == 0) starter = out, last = 0;
        else if (last != 256) last = c;
        cp[out++] = cp[i];
    }
    return out;
}

static size_t put_utf8(char *d, uint32_t c) {
    if (c < 0x80) return d[0] = (char)c, 1;
    if (c < 0x800) return d[0] = (char)(0xC0 | c >> 6), d[1] = (char)(0x80 | (c & 0x3F)), 2;
    if (c < 0x10000)
        return d[0] = (char)(0xE0 | c >> 12), d[1] = (char)(0x80 | ((c >> 6) & 0x3F)),
               d[2] = (char)(0x80 | (c & 0x3F)), 3;
    return d[0] = (char)(0xF0 | c >> 18), d[1] = (char)(0x80 | ((c >> 12) & 0x3F)),
           d[2] = (char)(0x80 | ((c >> 6) & 0x3F)), d[3] = (char)(0x80 | (c & 0x3F)), 4;
}

char *unicode_nfc(const char *s, size_t n, size_t *len) {
    uint32_t *cp = malloc((n * UNICODE_NFC_WIDTH + 1) * sizeof *cp);
    char *out = cp ? malloc(4 * n * UNICODE_NFC_WIDTH + 1) : NULL;
    if (!out) return free(cp), NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) k += decompose((uint32_t)bpe_next_code_point(s, n, &i), cp + k);
    k = order_and_compose(cp, k);
    *len = 0;
    for (size_t i = 0; i < k; i++) *len += put_utf8(out + *len, cp[i]);
    free(cp);
    return out;
}
