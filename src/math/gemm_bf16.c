// The BF16 Gemm (gemm.h): oneDNN's matmul on BF16 operands with FP32 accumulation and an FP32
// result. FP32 operands are rounded into dense BF16 scratch per call (bf16.h); a BF16 operand is
// read where it lies. Creating a primitive costs far more than running a small one, so each
// shape's primitive is made once and kept in the Gemm's state (a few dozen shapes per model).
// oneDNN's fast kernels (brg:avx512_core_bf16) want a dense result: a result inside wider rows
// (a transformer's residual stream) is computed into dense scratch, then added in.
#include "gemm.h"

#include <stdlib.h>

#include "backend.h"
#include "bf16.h"

#ifdef FG_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

enum { CACHE_SLOTS = 64 };

// What a primitive is made for: the shapes, strides and the alpha, beta it applies.
typedef struct {
    int m, n, k, ta, tb, lda, ldb, ldc;
    float alpha, beta;
} MatmulKey;

typedef struct {
    MatmulKey key;
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;  // their data handles are set per call
} Matmul;

typedef struct {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    Bf16Convert convert;
    Matmul cache[CACHE_SLOTS];
    int used, next;  // slots filled; the next one replaced once all are
    uint16_t *a16, *b16;
    float *c32;
    size_t a_cap, b_cap, c_cap;  // elements
} Bf16State;

static void check(dnnl_status_t s, const char *what, const MatmulKey *k) {
    if (s == dnnl_success) return;  // only bad shapes or out of memory fail: a bug, or fatal
    fprintf(stderr, "fgpipe: internal error: oneDNN bf16 matmul, %s (m %d, n %d, k %d, trans %d "
            "%d, ld %d %d %d): status %d\n", what, k->m, k->n, k->k, k->ta, k->tb, k->lda, k->ldb, k->ldc, (int)s);
    abort();
}

static int same_key(const MatmulKey *a, const MatmulKey *b) {
    return a->m == b->m && a->n == b->n && a->k == b->k && a->ta == b->ta && a->tb == b->tb &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldc == b->ldc && a->alpha == b->alpha &&
           a->beta == b->beta;
}

static void matmul_release(Matmul *mm) {
    dnnl_primitive_destroy(mm->prim);
    dnnl_memory_destroy(mm->a), dnnl_memory_destroy(mm->b), dnnl_memory_destroy(mm->c);
}

// op(A) [m, k] and op(B) [k, n] as strides over their stored rows; C [m, n] rows ldc apart.
static void matmul_make(Bf16State *s, const MatmulKey *k, Matmul *mm) {
    dnnl_memory_desc_t da, db, dc;
    dnnl_dims_t sa = {k->m, k->k}, sb = {k->k, k->n}, sc = {k->m, k->n};
    dnnl_dims_t st_a = {k->ta ? 1 : k->lda, k->ta ? k->lda : 1};
    dnnl_dims_t st_b = {k->tb ? 1 : k->ldb, k->tb ? k->ldb : 1}, st_c = {k->ldc, 1};
    check(dnnl_memory_desc_init_by_strides(&da, 2, sa, dnnl_bf16, st_a), "src", k);
    check(dnnl_memory_desc_init_by_strides(&db, 2, sb, dnnl_bf16, st_b), "weights", k);
    check(dnnl_memory_desc_init_by_strides(&dc, 2, sc, dnnl_f32, st_c), "dst", k);
    dnnl_matmul_desc_t md;
    check(dnnl_matmul_desc_init(&md, &da, &db, NULL, &dc), "desc", k);
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po;
    check(dnnl_primitive_attr_create(&attr), "attr", k);
    check(dnnl_post_ops_create(&po), "post-ops", k);
    if (k->alpha != 1.0f) check(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &k->alpha), "alpha", k);
    if (k->beta != 0.0f) check(dnnl_post_ops_append_sum(po, k->beta), "beta", k);
    check(dnnl_primitive_attr_set_post_ops(attr, po), "post-ops", k);
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &md, attr, s->engine, NULL), "primitive desc", k);
    check(dnnl_primitive_create(&mm->prim, pd), "primitive", k);
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    check(dnnl_memory_create(&mm->a, &da, s->engine, DNNL_MEMORY_NONE), "src memory", k);
    check(dnnl_memory_create(&mm->b, &db, s->engine, DNNL_MEMORY_NONE), "weights memory", k);
    check(dnnl_memory_create(&mm->c, &dc, s->engine, DNNL_MEMORY_NONE), "dst memory", k);
    mm->key = *k;
}

// The cached primitive for k, made on first use; past CACHE_SLOTS shapes, the oldest is replaced.
static Matmul *matmul_for(Bf16State *s, const MatmulKey *k) {
    for (int i = 0; i < s->used; i++)
        if (same_key(&s->cache[i].key, k)) return &s->cache[i];
    Matmul *mm;
    if (s->used < CACHE_SLOTS) {
        mm = &s->cache[s->used++];
    } else {
        mm = &s->cache[s->next];
        matmul_release(mm);
        s->next = (s->next + 1) % CACHE_SLOTS;
    }
    matmul_make(s, k, mm);
    return mm;
}

