// Tangents on the GPU, bit-identical to tangent.c: one thread per Philox block of 4 normals,
// which land at positions j, 64+j, 128+j, 192+j of their batch of 256 (tangent.c's layout).
// Needs nvcc --fmad=false so that Box-Muller rounds as on the CPU.
#include "cuda_internal.h"

extern "C" {
#include "philox.h"
}

enum { BATCH = 256, BLOCKS = BATCH / 4 };

// The 4 normals of Philox block `blk` (block j of batch blk / 64) for key (with mb, k set).
__device__ static inline void normals4(TangentKey key, size_t blk, float v[4]) {
    Philox4 c = {{(uint32_t)blk, (key.layer << 12) ^ key.k, key.microbatch, key.step}};
    Philox4 w = philox4x32_10(c, key.seed, key.stream);
    fg_box_muller(w.v[0], w.v[1], &v[0], &v[1]);
    fg_box_muller(w.v[2], w.v[3], &v[2], &v[3]);
}

// Element index of output q of Philox block blk.
__device__ static inline size_t element_of(size_t blk, int q) {
    return blk / BLOCKS * BATCH + (size_t)q * BLOCKS + blk % BLOCKS;
}

__global__ void tangent_fill_kernel(TangentKey key, size_t n, float *out) {
    size_t n_blk = (n + BATCH - 1) / BATCH * BLOCKS;
    for (size_t blk = blockIdx.x * (size_t)blockDim.x + threadIdx.x; blk < n_blk; blk += (size_t)gridDim.x * blockDim.x) {
        float v[4];
        normals4(key, blk, v);
        for (int q = 0; q < 4; q++) {
            size_t i = element_of(blk, q);
            if (i < n) out[i] = v[q];
        }
    }
}

// y += coeff[b*K + k] v_{b,k}, (b, k) in order: the same float rounding sequence as the CPU.
__global__ void tangent_axpy_kernel(TangentKey key, int n_mb, int K, const float *coeff, size_t n,
                                    float *y) {
    size_t n_blk = (n + BATCH - 1) / BATCH * BLOCKS;
    uint32_t mb0 = key.microbatch;
    for (size_t blk = blockIdx.x * (size_t)blockDim.x + threadIdx.x; blk < n_blk; blk += (size_t)gridDim.x * blockDim.x) {
        float acc[4];
        for (int q = 0; q < 4; q++) {
            size_t i = element_of(blk, q);
            acc[q] = i < n ? y[i] : 0.0f;
        }
        for (int b = 0; b < n_mb; b++)
            for (int k = 0; k < K; k++) {
                key.microbatch = mb0 + (uint32_t)b;
                key.k = (uint32_t)k;
                float v[4], a = coeff[b * K + k];
                normals4(key, blk, v);
                for (int q = 0; q < 4; q++) acc[q] += a * v[q];
            }
        for (int q = 0; q < 4; q++) {
            size_t i = element_of(blk, q);
            if (i < n) y[i] = acc[q];
        }
    }
}

// y + k*y_stride += coeff[k*rows + row] v_k for k < K, (coeff NULL: 1), k in order: the CPU's
// rounding sequence (with y_stride 0, every k adds into one y); y's rows are ld floats apart.
__global__ void tangent_add_rows_kernel(TangentKey key, int K, size_t width, size_t n,
                                        const float *coeff, float *y, size_t y_stride, size_t ld) {
    size_t n_blk = (n + BATCH - 1) / BATCH * BLOCKS, rows = n / width;
    for (size_t blk = blockIdx.x * (size_t)blockDim.x + threadIdx.x; blk < n_blk; blk += (size_t)gridDim.x * blockDim.x)
        for (int k = 0; k < K; k++) {
            key.k = (uint32_t)k;
            float v[4];
            normals4(key, blk, v);
            for (int q = 0; q < 4; q++) {
                size_t i = element_of(blk, q);
                if (i < n)
                    y[k * y_stride + i / width * ld + i % width] +=
                        (coeff ? coeff[k * rows + i / width] : 1.0f) * v[q];
            }
        }
}

// Columns [j0, j0 + nb) of tangent rows of `width` elements (a fused head's block, head_loss.h):
// y + k*y_stride [rows, nb] += coeff[k*coeff_rows + r / coeff_div] u_k[r*width + j0 + j]
// (coeff NULL: 1), k in order (y_stride 0: every k into one y): the CPU's block_activity. One
// thread per element, each making its element's Philox block.
__global__ void tangent_add_columns_kernel(TangentKey key, int K, int rows, size_t width, int j0,
                                           int nb, const float *coeff, int coeff_rows,
                                           int coeff_div, float *y, size_t y_stride) {
    size_t n = (size_t)rows * nb;
    for (size_t e = blockIdx.x * (size_t)blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        size_t r = e / nb, i = r * width + j0 + e % nb;
        size_t blk = i / BATCH * BLOCKS + i % BLOCKS;
        int q = (int)(i % BATCH / BLOCKS);
        for (int k = 0; k < K; k++) {
            key.k = (uint32_t)k;
            float v[4];
            normals4(key, blk, v);
            y[k * y_stride + e] += (coeff ? coeff[(size_t)k * coeff_rows + r / coeff_div] : 1.0f) * v[q];
        }
    }
}

