// The CUDA backend: one stream per stage, memory, error reporting, and the Backend table.
// Kernels live in layers_cuda.cu, sequence_cuda.cu, attention_cuda.cu, attention_gemm.cu,
// gemm_cuda.cu, gemm_lt.cu, loss_cuda.cu, tangent_cuda.cu, vector_cuda.cu and bf16_cuda.cu.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "cuda_internal.h"

void cuda_note(const Backend *be, const char *what, const char *why) {
    CudaCtx *c = cuda_ctx(be);
    if (!c->error[0]) snprintf(c->error, sizeof c->error, "GPU %d: %s: %s", c->device, what, why);
}

static void *cu_alloc(const Backend *be, size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        // Like fg_alloc_*: every caller would only report it and stop.
        fprintf(stderr, "fgpipe: error: GPU %d: out of memory allocating %zu bytes (%s)\n",
                cuda_ctx(be)->device, bytes, cudaGetErrorString(e));
        abort();
    }
    cuda_check(be, cudaMemsetAsync(p, 0, bytes, cuda_ctx(be)->stream), "zeroing new memory");
    return p;
}

static void cu_free(const Backend *be, void *p) {
    if (p) cuda_check(be, cudaFree(p), "cudaFree");
}

// Pageable host memory: the call returns once the source has been read.
static void cu_upload(const Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda_ctx(be)->stream),
               "copy to the GPU");
}

// The host reads dst right after: wait for it.
static void cu_download(const Backend *be, void *dst, const void *src, size_t bytes) {
    cudaStream_t s = cuda_ctx(be)->stream;
    cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "copy from the GPU");
    cuda_check(be, cudaStreamSynchronize(s), "copy from the GPU");
}

static void cu_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    if (dst == src) return;
    cuda_check(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_ctx(be)->stream),
               "copy on the GPU");
}

static void cu_zero(const Backend *be, void *dst, size_t bytes) {
    cuda_check(be, cudaMemsetAsync(dst, 0, bytes, cuda_ctx(be)->stream), "cudaMemsetAsync");
}

// A streamed stage's host slots: page-locked (registered) memory, 4 KiB-aligned for direct I/O.
static void *cu_host_alloc(const Backend *be, size_t bytes) {
    size_t size = (bytes + 4095) / 4096 * 4096;
    void *p = aligned_alloc(4096, size ? size : 4096);
    if (!p) {
        fprintf(stderr, "fgpipe: error: out of host memory allocating %zu bytes of slots\n", bytes);
        abort();
    }
    cuda_check(be, cudaHostRegister(p, size ? size : 4096, cudaHostRegisterDefault), "page-locking host slots");
    return p;
}

static void cu_host_free(const Backend *be, void *p) {
    if (!p) return;
    cuda_check(be, cudaHostUnregister(p), "releasing page-locked host slots");
    free(p);
}

static cudaStream_t on(const CudaCtx *c, int stream) {
    return stream == BACKEND_COPY_STREAM ? c->copy_stream : c->stream;
}

static void cu_copy_async(const Backend *be, void *dst, const void *src, size_t bytes, int to_device) {
    CudaCtx *c = cuda_ctx(be);
    cuda_check(be, cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                   c->copy_stream), to_device ? "copy of a layer to the GPU" : "copy of a layer from the GPU");
}

