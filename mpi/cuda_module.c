// The table of the GPU module (cuda_module.h), built into libfgpipe_cuda.so with the CUDA
// backend and the NCCL setup.
#include "cuda_module.h"

#include "backend_cuda.h"
#include "nccl_setup.h"

static const CudaModule module = {
    .device_count = backend_cuda_device_count,
    .create = backend_cuda_create,
    .set_precision = backend_cuda_set_precision,
    .destroy = backend_cuda_destroy,
    .nccl_setup = nccl_setup,
    .nccl_free = nccl_setup_free,
};

__attribute__((visibility("default"))) const CudaModule *fgpipe_cuda_module(void) { return &module; }
