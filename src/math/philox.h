// Philox4x32-10 (Salmon et al., SC'11) and a portable Box-Muller transform.
//
// Everything here is a pure function of its inputs and uses only integer ops and IEEE-754
// float +, -, *, / and sqrt, which round identically on every backend. log and sin/cos are
// our own polynomials rather than libm's, so the CPU and the GPU produce bit-identical
// tangents (compile without FMA contraction: -ffp-contract=off / nvcc --fmad=false).
#ifndef FGPIPE_PHILOX_H
#define FGPIPE_PHILOX_H

#include <math.h>
#include <stdint.h>

#include "host_device.h"

typedef struct { uint32_t v[4]; } Philox4;

enum { PHILOX_M0 = 0xD2511F53u, PHILOX_M1 = 0xCD9E8D57u };  // round multipliers
enum { PHILOX_W0 = 0x9E3779B9u, PHILOX_W1 = 0xBB67AE85u };  // key schedule (Weyl) increments

FG_HD Philox4 philox4x32_10(Philox4 ctr, uint32_t key0, uint32_t key1) {
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * ctr.v[0];
        uint64_t p1 = (uint64_t)PHILOX_M1 * ctr.v[2];
        Philox4 next;
        next.v[0] = (uint32_t)(p1 >> 32) ^ ctr.v[1] ^ key0;
        next.v[1] = (uint32_t)p1;
        next.v[2] = (uint32_t)(p0 >> 32) ^ ctr.v[3] ^ key1;
        next.v[3] = (uint32_t)p0;
        ctr = next;
        key0 += PHILOX_W0;
        key1 += PHILOX_W1;
    }
    return ctr;
}

FG_HD float fg_bits_to_float(uint32_t u) {
    union { uint32_t u; float f; } x = {u};
    return x.f;
}

FG_HD uint32_t fg_float_to_bits(float f) {
    union { float f; uint32_t u; } x = {f};
    return x.u;
}

// The functions below are branch-free (selects are bit masks) so that loops over them
// vectorise; every operation is exact or correctly rounded, so the result is the same on
// any backend.

// ln(x) for x in (0, 1]: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s),
// s = (m-1)/(m+1), |s| < 0.172, so five odd terms reach float precision.
FG_HD float fg_log_unit(float x) {
    uint32_t bits = fg_float_to_bits(x);
    uint32_t mbits = (bits & 0x007fffffu) | 0x3f800000u;  // m in [1, 2)
    uint32_t big = mbits > 0x3fb504f3u;                   // m > sqrt(2): use m/2, e+1
    float m = fg_bits_to_float(mbits - (big << 23));
    int e = (int)((bits >> 23) & 0xff) - 127 + (int)big;
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float series = 1.0f + s2 * (0.33333333f + s2 * (0.2f + s2 * (0.14285714f + s2 * 0.11111111f)));
    return (float)e * 0.69314718f + 2.0f * s * series;
}

// cos and sin of 2*pi*u for u in [0, 1): quadrant q from u, Taylor series around the middle
// of the quadrant (|t| <= pi/4), then rotate by q quarter turns (swap and sign flips).
FG_HD void fg_sincos_turn(float u, float *c_out, float *s_out) {
    float u4 = u * 4.0f;
    uint32_t q = (uint32_t)(int)u4 & 3u;  // u4 < 4 for u < 1
    float t = (u4 - (float)(int)q - 0.5f) * 1.57079633f;  // [-pi/4, pi/4)
    float t2 = t * t;
    float st = t * (1.0f - t2 * (1.0f / 6 - t2 * (1.0f / 120 - t2 * (1.0f / 5040 - t2 * (1.0f / 362880)))));
    float ct = 1.0f - t2 * (0.5f - t2 * (1.0f / 24 - t2 * (1.0f / 720 - t2 * (1.0f / 40320 - t2 * (1.0f / 3628800)))));
    // angle = q*pi/2 + pi/4 + t
    uint32_t c = fg_float_to_bits(0.70710678f * (ct - st));
    uint32_t s = fg_float_to_bits(0.70710678f * (ct + st));
    uint32_t swap = 0u - (q & 1u), flip = (q & 2u) << 30;  // odd q: (c, s) -> (-s, c)
    uint32_t cq = (c & ~swap) | ((s ^ 0x80000000u) & swap);
    uint32_t sq = (s & ~swap) | (c & swap);
    *c_out = fg_bits_to_float(cq ^ flip);
    *s_out = fg_bits_to_float(sq ^ flip);
}

// Two independent N(0,1) samples from two uniform 32-bit words (Box-Muller).
FG_HD void fg_box_muller(uint32_t a, uint32_t b, float *z0, float *z1) {
    float u1 = (float)((a >> 8) + 1) * (1.0f / 16777216.0f);  // (0, 1]
    float u2 = (float)(b >> 8) * (1.0f / 16777216.0f);        // [0, 1)
    float r = sqrtf(-2.0f * fg_log_unit(u1));
    float c, s;
    fg_sincos_turn(u2, &c, &s);
    *z0 = r * c;
    *z1 = r * s;
}

#endif
