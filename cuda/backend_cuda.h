// The CUDA backend (cuBLAS for the GEMMs, own kernels for the rest) behind src/math/backend.h.
#ifndef FGPIPE_BACKEND_CUDA_H
#define FGPIPE_BACKEND_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

#include "backend.h"

// GPUs this process can use (0 when there is no driver or no device).
int backend_cuda_device_count(void);
// Makes a backend on GPU `device` (0 .. count-1).
int backend_cuda_create(int device, Backend *out, FgError *err);
void backend_cuda_destroy(Backend *be);
// The GEMMs' arithmetic (Precision, backend.h): FP32 (the default), TF32 or BF16.
int backend_cuda_set_precision(Backend *be, int precision, FgError *err);
// Linear GEMMs with a bias that cuBLASLt had no kernel for, run as a GEMM then a bias kernel
// (cuda/gemm_lt.cu), since the backend was made: 0 when every bias was fused.
long backend_cuda_unfused_bias_gemms(const Backend *be);

#ifdef __cplusplus
}
#endif

#endif