void cuda_tangent_add_columns(const Backend *be, TangentKey key, int K, int rows, size_t width,
                              int j0, int nb, const float *coeff, int coeff_rows, int coeff_div,
                              float *y, size_t y_stride) {
    size_t n = (size_t)rows * nb;
    tangent_add_columns_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(
        key, K, rows, width, j0, nb, coeff, coeff_rows, coeff_div, y, y_stride);
    launch_check(be, "tangent add columns");
}

enum { DOT_THREADS = 256, DOT_GRID = 256 };

// partial[blockIdx.x * NK + bk] = this block's share of v_{b,k} . x (fixed grid: the same
// sums every run).
__global__ void tangent_dot_kernel(TangentKey key, int n_mb, int K, size_t n, const float *x,
                                   double *partial) {
    __shared__ double red[DOT_THREADS];
    size_t n_blk = (n + BATCH - 1) / BATCH * BLOCKS;
    uint32_t mb0 = key.microbatch;
    for (int bk = 0; bk < n_mb * K; bk++) {
        key.microbatch = mb0 + (uint32_t)(bk / K);
        key.k = (uint32_t)(bk % K);
        double s = 0.0;
        for (size_t blk = blockIdx.x * (size_t)blockDim.x + threadIdx.x; blk < n_blk; blk += (size_t)gridDim.x * blockDim.x) {
            float v[4];
            normals4(key, blk, v);
            for (int q = 0; q < 4; q++) {
                size_t i = element_of(blk, q);
                if (i < n) s += (double)x[i] * v[q];
            }
        }
        red[threadIdx.x] = s;
        __syncthreads();
        for (int w = DOT_THREADS / 2; w > 0; w /= 2) {
            if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) partial[(size_t)blockIdx.x * n_mb * K + bk] = red[0];
        __syncthreads();
    }
}

static unsigned philox_grid(size_t n, unsigned cap) {
    return grid_for((n + BATCH - 1) / BATCH * BLOCKS, 256, cap);
}

double cuda_tangent_fill(const Backend *be, TangentKey key, size_t n, float *out, const float *ref) {
    tangent_fill_kernel<<<philox_grid(n, 65535), 256, 0, cuda_ctx(be)->stream>>>(key, n, out);
    launch_check(be, "tangent fill");
    // The device reads the values back at memory bandwidth: no fused kernel needed.
    return ref ? cuda_dot(be, ref, out, n) : 0.0;
}

void cuda_tangent_axpy(const Backend *be, TangentKey key, int n_mb, int K, const float *coeff,
                       size_t n, float *y) {
    const float *c = cuda_upload_coeff(be, coeff, (size_t)n_mb * K);
    tangent_axpy_kernel<<<philox_grid(n, 65535), 256, 0, cuda_ctx(be)->stream>>>(key, n_mb, K, c, n, y);
    launch_check(be, "tangent axpy");
}

void cuda_tangent_add_rows(const Backend *be, TangentKey key, int K, int rows, int width,
                           const float *coeff, float *y, size_t y_stride, size_t ld) {
    size_t n = (size_t)rows * width;
    const float *c = coeff ? cuda_upload_coeff(be, coeff, (size_t)K * rows) : NULL;
    tangent_add_rows_kernel<<<philox_grid(n, 65535), 256, 0, cuda_ctx(be)->stream>>>(key, K, (size_t)width, n, c, y, y_stride, ld);
    launch_check(be, "tangent add rows");
}

void cuda_tangent_dot(const Backend *be, TangentKey key, int n_mb, int K, size_t n,
                      const float *x, double *dots) {
    int NK = n_mb * K;
    unsigned grid = philox_grid(n, DOT_GRID);
    double *partial = cuda_partials(be, (size_t)grid * NK);
    tangent_dot_kernel<<<grid, DOT_THREADS, 0, cuda_ctx(be)->stream>>>(key, n_mb, K, n, x, partial);
    launch_check(be, "tangent dot");
    const double *h = cuda_download_partials(be, (size_t)grid * NK);
    for (unsigned g = 0; g < grid; g++)
        for (int bk = 0; bk < NK; bk++) dots[bk] += h[(size_t)g * NK + bk];
}
