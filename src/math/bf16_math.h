// One definition of BF16 rounding for the CPU (bf16.c, backend_cpu.c) and the GPU
// (cuda/bf16_cuda.cu, gemm_cuda.cu): FG_HD functions (host_device.h), so a value rounds to the
// same bits on every backend. The rounding is AVX512-BF16's VCVTNE2PS2BF16: to nearest even,
// denormals to a signed zero, NaNs kept quiet; bf16_round_keep keeps denormals (a base kept in
// BF16 goes back to its own bits).
#ifndef FGPIPE_BF16_MATH_H
#define FGPIPE_BF16_MATH_H

#include <stdint.h>
#include <string.h>

#include "host_device.h"

FG_HD uint32_t bf16_float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

FG_HD uint16_t bf16_round(float f) {
    uint32_t u = bf16_float_bits(f);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);  // zero, denormal
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN: quiet
    u += 0x7fffu + ((u >> 16) & 1u);  // infinities pass unchanged (their low half is 0)
    return (uint16_t)(u >> 16);
}

// As bf16_round, denormals rounded too rather than flushed: a value that came from BF16 goes
// back to its bits exactly.
FG_HD uint16_t bf16_round_keep(float f) {
    uint32_t u = bf16_float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN: quiet
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

FG_HD float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// An all-ones exponent: infinite or NaN.
FG_HD int bf16_not_finite(uint16_t h) { return (h & 0x7f80u) == 0x7f80u; }

#endif
