// Loading the GPU module (cuda_module.h) from beside the running binary.
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cuda_module.h"

int cuda_module_load(const CudaModule **out, void **handle, FgError *err) {
    char exe[PATH_MAX], path[PATH_MAX + sizeof CUDA_MODULE_FILE + 1];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return fg_fail(err, FG_ERR_INTERNAL, "device = cuda: cannot find the running binary "
                               "(/proc/self/exe) to load %s beside it", CUDA_MODULE_FILE);
    exe[n] = '\0';
    snprintf(path, sizeof path, "%s/%s", dirname(exe), CUDA_MODULE_FILE);
    *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*handle) return fg_fail(err, FG_ERR_INPUT, "device = cuda: cannot load the GPU module %s: %s",
                                 path, dlerror());
    CudaModuleEntry entry;
    *(void **)&entry = dlsym(*handle, CUDA_MODULE_ENTRY);  // POSIX's way from void * to a function
    if (!entry) {
        int rc = fg_fail(err, FG_ERR_INPUT, "device = cuda: %s has no %s: %s", path,
                         CUDA_MODULE_ENTRY, dlerror());
        dlclose(*handle);
        *handle = NULL;
        return rc;
    }
    *out = entry();
    return FG_OK;
}

void cuda_module_unload(void *handle) {
    if (handle) dlclose(handle);
}
