// The GPU side of the binary (the CUDA backend and the NCCL links), loaded at run time only by a
// run with device = cuda. Linked into the binary, the CUDA libraries cost every rank about 150 MiB
// of resident memory at start-up (the runtime's and cuBLASLt's initialisers: 187 against 36 MiB
// for a small CPU run, docs/out-of-core.md), which a CPU run, and a memory budget, pays for
// nothing. The module lives beside the binary (CUDA_MODULE_FILE) and hands out one table.
#ifndef FGPIPE_CUDA_MODULE_H
#define FGPIPE_CUDA_MODULE_H

#include <mpi.h>

#include "backend.h"
#include "transport.h"

#define CUDA_MODULE_FILE "libfgpipe_cuda.so"
#define CUDA_MODULE_ENTRY "fgpipe_cuda_module"

// cuda/backend_cuda.h's and mpi/nccl_setup.h's calls that main makes.
typedef struct {
    int (*device_count)(void);
    int (*create)(int device, Backend *out, FgError *err);
    int (*set_precision)(Backend *be, int precision, FgError *err);
    void (*destroy)(Backend *be);
    int (*nccl_setup)(MPI_Comm world, Transport *mpi, const Backend *be, Transport *out, int *made,
                      FgError *err);
    void (*nccl_free)(Transport *t);
} CudaModule;

// The module's one exported function (CUDA_MODULE_ENTRY).
typedef const CudaModule *(*CudaModuleEntry)(void);

// Loads CUDA_MODULE_FILE from the directory of the running binary: *out its table, *handle what
// cuda_module_unload closes. An error names the file and the loader's reason.
int cuda_module_load(const CudaModule **out, void **handle, FgError *err);
void cuda_module_unload(void *handle);

#endif
