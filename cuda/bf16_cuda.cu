// BF16 numbers in device memory (Backend.narrow16, widen16, round16; backend.h): the CPU's
// rounding, bf16_math.h's one formula compiled for the device, so a bf16 run's activations,
// messages and weights' copy hold the bits a CPU run holds for the same floats. One thread per
// value (a grid-stride loop past the grid's cap).
#include "cuda_internal.h"
#include "bf16_math.h"

#define BF16_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

template <bool KEEP_DENORMALS>
__global__ void narrow16_kernel(const float *x, uint16_t *y, size_t n) {
    BF16_LOOP(i, n) y[i] = KEEP_DENORMALS ? bf16_round_keep(x[i]) : bf16_round(x[i]);
}

__global__ void widen16_kernel(const uint16_t *h, float *x, size_t n) {
    BF16_LOOP(i, n) x[i] = bf16_to_f32(h[i]);
}

// A thread adds its count of values not finite only when it found some: a finite run's
// rounding does no atomic at all. Counts are whole numbers far below 2^53: the sum is exact,
// in any order.
__global__ void round16_kernel(float *x, size_t n, double *not_finite) {
    unsigned bad = 0;
    BF16_LOOP(i, n) {
        uint16_t h = bf16_round(x[i]);
        x[i] = bf16_to_f32(h);
        bad += (unsigned)bf16_not_finite(h);
    }
    if (bad && not_finite) atomicAdd(not_finite, (double)bad);
}

// BF16_WEIGHTS changes nothing here: every launch spreads over the GPU.
void cuda_narrow16(const Backend *be, const float *x, uint16_t *y, size_t n, int how) {
    if (!n) return;
    unsigned grid = grid_for(n, 256, 65535);
    cudaStream_t s = cuda_ctx(be)->stream;
    if (how & BF16_KEEP_DENORMALS) narrow16_kernel<true><<<grid, 256, 0, s>>>(x, y, n);
    else narrow16_kernel<false><<<grid, 256, 0, s>>>(x, y, n);
    launch_check(be, "bf16: narrow");
}

void cuda_widen16(const Backend *be, const uint16_t *h, float *x, size_t n) {
    if (!n) return;
    widen16_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(h, x, n);
    launch_check(be, "bf16: widen");
}

void cuda_round16(const Backend *be, float *x, size_t n, double *not_finite) {
    if (!n) return;
    round16_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(x, n, not_finite);
    launch_check(be, "bf16: round");
}
