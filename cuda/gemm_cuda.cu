// The layers' GEMMs at the backend's precision (config key `precision`): FP32 (cublasSgemm,
// no TF32: the CPU reference's numbers), TF32 (the same call under
// CUBLAS_TF32_TENSOR_OP_MATH, set once on the handle by backend_cuda_set_precision) or BF16
// (products on tensor cores accumulated in FP32, FP32 output): a layer's weights come as their
// BF16 copy (GemmArg.p16, made when they were written: no conversion per call), every other
// operand is rounded to bf16 into scratch by the CPU's rounding (bf16_math.h: denormals to
// zero, as the BF16 copies and the activations between layers are). In a bf16 run the
// activations and tangents are BF16 values already, so their rounding here is exact.
#include "cuda_internal.h"
#include "bf16_math.h"

// dst [batch][cols][rows] (packed) = bf16 of the column-major src (ld, stride between matrices).
// A block takes `per` columns (256 / per threads each): one division per column, none per
// element, and short columns (a head's 64 features) still fill the block.
__global__ void to_bf16_kernel(const float *src, int ld, long long stride, int rows, int cols,
                               int batch, int per, uint16_t *dst) {
    int lane = threadIdx.x % (blockDim.x / per), width = blockDim.x / per;
    for (size_t c = (size_t)blockIdx.y * per + threadIdx.x / width; c < (size_t)cols * batch; c += (size_t)gridDim.y * per) {
        const float *from = src + c / cols * stride + c % cols * (size_t)ld;
        uint16_t *to = dst + c * rows;
        for (int r = blockIdx.x * width + lane; r < rows; r += gridDim.x * width) to[r] = bf16_round(from[r]);
    }
}

// The same for a packed, 16-byte aligned source of n4 x 4 floats: four at a time.
__global__ void to_bf16_flat_kernel(const float4 *src, size_t n4, ushort4 *dst) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = src[i];
        dst[i] = make_ushort4(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));
    }
}

static void convert(const Backend *be, GemmArg a, int rows, int cols, int copies, uint16_t *dst) {
    size_t n = (size_t)rows * cols * copies;
    cudaStream_t stream = cuda_ctx(be)->stream;
    bool packed = a.ld == rows && (copies == 1 || a.stride == (long long)rows * cols);
    if (packed && n % 4 == 0 && (uintptr_t)a.p % 16 == 0) {
        to_bf16_flat_kernel<<<grid_for(n / 4, 256, 65535), 256, 0, stream>>>((const float4 *)a.p, n / 4,
                                                                             (ushort4 *)dst);
    } else {
        int width = rows >= 256 ? 256 : (rows + 31) / 32 * 32, per = 256 / width;
        dim3 grid(grid_for((size_t)rows, width, 8), grid_for((size_t)cols * copies, per, 65535));
        to_bf16_kernel<<<grid, width * per, 0, stream>>>(a.p, a.ld, a.stride, rows, cols, copies, per, dst);
    }
    launch_check(be, "gemm: conversion to bf16");
}

// The operand in bf16: its BF16 copy as it lies, else rounded into scratch slot `slot`, packed
// (ld = rows), one copy when it is shared by the batch (stride 0).
static GemmArg16 to_bf16(const Backend *be, GemmArg a, int rows, int cols, int batch, int slot) {
    if (a.p16) {
        GemmArg16 as_it_lies = {a.p16, a.ld, a.stride};
        return as_it_lies;
    }
    int copies = a.stride ? batch : 1;
    size_t n = (size_t)rows * cols * copies;
    uint16_t *dst = (uint16_t *)cuda_workspace(be, slot, n * sizeof(uint16_t));
    if (n && dst) convert(be, a, rows, cols, copies, dst);
    GemmArg16 out = {dst, rows, a.stride ? (long long)rows * cols : 0};
    return out;
}

void cuda_gemm_operands_bf16(const Backend *be, cublasOperation_t ta, cublasOperation_t tb, int m,
                             int n, int k, GemmArg A, GemmArg B, int batch, GemmArg16 *a,
                             GemmArg16 *b) {
    *a = ta == CUBLAS_OP_N ? to_bf16(be, A, m, k, batch, WORK_GEMM_A) : to_bf16(be, A, k, m, batch, WORK_GEMM_A);
    *b = tb == CUBLAS_OP_N ? to_bf16(be, B, k, n, batch, WORK_GEMM_B) : to_bf16(be, B, n, k, batch, WORK_GEMM_B);
}

static void gemm_bf16(const Backend *be, const char *what, cublasOperation_t ta,
                      cublasOperation_t tb, int m, int n, int k, float alpha, GemmArg A, GemmArg B,
                      float beta, float *C, int ldc, long long stride_c, int batch) {
    GemmArg16 a, b;
    cuda_gemm_operands_bf16(be, ta, tb, m, n, k, A, B, batch, &a, &b);
    cublas_check(be, cublasGemmStridedBatchedEx(cuda_ctx(be)->blas, ta, tb, m, n, k, &alpha, a.p,
                                                CUDA_R_16BF, a.ld, a.stride, b.p, CUDA_R_16BF, b.ld,
                                                b.stride, &beta, C, CUDA_R_32F, ldc, stride_c, batch,
                                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), what);
}

void cuda_gemm_scaled(const Backend *be, const char *what, cublasOperation_t ta,
                      cublasOperation_t tb, int m, int n, int k, float alpha, GemmArg A, GemmArg B,
                      float beta, float *C, int ldc, long long stride_c, int batch) {
    if (cuda_ctx(be)->precision == PRECISION_BF16) {
        gemm_bf16(be, what, ta, tb, m, n, k, alpha, A, B, beta, C, ldc, stride_c, batch);
        return;
    }
    cublasHandle_t h = cuda_ctx(be)->blas;
    if (batch == 1)
        cublas_check(be, cublasSgemm(h, ta, tb, m, n, k, &alpha, A.p, A.ld, B.p, B.ld, &beta, C, ldc), what);
    else
        cublas_check(be, cublasSgemmStridedBatched(h, ta, tb, m, n, k, &alpha, A.p, A.ld, A.stride, B.p,
                                                   B.ld, B.stride, &beta, C, ldc, stride_c, batch), what);
}

void cuda_gemm(const Backend *be, const char *what, cublasOperation_t ta, cublasOperation_t tb,
               int m, int n, int k, GemmArg A, GemmArg B, float beta, float *C, int ldc,
               long long stride_c, int batch) {
    cuda_gemm_scaled(be, what, ta, tb, m, n, k, 1.0f, A, B, beta, C, ldc, stride_c, batch);
}
