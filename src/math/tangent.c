#include "tangent.h"

#include <math.h>

#include "common.h"
#include "philox.h"

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

// Normals are made in batches of 256 from 64 Philox blocks, laid out so that every loop below
// runs over contiguous arrays (and vectorises): element i of a tensor lives in batch i/256;
// at position r = i%256 it is Box-Muller output r/64 of block 64*(i/256) + r%64, where
// outputs 0,1 come from the block's words (0,1) and outputs 2,3 from words (2,3).
// The counter carries the block number and (layer, k, micro-batch, step); the key carries
// (seed, stream). A GPU kernel reproduces exactly this layout.
#define BATCH 256
#define BLOCKS (BATCH / 4)

typedef struct { uint32_t w[4][BLOCKS]; } BatchWords;  // w[j][i]: word j of block i

// The SIMD paths hold block i as two 64-bit lanes, x = w0 | w1 << 32 and y = w2 | w3 << 32:
// one 32x32->64 multiply (pmuludq, low half of the lane) gives a round's full product, and
// a round is then x' = rot32(p1 ^ (x & HI) ^ k0 << 32), y' = rot32(p0 ^ (y & HI) ^ k1 << 32)
// with p0 = M0 * w0, p1 = M1 * w2. The scalar path below is the reference they must match.
#if defined(__AVX512F__)
enum { VB = 8 };  // blocks per vector

// One round on all vectors; the masked ternary xor touches the high halves only.
static inline void philox_round_512(__m512i x[], __m512i y[], uint32_t k0, uint32_t k1) {
    const __m512i m0 = _mm512_set1_epi64(PHILOX_M0), m1 = _mm512_set1_epi64(PHILOX_M1);
    const __m512i hk0 = _mm512_set1_epi64((int64_t)((uint64_t)k0 << 32));
    const __m512i hk1 = _mm512_set1_epi64((int64_t)((uint64_t)k1 << 32));
    for (int j = 0; j < BLOCKS / VB; j++) {
        __m512i p0 = _mm512_mul_epu32(x[j], m0), p1 = _mm512_mul_epu32(y[j], m1);
        x[j] = _mm512_ror_epi64(_mm512_mask_ternarylogic_epi32(p1, 0xAAAA, x[j], hk0, 0x96), 32);
        y[j] = _mm512_ror_epi64(_mm512_mask_ternarylogic_epi32(p0, 0xAAAA, y[j], hk1, 0x96), 32);
    }
}

static void philox_batch(uint32_t first_block, uint32_t coords, uint32_t mb, uint32_t step,
                         uint32_t k0, uint32_t k1, BatchWords *out) {
    __m512i x[BLOCKS / VB], y[BLOCKS / VB];
    // Block numbers in the low halves (first_block is a multiple of 64: nothing carries).
    const __m512i x0 = _mm512_set1_epi64((int64_t)((uint64_t)coords << 32 | first_block));
    const __m512i lane = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    for (int j = 0; j < BLOCKS / VB; j++) {
        x[j] = _mm512_add_epi32(x0, _mm512_add_epi64(lane, _mm512_set1_epi64(VB * j)));
        y[j] = _mm512_set1_epi64((int64_t)((uint64_t)step << 32 | mb));
    }
    for (int round = 0; round < 10; round++, k0 += PHILOX_W0, k1 += PHILOX_W1)
        philox_round_512(x, y, k0, k1);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26,
                                           28, 30);  // low words of x[j] then of x[j + 1]
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int j = 0; j < BLOCKS / VB; j += 2) {
        _mm512_storeu_si512(&out->w[0][j * VB], _mm512_permutex2var_epi32(x[j], even, x[j + 1]));
        _mm512_storeu_si512(&out->w[1][j * VB], _mm512_permutex2var_epi32(x[j], odd, x[j + 1]));
        _mm512_storeu_si512(&out->w[2][j * VB], _mm512_permutex2var_epi32(y[j], even, y[j + 1]));
        _mm512_storeu_si512(&out->w[3][j * VB], _mm512_permutex2var_epi32(y[j], odd, y[j + 1]));
    }
}

#elif defined(__AVX2__)
enum { VB = 4 };  // blocks per vector

static inline __m256i philox_half_256(__m256i p, __m256i w, __m256i hi, __m256i hk) {
    __m256i t = _mm256_xor_si256(p, _mm256_xor_si256(_mm256_and_si256(w, hi), hk));
    return _mm256_shuffle_epi32(t, 0xB1);  // swap the 32-bit halves of each lane
}

