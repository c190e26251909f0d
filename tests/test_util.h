// Helpers shared by the cmocka tests (tests/test_*.c): a deterministic random number generator,
// vector products and distances in double, a central finite difference, the check of an
// estimator's draws against its variance formula and scratch directories. Header-only: each test is one translation unit and uses a few of these.
#ifndef FGPIPE_TEST_UTIL_H
#define FGPIPE_TEST_UTIL_H

#include <ftw.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// ---- random inputs: a 64-bit LCG, so inputs are the same on every libc and machine ----

typedef struct {
    uint64_t s;
} Rng;

static inline uint64_t rng_next(Rng *r) {
    r->s = r->s * 6364136223846793005ULL + 1442695040888963407ULL;
    return r->s;
}

// Uniform float in [-1, 1) with 24 random bits.
static inline float rng_uniform(Rng *r) {
    return (float)(rng_next(r) >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

// Uniform double in [lo, hi) with 53 random bits.
static inline double rng_range(Rng *r, double lo, double hi) {
    return lo + (hi - lo) * (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

// Integer in [lo, hi].
static inline int rng_int(Rng *r, int lo, int hi) {
    return lo + (int)((rng_next(r) >> 33) % (uint64_t)(hi - lo + 1));
}

// v[i] = scale * (uniform in [-1, 1)).
static inline void fill_uniform(Rng *r, float *v, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) v[i] = scale * rng_uniform(r);
}

// ---- vectors, accumulated in double ----

static inline double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

static inline double norm(const float *a, size_t n) { return sqrt(dot(a, a, n)); }

// |a - b|^2 and |a - b|.
static inline double dist2(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return s;
}

static inline double dist(const float *a, const float *b, size_t n) { return sqrt(dist2(a, b, n)); }

// ---- finite differences ----

// (f(v + eps e_i) - f(v - eps e_i)) / (2 eps): the derivative of f along coordinate i of v,
// where f(ctx) reads v (the point moves in float, as a caller of the code under test would
// move it). v[i] is restored afterwards.
static inline double central_difference(float *v, size_t i, float eps, double (*f)(void *ctx),
                                        void *ctx) {
    float keep = v[i];
    v[i] = keep + eps;
    double fp = f(ctx);
    v[i] = keep - eps;
    double fm = f(ctx);
    v[i] = keep;
    return (fp - fm) / (2.0 * eps);
}

// ---- estimator statistics (include after cmocka.h) ----

// T draws of an estimator are unbiased with the per-draw variance `pred` of its formula:
// |mean - g|^2 within 4x of pred / T (a sum of many squared errors), and the measured per-draw
// variance var, whose standard error se is under 5% of pred, within 5 se of it.
static inline void assert_draws_match(const char *name, double err2, double var, double se,
                                      double pred, int T) {
    if (!(err2 <= 4.0 * pred / T && err2 >= pred / (4.0 * T)))
        fail_msg("%s: |mean - g_true|^2 = %g, not within 4x of analytic V/T = %g", name, err2,
                 pred / T);
    assert_true(se < 0.05 * pred);
    if (!(fabs(var - pred) <= 5.0 * se))
        fail_msg("%s: per-draw variance %g +- %g, analytic %g", name, var, se, pred);
}

// ---- scratch directories ----

// Makes a fresh directory PREFIX-XXXXXX (mkdtemp) and writes its name to out; 0 on success.
static inline int scratch_dir(char *out, size_t size, const char *prefix) {
    snprintf(out, size, "%s-XXXXXX", prefix);
    return mkdtemp(out) ? 0 : -1;
}

static inline int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb, (void)type, (void)ftw;
    return remove(path);
}

// Removes dir and everything below it (depth first, symbolic links not followed); 0 on success.
static inline int remove_tree(const char *dir) {
    return nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