static void *cu_fence_new(const Backend *be) {
    cudaEvent_t e = NULL;
    cuda_check(be, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return (void *)e;
}

static void cu_fence_free(const Backend *be, void *fence) {
    if (fence) cuda_check(be, cudaEventDestroy((cudaEvent_t)fence), "cudaEventDestroy");
}

static void cu_fence_mark(const Backend *be, void *fence, int stream) {
    cuda_check(be, cudaEventRecord((cudaEvent_t)fence, on(cuda_ctx(be), stream)), "cudaEventRecord");
}

static void cu_fence_wait(const Backend *be, void *fence, int stream) {
    cuda_check(be, cudaStreamWaitEvent(on(cuda_ctx(be), stream), (cudaEvent_t)fence, 0), "cudaStreamWaitEvent");
}

static int cu_sync(const Backend *be, FgError *err);

static int cu_fence_sync(const Backend *be, void *fence, FgError *err) {
    cuda_check(be, cudaEventSynchronize((cudaEvent_t)fence), "a copy of a layer");
    CudaCtx *c = cuda_ctx(be);
    if (!c->error[0]) return FG_OK;
    return cu_sync(be, err);  // reports it
}

static int cu_sync(const Backend *be, FgError *err) {
    CudaCtx *c = cuda_ctx(be);
    cuda_check(be, cudaStreamSynchronize(c->stream), "a queued GPU operation");
    cuda_check(be, cudaStreamSynchronize(c->copy_stream), "a queued copy of a layer");
    if (!c->error[0]) return FG_OK;
    fg_fail(err, FG_ERR_INTERNAL, "%s", c->error);
    c->error[0] = 0;
    return FG_ERR_INTERNAL;
}

double *cuda_partials(const Backend *be, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    if (n > c->partial_cap) {
        cudaStreamSynchronize(c->stream);
        cudaFree(c->partial);
        cudaFreeHost(c->host_partial);
        c->partial_cap = n < 4096 ? 4096 : n;
        cuda_check(be, cudaMalloc(&c->partial, c->partial_cap * sizeof(double)), "cudaMalloc");
        cuda_check(be, cudaMallocHost(&c->host_partial, c->partial_cap * sizeof(double)), "cudaMallocHost");
    }
    return c->partial;
}

const double *cuda_download_partials(const Backend *be, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    cuda_check(be, cudaMemcpyAsync(c->host_partial, c->partial, n * sizeof(double),
                                   cudaMemcpyDeviceToHost, c->stream), "copy of partial sums");
    cuda_check(be, cudaStreamSynchronize(c->stream), "a reduction");
    return c->host_partial;
}

const float *cuda_upload_coeff(const Backend *be, const float *host, size_t n) {
    CudaCtx *c = cuda_ctx(be);
    if (n > c->coeff_cap) {
        cudaStreamSynchronize(c->stream);
        cudaFree(c->coeff);
        c->coeff_cap = n < 1024 ? 1024 : n;
        cuda_check(be, cudaMalloc(&c->coeff, c->coeff_cap * sizeof(float)), "cudaMalloc");
    }
    cu_upload(be, c->coeff, host, n * sizeof(float));
    return c->coeff;
}

void *cuda_workspace(const Backend *be, int slot, size_t bytes) {
    CudaCtx *c = cuda_ctx(be);
    if (bytes > c->work_cap[slot]) {
        cudaStreamSynchronize(c->stream);  // a kernel queued earlier may still read the old one
        cudaFree(c->work[slot]);
        c->work[slot] = NULL;
        c->work_cap[slot] = bytes;
        cuda_check(be, cudaMalloc(&c->work[slot], bytes), "cudaMalloc (scratch)");
        if (!c->work[slot]) c->work_cap[slot] = 0;
    }
    return c->work[slot];
}

extern "C" int backend_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear it: no driver or no device is an answer, not a failure
        return 0;
    }
    return n;
}

// cuBLASLt's workspace: what NVIDIA suggests for Hopper (32 MiB), ample for Ampere.
enum { LT_WORKSPACE_BYTES = 32 << 20 };

// cuBLAS's handle on the stage's stream, and cuBLASLt's with its workspace (gemm_lt.cu). On
// failure nothing of them is left.
static int create_blas(CudaCtx *c, FgError *err) {
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS)
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: cublasCreate: %s", c->device, cublasGetStatusString(s));
    cublasSetStream(c->blas, c->stream);
    // FP32 GEMMs stay FP32 (no TF32): the CPU reference is FP32 and tests compare against it.
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    if ((s = cublasLtCreate(&c->lt)) != CUBLAS_STATUS_SUCCESS) {
        cublasDestroy(c->blas);
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: cublasLtCreate: %s", c->device, cublasLtGetStatusString(s));
    }
    cudaError_t e = cudaMalloc(&c->lt_work, LT_WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        cublasLtDestroy(c->lt);
        cublasDestroy(c->blas);
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: cuBLASLt workspace (%d bytes): %s", c->device,
                       (int)LT_WORKSPACE_BYTES, cudaGetErrorString(e));
    }
    c->lt_work_bytes = LT_WORKSPACE_BYTES;
    return FG_OK;
}