static void *grow(void **buf, size_t *cap, size_t n, size_t elem) {
    if (n > *cap) {
        fg_free(*buf);
        *buf = fg_alloc_bytes(n * elem);
        *cap = n;
    }
    return *buf;
}

// X as BF16 with its row stride: the operand itself when it is BF16, else rounded into scratch.
static const void *operand_bf16(Bf16State *s, GemmOperand X, int rows, int cols, uint16_t **buf,
                                size_t *cap, int *ld) {
    *ld = X.ld;
    if (X.type == FG_BF16) return X.data;
    uint16_t *y = grow((void **)buf, cap, (size_t)rows * cols, sizeof(uint16_t));
    bf16_convert_rows(s->convert, X.data, rows, cols, X.ld, y);
    *ld = cols;
    return y;
}

// C = alpha T + beta C over [m, n]; beta 0 ignores C (NaN or not), as BLAS does.
static void add_result(int m, int n, float alpha, const float *T, float beta, float *C, int ldc) {
#pragma omp parallel for schedule(static) if ((long)m * n > (1 << 18))
    for (int i = 0; i < m; i++) {
        const float *t = T + (size_t)i * n;
        float *c = C + (size_t)i * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < n; j++) c[j] = alpha * t[j];
        else
            for (int j = 0; j < n; j++) c[j] = alpha * t[j] + beta * c[j];
    }
}

static void bf16_run(const Gemm *g, int m, int n, int k, float alpha, GemmOperand A, GemmOperand B,
                     float beta, float *C, int ldc) {
    Bf16State *s = g->state;
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        fg_gemm_scale(m, n, beta, C, ldc);
        return;
    }
    int lda, ldb, dense = ldc == n;
    const void *a = operand_bf16(s, A, A.trans ? k : m, A.trans ? m : k, &s->a16, &s->a_cap, &lda);
    const void *b = operand_bf16(s, B, B.trans ? n : k, B.trans ? k : n, &s->b16, &s->b_cap, &ldb);
    MatmulKey key = {m, n, k, A.trans, B.trans, lda, ldb, n, dense ? alpha : 1.0f, dense ? beta : 0.0f};
    Matmul *mm = matmul_for(s, &key);
    float *dst = dense ? C : grow((void **)&s->c32, &s->c_cap, (size_t)m * n, sizeof(float));
    check(dnnl_memory_set_data_handle(mm->a, (void *)a), "src handle", &key);
    check(dnnl_memory_set_data_handle(mm->b, (void *)b), "weights handle", &key);
    check(dnnl_memory_set_data_handle(mm->c, dst), "dst handle", &key);
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm->a}, {DNNL_ARG_WEIGHTS, mm->b}, {DNNL_ARG_DST, mm->c}};
    check(dnnl_primitive_execute(mm->prim, s->stream, 3, args), "execute", &key);
    check(dnnl_stream_wait(s->stream), "wait", &key);
    if (!dense) add_result(m, n, alpha, dst, beta, C, ldc);
}

int gemm_bf16_create(Gemm *out, FgError *err) {
    const char *missing = cpu_bf16_missing();
    if (missing)
        return fg_fail(err, FG_ERR_INPUT, "precision = bf16 on the CPU needs %s: use precision = "
                       "fp32", missing);
    Bf16State *s = calloc(1, sizeof *s);
    if (!s) return fg_fail(err, FG_ERR_INTERNAL, "bf16 gemm: out of memory");
    if (dnnl_engine_create(&s->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&s->stream, s->engine, dnnl_stream_default_flags) != dnnl_success) {
        if (s->engine) dnnl_engine_destroy(s->engine);
        free(s);
        return fg_fail(err, FG_ERR_INTERNAL, "bf16 gemm: oneDNN could not make a CPU engine and stream");
    }
    s->convert = bf16_convert_avx512;  // the CPU has it: cpu_bf16_missing() said so
    *out = (Gemm){"oneDNN bf16 matmul", PRECISION_BF16, bf16_run, s};
    return FG_OK;
}

void gemm_bf16_destroy(Gemm *g) {
    Bf16State *s = g->state;
    if (!s) return;
    for (int i = 0; i < s->used; i++) matmul_release(&s->cache[i]);
    fg_free(s->a16), fg_free(s->b16), fg_free(s->c32);
    dnnl_stream_destroy(s->stream);
    dnnl_engine_destroy(s->engine);
    free(s);
    g->state = NULL;
}

#else  // built without oneDNN (FGPIPE_CPU_GEMM=openblas and no libdnnl)

int gemm_bf16_create(Gemm *out, FgError *err) {
    (void)out;
    return fg_fail(err, FG_ERR_INPUT, "precision = bf16 on the CPU needs %s: use precision = fp32",
                   cpu_bf16_missing());
}

void gemm_bf16_destroy(Gemm *g) { (void)g; }

#endif
