// The layers' GEMMs at the backend's precision (config key `precision`): FP32 (cublasSgemm,
// no TF32: the CPU reference's numbers), TF32 (the same call under
// CUBLAS_TF32_TENSOR_OP_MATH, set once on the handle) or BF16 (the operands converted to bf16
// in scratch, products on tensor cores with FP32 accumulation and FP32 output). Outputs,
// weights and optimizer state stay FP32 in every mode.
#include "cuda_internal.h"

void cuda_gemm(const Backend *be, const char *what, cublasOperation_t ta, cublasOperation_t tb,
               int m, int n, int k, GemmArg A, GemmArg B, float beta, float *C, int ldc,
               long long stride_c, int batch) {
    const float one = 1.0f;
    cublasHandle_t h = cuda_ctx(be)->blas;
    if (batch == 1)
        cublas_check(be, cublasSgemm(h, ta, tb, m, n, k, &one, A.p, A.ld, B.p, B.ld, &beta, C, ldc), what);
    else
        cublas_check(be, cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, A.p, A.ld, A.stride, B.p,
                                                   B.ld, B.stride, &beta, C, ldc, stride_c, batch), what);
}
