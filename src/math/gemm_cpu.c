// fg_sgemm (gemm.h) through oneDNN's sgemm (FG_GEMM_ONEDNN) or OpenBLAS's cblas_sgemm.
#include "gemm.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef FG_GEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif

// k = 0: C = beta C (cblas's meaning; oneDNN refuses an empty product).
static void scale_rows(int m, int n, float beta, float *C, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
}

void fg_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        scale_rows(m, n, beta, C, ldc);
        return;
    }
#ifdef FG_GEMM_ONEDNN
    dnnl_status_t s = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb,
                                 beta, C, ldc);
    if (s != dnnl_success) {  // only bad arguments fail: a bug of the caller's shapes
        fprintf(stderr, "fgpipe: internal error: dnnl_sgemm(%c, %c, %d, %d, %d, lda %d, ldb %d, ldc %d): status %d\n",
                trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, lda, ldb, ldc, (int)s);
        abort();
    }
#else
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, A, lda, B, ldb, beta, C, ldc);
#endif
}

const char *fg_sgemm_library(void) {
#ifdef FG_GEMM_ONEDNN
    return "oneDNN";
#else
    return "OpenBLAS";
#endif
}
