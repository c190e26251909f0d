// fg_sgemm (gemm.h) and the FP32 Gemm through oneDNN's sgemm (FG_GEMM_ONEDNN) or OpenBLAS's cblas_sgemm.
#include "gemm.h"

#include "backend.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef FG_GEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#else
#include <cblas.h>
#endif

void fg_gemm_scale(int m, int n, float beta, float *C, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
}

void fg_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        fg_gemm_scale(m, n, beta, C, ldc);
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

void fg_gemm(const Gemm *g, int trans_a, int trans_b, int m, int n, int k, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    if (!g) {
        fg_sgemm(trans_a, trans_b, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    g->run(g, m, n, k, alpha, gemm_f32(A, lda, trans_a), gemm_f32(B, ldb, trans_b), beta, C, ldc);
}

void fg_gemm_op(const Gemm *g, int m, int n, int k, float alpha, GemmOperand A, GemmOperand B,
                float beta, float *C, int ldc) {
    const Gemm *use = g ? g : &gemm_fp32;
    use->run(use, m, n, k, alpha, A, B, beta, C, ldc);
}

static void fp32_run(const Gemm *g, int m, int n, int k, float alpha, GemmOperand A, GemmOperand B,
                     float beta, float *C, int ldc) {
    (void)g;
    if (A.type != FG_F32 || B.type != FG_F32) {  // a BF16 copy is made only for a BF16 Gemm
        fprintf(stderr, "fgpipe: internal error: a BF16 operand reached the FP32 GEMM\n");
        abort();
    }
    fg_sgemm(A.trans, B.trans, m, n, k, alpha, A.data, A.ld, B.data, B.ld, beta, C, ldc);
}

#ifdef FG_GEMM_ONEDNN
const Gemm gemm_fp32 = {"oneDNN sgemm", PRECISION_FP32, fp32_run, NULL};
#else
const Gemm gemm_fp32 = {"OpenBLAS sgemm", PRECISION_FP32, fp32_run, NULL};
#endif
