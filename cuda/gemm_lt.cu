// The linear layers' GEMMs with the bias fused (issue 18): cublasLtMatmul with the BIAS
// epilogue, D = op(A) op(B) + beta C + bias, the bias added to every column of D, that is per
// row of the column-major result: per output feature of the row-major y = x W^T. C and D are
// one buffer (in place, ldc = ldd), so a residual layer's beta = 1 adds into the carried x.
// The bias is FP32: cublasLt.h wants D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE), and D is
// FP32 in every precision. Precision as cuda_gemm's: FP32 (CUBLAS_COMPUTE_32F), TF32
// (CUBLAS_COMPUTE_32F_FAST_TF32: cuBLASLt ignores the handle's math mode) or BF16 (the operands
// as cuda_gemm_operands_bf16 gives them: the weights' BF16 copy as it lies, the input rounded;
// FP32 accumulation and output).
// Determinism: cuBLAS's guide ("Results reproducibility") promises the same bits every run on
// GPUs of one architecture and SM count with one toolkit, for cublasLtMatmul when the caller
// owns its workspace, as here. The algorithm is the heuristic's first for the call's shapes,
// types and operand alignments, the alignments capped at 16 bytes so that where a stage's cut
// falls does not change it when the widths are multiples of 4 floats.
#include "cuda_internal.h"

// One call's cuBLASLt descriptors (C's layout serves D too).
typedef struct {
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t pref;
} LtCall;

static void lt_free(LtCall *d) {
    if (d->pref) cublasLtMatmulPreferenceDestroy(d->pref);
    if (d->c) cublasLtMatrixLayoutDestroy(d->c);
    if (d->b) cublasLtMatrixLayoutDestroy(d->b);
    if (d->a) cublasLtMatrixLayoutDestroy(d->a);
    if (d->op) cublasLtMatmulDescDestroy(d->op);
}

// What the heuristic may assume of an operand's address (and of every matrix of its batch):
// the default, 256 bytes, would pick kernels that fault on a branch at an offset in a token.
static uint32_t alignment(const void *p, long long stride, size_t elem) {
    uintptr_t bits = (uintptr_t)p | (uintptr_t)(stride * (long long)elem);
    uint32_t a = 16;
    while (a > 1 && bits % a) a /= 2;
    return a;
}

static cublasStatus_t layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int rows, int cols,
                             int ld, long long stride, int batch) {
    cublasStatus_t s = cublasLtMatrixLayoutCreate(l, t, rows, cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS || batch == 1) return s;
    s = cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (s != CUBLAS_STATUS_SUCCESS) return s;
    return cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                            sizeof stride);
}

// The operation: transposes, compute type, the BIAS epilogue and its vector (set before the
// heuristic, which reads the pointer's alignment).
static cublasStatus_t describe_op(LtCall *d, int precision, cublasOperation_t ta,
                                  cublasOperation_t tb, const float *bias, long long bias_stride) {
    cublasComputeType_t compute = precision == PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cudaDataType_t bias_type = CUDA_R_32F;
    struct {
        cublasLtMatmulDescAttributes_t attr;
        const void *v;
        size_t n;
    } set[] = {{CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta},
               {CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb},
               {CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue},
               {CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias},
               {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type},
               {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride, sizeof bias_stride}};
    cublasStatus_t s = cublasLtMatmulDescCreate(&d->op, compute, CUDA_R_32F);
    for (size_t i = 0; s == CUBLAS_STATUS_SUCCESS && i < sizeof set / sizeof set[0]; i++)
        s = cublasLtMatmulDescSetAttribute(d->op, set[i].attr, set[i].v, set[i].n);
    return s;
}

// The heuristic's limits: our workspace, and the operands' real alignments (A, B, C = D).
static cublasStatus_t describe_pref(LtCall *d, uint64_t work_bytes, const uint32_t align[3]) {
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&d->pref);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(d->pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &work_bytes, sizeof work_bytes);
    cublasLtMatmulPreferenceAttributes_t attr[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < 4; i++)
        s = cublasLtMatmulPreferenceSetAttribute(d->pref, attr[i], &align[i < 3 ? i : 2], sizeof align[0]);
    return s;
}

int cuda_gemm_bias(const Backend *be, const char *what, cublasOperation_t ta, cublasOperation_t tb,
                   int m, int n, int k, GemmArg A, GemmArg B, float beta, float *C, int ldc,
                   long long stride_c, int batch, const float *bias, long long bias_stride) {
    CudaCtx *c = cuda_ctx(be);
    GemmArg16 a = {A.p, A.ld, A.stride}, b = {B.p, B.ld, B.stride};
    cudaDataType_t t = CUDA_R_32F;
    size_t elem = sizeof(float);
    if (c->precision == PRECISION_BF16) {  // rounded here; again if we return 0 (rare)
        cuda_gemm_operands_bf16(be, ta, tb, m, n, k, A, B, batch, &a, &b);
        t = CUDA_R_16BF, elem = 2;
    }
    int strided = batch > 1;  // one matrix: its stride is never applied
    const uint32_t align[3] = {alignment(a.p, strided * a.stride, elem), alignment(b.p, strided * b.stride, elem),
                               alignment(C, strided * stride_c, sizeof(float))};
    LtCall d = {0};
    cublasStatus_t s = describe_op(&d, c->precision, ta, tb, bias, bias_stride);
    int a_n = ta == CUBLAS_OP_N, b_n = tb == CUBLAS_OP_N;  // stored as op() sees it
    if (s == CUBLAS_STATUS_SUCCESS) s = layout(&d.a, t, a_n ? m : k, a_n ? k : m, a.ld, a.stride, batch);
    if (s == CUBLAS_STATUS_SUCCESS) s = layout(&d.b, t, b_n ? k : n, b_n ? n : k, b.ld, b.stride, batch);
    if (s == CUBLAS_STATUS_SUCCESS) s = layout(&d.c, CUDA_R_32F, m, n, ldc, stride_c, batch);
    if (s == CUBLAS_STATUS_SUCCESS) s = describe_pref(&d, c->lt_work_bytes, align);
    cublasLtMatmulHeuristicResult_t h;
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(c->lt, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &h, &found);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && !found)) {
        lt_free(&d);
        return 0;  // no kernel for this call: the caller's plain GEMM and bias kernel
    }
    const float one = 1.0f;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmul(c->lt, d.op, &one, a.p, d.a, b.p, d.b, &beta, C, d.c, C, d.c, &h.algo,
                           c->lt_work, c->lt_work_bytes, c->stream);
    cublaslt_check(be, s, what);
    lt_free(&d);
    return 1;
}