// One round on all vectors (in memory: 32 vectors do not fit in 16 registers).
static inline void philox_round_256(__m256i x[], __m256i y[], uint32_t k0, uint32_t k1) {
    const __m256i m0 = _mm256_set1_epi64x(PHILOX_M0), m1 = _mm256_set1_epi64x(PHILOX_M1);
    const __m256i hi = _mm256_set1_epi64x((int64_t)0xFFFFFFFF00000000ull);
    const __m256i hk0 = _mm256_set1_epi64x((int64_t)((uint64_t)k0 << 32));
    const __m256i hk1 = _mm256_set1_epi64x((int64_t)((uint64_t)k1 << 32));
    for (int j = 0; j < BLOCKS / VB; j++) {
        __m256i p0 = _mm256_mul_epu32(x[j], m0), p1 = _mm256_mul_epu32(y[j], m1);
        x[j] = philox_half_256(p1, x[j], hi, hk0);
        y[j] = philox_half_256(p0, y[j], hi, hk1);
    }
}

static void philox_batch(uint32_t first_block, uint32_t coords, uint32_t mb, uint32_t step,
                         uint32_t k0, uint32_t k1, BatchWords *out) {
    __m256i x[BLOCKS / VB], y[BLOCKS / VB];
    // Block numbers in the low halves (first_block is a multiple of 64: nothing carries).
    const __m256i x0 = _mm256_set1_epi64x((int64_t)((uint64_t)coords << 32 | first_block));
    const __m256i lane = _mm256_setr_epi64x(0, 1, 2, 3);
    for (int j = 0; j < BLOCKS / VB; j++) {
        x[j] = _mm256_add_epi32(x0, _mm256_add_epi64(lane, _mm256_set1_epi64x(VB * j)));
        y[j] = _mm256_set1_epi64x((int64_t)((uint64_t)step << 32 | mb));
    }
    for (int round = 0; round < 10; round++, k0 += PHILOX_W0, k1 += PHILOX_W1)
        philox_round_256(x, y, k0, k1);
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);  // low words, then high
    for (int j = 0; j < BLOCKS / VB; j++) {
        __m256i xs = _mm256_permutevar8x32_epi32(x[j], split);
        __m256i ys = _mm256_permutevar8x32_epi32(y[j], split);
        _mm_storeu_si128((__m128i *)&out->w[0][j * VB], _mm256_castsi256_si128(xs));
        _mm_storeu_si128((__m128i *)&out->w[1][j * VB], _mm256_extracti128_si256(xs, 1));
        _mm_storeu_si128((__m128i *)&out->w[2][j * VB], _mm256_castsi256_si128(ys));
        _mm_storeu_si128((__m128i *)&out->w[3][j * VB], _mm256_extracti128_si256(ys, 1));
    }
}

#else

