// The CPU's one matrix product: every FP32 GEMM of the layers, the head and the backend goes
// through fg_sgemm, so the library behind it is chosen in one place (FGPIPE_CPU_GEMM at
// configure time): oneDNN's sgemm by default, 1.5x OpenBLAS's on GPT-2's shapes on a quiet
// 2-core machine here (docs/results/cpu.md); OpenBLAS with -DFGPIPE_CPU_GEMM=openblas.
#ifndef FGPIPE_GEMM_H
#define FGPIPE_GEMM_H

// C [m, n] = alpha op(A) op(B) + beta C, row-major; op(X) = X^T when trans_x. lda, ldb, ldc are
// the stored rows' strides (floats). Deterministic: the same inputs and shapes give the same
// bits (the tests' bitwise pipeline and restart checks rely on it).
void fg_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

// The library behind fg_sgemm, for run reports: "oneDNN" or "OpenBLAS".
const char *fg_sgemm_library(void);

#endif
