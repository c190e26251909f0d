// FG_HD marks a function of the shared math headers (philox.h, activation_math.h,
// optimizer_math.h, loss_math.h): static inline in C, and under nvcc compiled for the host and
// the device too, so the CPU and the GPU run the same formula, operation for operation.
#ifndef FGPIPE_HOST_DEVICE_H
#define FGPIPE_HOST_DEVICE_H

#ifdef __CUDACC__
#define FG_HD __host__ __device__ static inline
#else
#define FG_HD static inline
#endif

#endif
