// Shared by the tests of the backends' BF16 ops (test_gemm_bf16.c on the CPU, test_cuda_bf16.c
// on the GPU): floats that exercise every branch of bf16_math.h's rounding, and the check that
// a backend's narrow16, widen16 and round16 give bf16_math.h's bits on them. Include after
// cmocka.h and test_util.h.
#ifndef FGPIPE_BF16_CASES_H
#define FGPIPE_BF16_CASES_H

#include <string.h>

#include "backend.h"
#include "bf16_math.h"

// Zeros, denormals (both signs, the largest, ones that round up past the tie), the smallest
// normals, ties to even below and above, just off the ties, the largest finite (rounds to
// infinity) and one that stays finite, infinities, quiet and signalling NaNs with payloads.
static const uint32_t BF16_EDGES[] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu, 0x00008000u,
    0x00018000u, 0x0000ffffu, 0x00400000u, 0x80400000u, 0x00800000u, 0x80800000u, 0x00808000u,
    0x00818000u, 0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0xbf818000u,
    0x7f7fffffu, 0xff7fffffu, 0x7f7f7fffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
    0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu, 0x7fffffffu, 0x7f808000u, 0x40490fdbu};
enum { BF16_N_EDGES = sizeof BF16_EDGES / sizeof BF16_EDGES[0] };

static inline float bf16_case_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// n floats: the edges first, then random bit patterns (every exponent, NaNs and infinities among
// them); the caller frees them.
static inline float *bf16_case_floats(size_t n, uint64_t seed) {
    float *x = fg_alloc_floats(n);
    Rng r = {seed};
    for (size_t i = 0; i < n; i++)
        x[i] = i < BF16_N_EDGES ? bf16_case_float(BF16_EDGES[i]) : bf16_case_float((uint32_t)(rng_next(&r) >> 32));
    return x;
}

// be's BF16 ops on n floats x (host) against bf16_math.h, element by element, bit for bit:
// narrow16 every way (denormals flushed or kept, as weights or not), widen16 of every BF16 pattern, round16 twice into one counter in backend
// memory that starts at 5 (the counts add), and round16 without a counter.
static inline void check_backend_bf16(const Backend *be, const float *x, size_t n, const char *what) {
    enum { PATTERNS = 65536 };
    uint16_t *h = fg_alloc_bytes(n * sizeof(uint16_t)), *all = fg_alloc_bytes(PATTERNS * sizeof(uint16_t));
    float *f = fg_alloc_floats(PATTERNS > n ? PATTERNS : n);
    for (int i = 0; i < PATTERNS; i++) all[i] = (uint16_t)i;
    float *dx = be->alloc(be, n * sizeof(float));
    uint16_t *dh = be->alloc(be, (PATTERNS > n ? PATTERNS : n) * sizeof(uint16_t));
    double *count = be->alloc(be, sizeof(double)), start = 5.0, got = 0.0;
    FgError err = {0};
    be->upload(be, dx, x, n * sizeof(float));
    for (int how = 0; how < 4; how++) {
        be->zero(be, dh, n * sizeof(uint16_t));
        be->narrow16(be, dx, dh, n, how);
        be->download(be, h, dh, n * sizeof(uint16_t));
        for (size_t i = 0; i < n; i++) {
            uint16_t want = how & BF16_KEEP_DENORMALS ? bf16_round_keep(x[i]) : bf16_round(x[i]);
            if (h[i] != want)
                fail_msg("%s: narrow16 (how %d) of %08x: %04x, not %04x", what, how,
                         (unsigned)bf16_float_bits(x[i]), h[i], want);
        }
    }
    be->upload(be, dh, all, PATTERNS * sizeof(uint16_t));
    be->widen16(be, dh, dx, 0);  // n = 0: nothing
    float *dw = be->alloc(be, PATTERNS * sizeof(float));
    be->widen16(be, dh, dw, PATTERNS);
    be->download(be, f, dw, PATTERNS * sizeof(float));
    for (int i = 0; i < PATTERNS; i++)
        if (bf16_float_bits(f[i]) != bf16_float_bits(bf16_to_f32((uint16_t)i)))
            fail_msg("%s: widen16 of %04x: %08x", what, i, (unsigned)bf16_float_bits(f[i]));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += (size_t)bf16_not_finite(bf16_round(x[i]));
    be->upload(be, count, &start, sizeof start);
    be->round16(be, dx, n, count);
    be->round16(be, dx, n, count);  // values of BF16 already: the same ones again, counted again
    be->round16(be, dx, n, NULL);
    be->download(be, f, dx, n * sizeof(float));
    be->download(be, &got, count, sizeof got);
    if (be->sync(be, &err)) fail_msg("%s: %s", what, err.msg);
    for (size_t i = 0; i < n; i++)
        if (bf16_float_bits(f[i]) != bf16_float_bits(bf16_to_f32(bf16_round(x[i]))))
            fail_msg("%s: round16 of %08x: %08x", what, (unsigned)bf16_float_bits(x[i]),
                     (unsigned)bf16_float_bits(f[i]));
    if (!(bad > 0 && got == start + 2.0 * (double)bad))
        fail_msg("%s: round16 counted %.0f values not finite from 5, not 5 + 2 x %zu", what, got, bad);
    void *dev[] = {dx, dh, count, dw};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) be->free(be, dev[i]);
    fg_free(h), fg_free(all), fg_free(f);
}

#endif
