// Vector kernels of the CUDA backend: scale, axpy, dot (fixed grid, partial sums added on the host in
// order: the same bits every run) and the optimizer step.
#include "cuda_internal.h"

#define GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void scale_kernel(float *y, float a, const float *x, size_t n) {
    GRID_LOOP(i, n) y[i] = a * x[i];
}

void cuda_scale(const Backend *be, float *y, float a, const float *x, size_t n) {
    scale_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(y, a, x, n);
    launch_check(be, "scale");
}

__global__ void axpy_kernel(float *y, float a, const float *x, size_t n) {
    GRID_LOOP(i, n) y[i] += a * x[i];
}

void cuda_axpy(const Backend *be, float *y, float a, const float *x, size_t n) {
    axpy_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(y, a, x, n);
    launch_check(be, "axpy");
}

enum { DOT_THREADS = 256, DOT_GRID = 512 };

__global__ void dot_kernel(const float *a, const float *b, size_t n, double *partial) {
    __shared__ double red[DOT_THREADS];
    double s = 0.0;
    GRID_LOOP(i, n) s += (double)a[i] * b[i];
    red[threadIdx.x] = s;
    __syncthreads();
    for (int w = DOT_THREADS / 2; w > 0; w /= 2) {
        if (threadIdx.x < w) red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = red[0];
}

double cuda_dot(const Backend *be, const float *a, const float *b, size_t n) {
    unsigned grid = grid_for(n, DOT_THREADS, DOT_GRID);
    double *partial = cuda_partials(be, grid);
    dot_kernel<<<grid, DOT_THREADS, 0, cuda_ctx(be)->stream>>>(a, b, n, partial);
    launch_check(be, "dot");
    const double *h = cuda_download_partials(be, grid);
    double s = 0.0;
    for (unsigned g = 0; g < grid; g++) s += h[g];
    return s;
}

// The updates are optimizer_math.h's, and the scalars optimizer.c's: the CPU's bits.
__global__ void sgd_kernel(OptScalars s, float *params, const float *from, const float *g,
                           float g_scale, float *vel, size_t n) {
    GRID_LOOP(i, n) params[i] = fg_sgd_update(s, g_scale * g[i], from[i], &vel[i]);
}

__global__ void adam_kernel(OptScalars s, float *params, const float *from, const float *g,
                            float g_scale, float *m, float *v, size_t n) {
    GRID_LOOP(i, n) params[i] = fg_adam_update(s, g_scale * g[i], from[i], &m[i], &v[i]);
}

void cuda_optimizer_step(const Backend *be, const OptimizerConfig *c, long step, double lr,
                         float *params, const float *from, const float *g, float g_scale,
                         float *state, size_t state_stride, size_t n) {
    cudaStream_t st = cuda_ctx(be)->stream;
    unsigned grid = grid_for(n, 256, 65535);
    const OptScalars s = optimizer_scalars(c, step, lr);
    if (c->kind == OPT_SGD)
        sgd_kernel<<<grid, 256, 0, st>>>(s, params, from, g, g_scale, state, n);
    else
        adam_kernel<<<grid, 256, 0, st>>>(s, params, from, g, g_scale, state, state + state_stride, n);
    launch_check(be, "optimizer step");
}
