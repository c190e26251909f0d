// The CPU's matrix products, in FP32 (fg_sgemm) or at the precision a backend chose once (a
// Gemm). fg_sgemm's library is FGPIPE_CPU_GEMM's at configure time: oneDNN's sgemm by default,
// 1.5x OpenBLAS's on GPT-2's shapes on a quiet 2-core machine here (docs/results/cpu.md);
// OpenBLAS with -DFGPIPE_CPU_GEMM=openblas. A Gemm (backend_cpu_create) is FP32 through
// fg_sgemm, or BF16 inputs with FP32 accumulation through oneDNN's matmul (gemm_bf16.c). The
// layers reach it through fg_gemm and their Layer's `gemm`, so nothing tests the precision per
// call.
#ifndef FGPIPE_GEMM_H
#define FGPIPE_GEMM_H

#include <stdint.h>

#include "common.h"

// C [m, n] = alpha op(A) op(B) + beta C, row-major; op(X) = X^T when trans_x. lda, ldb, ldc are
// the stored rows' strides (floats). Deterministic: the same inputs and shapes give the same
// bits (the tests' bitwise pipeline and restart checks rely on it).
void fg_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

// C [m, n] = beta C (beta 0: zeros), what a product with k = 0 gives.
void fg_gemm_scale(int m, int n, float beta, float *C, int ldc);

// The library behind fg_sgemm, for run reports: "oneDNN" or "OpenBLAS".
const char *fg_sgemm_library(void);

// An operand's element type: a BF16 operand (a layer's BF16 weights copy) passes through a BF16
// Gemm without conversion.
typedef enum { FG_F32, FG_BF16 } FgDtype;

// One operand as stored: rows `ld` elements apart, read transposed when trans.
typedef struct {
    const void *data;
    int ld, trans;
    FgDtype type;
} GemmOperand;

static inline GemmOperand gemm_f32(const float *data, int ld, int trans) {
    return (GemmOperand){data, ld, trans, FG_F32};
}

// A layer's weights from element `at` on: their BF16 copy where the call has one (Layer.params16,
// set only for a BF16 Gemm), else the FP32 weights, which a BF16 Gemm rounds per call.
static inline GemmOperand gemm_weights(const float *p, const uint16_t *p16, size_t at, int ld,
                                       int trans) {
    if (p16) return (GemmOperand){p16 + at, ld, trans, FG_BF16};
    return gemm_f32(p + at, ld, trans);
}

typedef struct Gemm Gemm;
struct Gemm {
    const char *name;  // for reports: "oneDNN sgemm", "oneDNN bf16 matmul", ...
    int precision;     // Precision (backend.h)
    // C [m, n] = alpha op(A) op(B) + beta C, with op(A) [m, k] and op(B) [k, n].
    void (*run)(const Gemm *g, int m, int n, int k, float alpha, GemmOperand A, GemmOperand B,
                float beta, float *C, int ldc);
    void *state;  // the product's own (gemm_bf16.c: oneDNN's engine, primitives, scratch)
};

// The FP32 Gemm: fg_sgemm behind the operand interface (FP32 operands only).
extern const Gemm gemm_fp32;

// fg_sgemm's arguments through g; g NULL (a Layer no backend set up: tests, tools) is FP32.
void fg_gemm(const Gemm *g, int trans_a, int trans_b, int m, int n, int k, float alpha,
             const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
// The same on operands (a BF16 one only through a BF16 Gemm).
void fg_gemm_op(const Gemm *g, int m, int n, int k, float alpha, GemmOperand A, GemmOperand B,
                float beta, float *C, int ldc);

// The BF16 Gemm (gemm_bf16.c): oneDNN's BF16 matmul, FP32 operands rounded to BF16 per call
// (round to nearest even), FP32 accumulation and output, primitives cached by shape. FG_OK, or
// an error naming what is missing (cpu_bf16_missing, or a build without oneDNN).
int gemm_bf16_create(Gemm *out, FgError *err);
void gemm_bf16_destroy(Gemm *g);

#endif
