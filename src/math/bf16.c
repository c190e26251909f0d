// BF16 rounding loops and the CPU's BF16 check (bf16.h).
#include "bf16.h"

#include <omp.h>
#include <stdlib.h>

#ifdef FG_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define FG_X86 1
#endif

void bf16_convert_scalar(const float *x, uint16_t *y, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = bf16_round(x[i]);
}

#ifdef FG_X86
// 32 floats a step (two vectors into one), the tail through the scalar rounding: same bits.
__attribute__((target("avx512f,avx512bf16"))) void bf16_convert_avx512(const float *x, uint16_t *y,
                                                                        size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512((void *)(y + i), (__m512i)v);
    }
    bf16_convert_scalar(x + i, y + i, n - i);
}
#else
void bf16_convert_avx512(const float *x, uint16_t *y, size_t n) {
    bf16_convert_scalar(x, y, n);  // never chosen: cpu_bf16_missing() is not NULL here
}
#endif

// Serial, as bf16_round_floats: the activations' passes are a few per layer and lane, and on a
// shared machine each parallel region's barrier may wait a time slice for a descheduled thread.
void bf16_widen(const uint16_t *h, float *f, size_t n) {
    for (size_t i = 0; i < n; i++) f[i] = bf16_to_f32(h[i]);
}

// Through a small buffer, 1024 values at a time (the vector rounding, then back), counting the
// values that are not finite on the way (an all-ones exponent): free beside the rounding.
size_t bf16_round_floats(Bf16Convert convert, float *y, size_t n) {
    enum { CHUNK = 1024 };
    size_t chunks = (n + CHUNK - 1) / CHUNK, not_finite = 0;
    for (size_t c = 0; c < chunks; c++) {
        uint16_t h[CHUNK];
        size_t a = c * CHUNK, m = n - a < CHUNK ? n - a : CHUNK;
        convert(y + a, h, m);
        for (size_t i = 0; i < m; i++) {
            y[a + i] = bf16_to_f32(h[i]);
            not_finite += (size_t)bf16_not_finite(h[i]);
        }
    }
    return not_finite;
}

// Parallel only past 256 Ki elements (a few tens of microseconds alone): on a shared machine
// every parallel region's barrier can wait a time slice for a descheduled thread.
void bf16_convert_rows(Bf16Convert convert, const float *x, int rows, int cols, int ld,
                       uint16_t *y) {
    size_t n = (size_t)rows * cols;
    if (ld == cols) {  // one stretch: an equal share per thread, cut at multiples of 32
#pragma omp parallel if (n > (1 << 18))
        {
            size_t t = (size_t)omp_get_thread_num(), nt = (size_t)omp_get_num_threads();
            size_t a = n * t / nt / 32 * 32, b = t + 1 == nt ? n : n * (t + 1) / nt / 32 * 32;
            convert(x + a, y + a, b - a);
        }
        return;
    }
#pragma omp parallel for schedule(static) if (n > (1 << 18))
    for (int r = 0; r < rows; r++) convert(x + (size_t)r * ld, y + (size_t)r * cols, (size_t)cols);
}

// cpuid leaf 7: subleaf 0's EBX bit 16 is AVX512F, subleaf 1's EAX bit 5 is AVX512-BF16.
static int cpuid_avx512_bf16(void) {
#ifdef FG_X86
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 16))) return 0;
    if (a < 1 || !__get_cpuid_count(7, 1, &a, &b, &c, &d)) return 0;
    return (a >> 5) & 1u;
#else
    return 0;
#endif
}

const char *cpu_bf16_missing(void) {
    const char *off = getenv("FGPIPE_CPU_NO_BF16");
    if (off && off[0] && strcmp(off, "0"))
        return "the CPU flag avx512_bf16 (AVX512-BF16), which this CPU lacks (FGPIPE_CPU_NO_BF16 "
               "is set: the tests' stand-in for such a CPU)";
    if (!cpuid_avx512_bf16()) return "the CPU flag avx512_bf16 (AVX512-BF16), which this CPU lacks";
#ifdef FG_HAVE_DNNL
    // oneDNN also needs the OS to save AVX-512 state, and honours ONEDNN_MAX_CPU_ISA.
    if ((dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16)
        return "the CPU flag avx512_bf16 (AVX512-BF16) usable by oneDNN, whose effective ISA here "
               "is below avx512_core_bf16";
    return NULL;
#else
    return "oneDNN's BF16 matmul, and this fgpipe was built without libdnnl (Debian: libdnnl-dev)";
#endif
}