// The reference: philox4x32_10 on 64 blocks as parallel lanes (the compiler may vectorise).
static void philox_batch(uint32_t first_block, uint32_t coords, uint32_t mb, uint32_t step,
                         uint32_t k0, uint32_t k1, BatchWords *out) {
    uint32_t *c0 = out->w[0], *c1 = out->w[1], *c2 = out->w[2], *c3 = out->w[3];
    for (int i = 0; i < BLOCKS; i++) {
        c0[i] = first_block + (uint32_t)i;
        c1[i] = coords;
        c2[i] = mb;
        c3[i] = step;
    }
    for (int round = 0; round < 10; round++) {
#pragma omp simd
        for (int i = 0; i < BLOCKS; i++) {
            uint64_t p0 = (uint64_t)PHILOX_M0 * c0[i], p1 = (uint64_t)PHILOX_M1 * c2[i];
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[i] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[i] ^ k1;
            c0[i] = n0;
            c1[i] = (uint32_t)p1;
            c2[i] = n2;
            c3[i] = (uint32_t)p0;
        }
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
}
#endif

static void normals_batch(TangentKey key, size_t batch, float *restrict out) {
    BatchWords c;
    philox_batch((uint32_t)(batch * BLOCKS), (key.layer << 12) ^ key.k, key.microbatch, key.step,
                 key.seed, key.stream, &c);
    const uint32_t *c0 = c.w[0], *c1 = c.w[1], *c2 = c.w[2], *c3 = c.w[3];
#pragma omp simd
    for (int i = 0; i < BLOCKS; i++) {
        fg_box_muller(c0[i], c1[i], &out[i], &out[BLOCKS + i]);
        fg_box_muller(c2[i], c3[i], &out[2 * BLOCKS + i], &out[3 * BLOCKS + i]);
    }
}

// The three entry points share one walker. The range is cut into fixed groups of GROUP
// elements, the iterations of one OpenMP parallel for (so the split never depends on the
// thread count); dot products are summed per group, then across groups in order on the
// calling thread: bitwise reproducible on any number of threads.
#define GROUP 65536

typedef enum { OP_FILL, OP_AXPY, OP_DOT, OP_FILL_DOT, OP_AXPY_ROWS } TangentOp;

// What a walk does with the values: y, x and alpha as in the entry points; OP_AXPY_ROWS scales
// element i by x[(i - first) / width] (a coefficient per row of `width` elements).
typedef struct {
    TangentOp op;
    float alpha;
    float *y;
    const float *x;
    size_t width;
} Walk;

static double walk_group(TangentKey key, size_t lo, size_t hi, size_t first, const Walk *w) {
    const TangentOp op = w->op;
    const float alpha = w->alpha, *x = w->x;
    float *y = w->y;
    double sum = 0.0;
    float v[BATCH];
    for (size_t blo = lo / BATCH * BATCH; blo < hi; blo += BATCH) {
        normals_batch(key, blo / BATCH, v);
        size_t a = FG_MAX(blo, lo), b = FG_MIN(blo + BATCH, hi);
        const float *vv = v + (a - blo);
        size_t len = b - a, off = a - first;
        if (op == OP_FILL) {
            for (size_t i = 0; i < len; i++) y[off + i] = vv[i];
        } else if (op == OP_AXPY) {
            for (size_t i = 0; i < len; i++) y[off + i] += alpha * vv[i];
        } else if (op == OP_AXPY_ROWS) {  // row by row, so that each inner loop vectorises
            for (size_t i = 0; i < len;) {
                size_t row = (off + i) / w->width, end = FG_MIN(len, (row + 1) * w->width - off);
                const float c = x[row];
                for (size_t j = i; j < end; j++) y[off + j] += c * vv[j];
                i = end;
            }
        } else if (op == OP_DOT) {
            for (size_t i = 0; i < len; i++) sum += (double)x[off + i] * vv[i];
        } else {
            for (size_t i = 0; i < len; i++) y[off + i] = vv[i];
            sum += fg_dot_f64(x + off, vv, len);
        }
    }
    return sum;
}

static double tangent_walk(TangentKey key, size_t first, size_t n, const Walk *w) {
    size_t groups = (n + GROUP - 1) / GROUP;
    double small[64];
    double *partial = groups <= 64 ? small : fg_alloc_bytes(groups * sizeof(double));
#pragma omp parallel for schedule(static) if (groups > 1)
    for (size_t g = 0; g < groups; g++) {
        size_t lo = first + g * GROUP, hi = FG_MIN(lo + GROUP, first + n);
        partial[g] = walk_group(key, lo, hi, first, w);
    }
    double total = 0.0;
    for (size_t g = 0; g < groups; g++) total += partial[g];
    if (partial != small) fg_free(partial);
    return total;
}

void tangent_fill(TangentKey key, size_t first, size_t n, float *out) {
    tangent_walk(key, first, n, &(Walk){.op = OP_FILL, .y = out});
}

double tangent_fill_dot(TangentKey key, size_t first, size_t n, float *out, const float *x) {
    return tangent_walk(key, first, n, &(Walk){.op = OP_FILL_DOT, .y = out, .x = x});
}

void tangent_axpy(TangentKey key, size_t first, size_t n, float alpha, float *y) {
    tangent_walk(key, first, n, &(Walk){.op = OP_AXPY, .alpha = alpha, .y = y});
}

double tangent_dot(TangentKey key, size_t first, size_t n, const float *x) {
    return tangent_walk(key, first, n, &(Walk){.op = OP_DOT, .x = x});
}

void tangent_axpy_rows(TangentKey key, size_t rows, size_t width, const float *row_alpha,
                       float *y) {
    tangent_walk(key, 0, rows * width, &(Walk){.op = OP_AXPY_ROWS, .y = y, .x = row_alpha, .width = width});
}