extern "C" int backend_cuda_create(int device, Backend *out, FgError *err) {
    int count = backend_cuda_device_count();
    if (count == 0) return fg_fail(err, FG_ERR_INPUT, "device = cuda, but no CUDA GPU is visible to this process");
    if (device < 0 || device >= count)
        return fg_fail(err, FG_ERR_INPUT, "device = cuda: GPU %d asked for, %d visible", device, count);
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess)
        return fg_fail(err, FG_ERR_INTERNAL, "cudaSetDevice(%d): %s", device, cudaGetErrorString(e));
    CudaCtx *c = (CudaCtx *)calloc(1, sizeof *c);
    c->device = device;
    c->precision = PRECISION_FP32;
    c->attention = &attention_tiled;
    if ((e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        free(c);
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: creating a stream: %s", device, cudaGetErrorString(e));
    }
    if ((e = cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cudaStreamDestroy(c->stream);
        free(c);
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: creating the copy stream: %s", device, cudaGetErrorString(e));
    }
    if (create_blas(c, err)) {
        cudaStreamDestroy(c->copy_stream);
        cudaStreamDestroy(c->stream);
        free(c);
        return FG_ERR_INTERNAL;
    }
    Backend b;
    memset(&b, 0, sizeof b);
    b.name = "cuda";
    b.on_device = 1;
    b.ctx = c;
    b.alloc = cu_alloc;
    b.free = cu_free;
    b.upload = cu_upload;
    b.download = cu_download;
    b.copy = cu_copy;
    b.host_alloc = cu_host_alloc;
    b.host_free = cu_host_free;
    b.copy_async = cu_copy_async;
    b.fence_new = cu_fence_new;
    b.fence_free = cu_fence_free;
    b.fence_mark = cu_fence_mark;
    b.fence_wait = cu_fence_wait;
    b.fence_sync = cu_fence_sync;
    b.zero = cu_zero;
    b.narrow16 = cuda_narrow16;
    b.widen16 = cuda_widen16;
    b.round16 = cuda_round16;
    b.scale = cuda_scale;
    b.axpy = cuda_axpy;
    b.dot = cuda_dot;
    b.forward = cuda_forward;
    b.jvp = cuda_jvp;
    b.backward = cuda_backward;
    b.loss_forward = cuda_loss_forward;
    b.matmul = cuda_matmul;
    b.loss_jvp = cuda_loss_jvp;
    b.loss_jvp_rows = cuda_loss_jvp_rows;
    b.loss_backward = cuda_loss_backward;
    b.head_forward = cuda_head_forward;
    b.head_jvp = cuda_head_jvp;
    b.head_activity_grad = cuda_head_activity_grad;
    b.tangent_fill = cuda_tangent_fill;
    b.tangent_axpy = cuda_tangent_axpy;
    b.tangent_dot = cuda_tangent_dot;
    b.tangent_add_rows = cuda_tangent_add_rows;
    b.optimizer_step = cuda_optimizer_step;
    b.sync = cu_sync;
    *out = b;
    return FG_OK;
}

extern "C" int backend_cuda_set_precision(Backend *be, int precision, FgError *err) {
    CudaCtx *c = cuda_ctx(be);
    if (precision < PRECISION_FP32 || precision > PRECISION_BF16)
        return fg_fail(err, FG_ERR_INPUT, "GPU %d: precision %d is not fp32, tf32 or bf16", c->device, precision);
    // TF32 is cuBLAS's math mode for FP32 GEMMs; BF16 reads a weights' BF16 copy, rounds the
    // other operands (gemm_cuda.cu).
    cublasMath_t mode = precision == PRECISION_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    cublasStatus_t s = cublasSetMathMode(c->blas, mode);
    if (s != CUBLAS_STATUS_SUCCESS)
        return fg_fail(err, FG_ERR_INTERNAL, "GPU %d: cublasSetMathMode: %s", c->device, cublasGetStatusString(s));
    c->precision = precision;
    c->attention = precision == PRECISION_FP32 ? &attention_tiled : &attention_gemm;
    return FG_OK;
}

extern "C" long backend_cuda_unfused_bias_gemms(const Backend *be) {
    return cuda_ctx(be)->unfused_bias;
}

extern "C" void backend_cuda_destroy(Backend *be) {
    CudaCtx *c = cuda_ctx(be);
    if (!c) return;
    cudaStreamSynchronize(c->stream);
    cudaStreamSynchronize(c->copy_stream);
    cudaFree(c->partial);
    cudaFreeHost(c->host_partial);
    cudaFree(c->coeff);
    for (int w = 0; w < CUDA_WORK_SLOTS; w++) cudaFree(c->work[w]);
    cudaFree(c->lt_work);
    cublasLtDestroy(c->lt);
    cublasDestroy(c->blas);
    cudaStreamDestroy(c->copy_stream);
    cudaStreamDestroy(c->stream);
    free(c);
    be->ctx = NULL;
}
