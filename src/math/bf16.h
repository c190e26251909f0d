// BF16 numbers on the CPU: FP32 rounded to BF16 exactly as AVX512-BF16's VCVTNE2PS2BF16 rounds
// (to nearest even; denormals to a signed zero; NaNs kept quiet), with a vector loop where the
// CPU has the instruction and a scalar one giving the same bits elsewhere; and whether this CPU
// can run BF16 products (the avx512_bf16 flag).
#ifndef FGPIPE_BF16_H
#define FGPIPE_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "bf16_math.h"  // bf16_round, bf16_to_f32: the one rounding, also the GPU's

// BF16 bits in the first half of buf widened in place to n floats, last first (no value is
// overwritten before it is read): a BF16 store's slot, a BF16 checkpoint tensor.
static inline void bf16_widen_in_place(void *buf, size_t n) {
    const uint16_t *h = buf;
    float *f = buf;
    for (size_t k = n; k-- > 0;) f[k] = bf16_to_f32(h[k]);
}

// y[i] = bf16_round(x[i]), i < n.
typedef void (*Bf16Convert)(const float *x, uint16_t *y, size_t n);

// x rounded to nearest even as bf16_round, but denormals kept: a value that came from BF16 goes
// back to its bits exactly (a base kept in BF16: its store's writes, and the BF16 copy its GEMMs
// read, the same bits as the BF16 slot of a streamed stage holds). A Bf16Convert.
static inline void bf16_narrow(const float *x, uint16_t *y, size_t n) {
    for (size_t k = 0; k < n; k++) y[k] = bf16_round_keep(x[k]);
}
void bf16_convert_scalar(const float *x, uint16_t *y, size_t n);
// The same bits with VCVTNE2PS2BF16; only where cpu_bf16_missing() is NULL.
void bf16_convert_avx512(const float *x, uint16_t *y, size_t n);

// f[i] = the float of h[i], i < n (exact).
void bf16_widen(const uint16_t *h, float *f, size_t n);
// y[i] = bf16_to_f32(bf16_round(y[i])), i < n: values rounded to BF16 in place, kept as floats;
// returns how many are not finite (NaN, infinite).
size_t bf16_round_floats(Bf16Convert convert, float *y, size_t n);

// rows x cols of x, its rows ld floats apart, into the dense y [rows, cols]; rows in parallel
// when there are many.
void bf16_convert_rows(Bf16Convert convert, const float *x, int rows, int cols, int ld,
                       uint16_t *y);

// NULL when this CPU runs BF16 products (cpuid's AVX512-BF16 bit and oneDNN's avx512_core_bf16
// kernels); else what is missing, naming the CPU flag, for "precision = bf16 needs %s".
// FGPIPE_CPU_NO_BF16=1 in the environment makes any CPU lack it (the tests of the refusal).
const char *cpu_bf16_missing(void);

#endif
