// CPU GEMMs on GPT-2 124M's shapes (issue 52): OpenBLAS's sgemm, oneDNN's sgemm and oneDNN's
// BF16 matmul (bf16 inputs, FP32 accumulation and output; with and without rounding both FP32
// operands to bf16 first, as a run that keeps FP32 activations would), GFLOP/s per shape and the
// total time of one bp step's products (forward, dx, dW of each linear, 12 blocks; the head's
// 50304 columns). Interleaved: each repetition runs every library once, the minimum over the
// repetitions is kept, so a loaded machine slows all alike. The last column is fgpipe's own BF16
// Gemm (gemm_bf16.c: AVX512-BF16 rounding of both operands, cached primitive), as a bf16 run calls it.
// usage: fgpipe-bench-gemm [ROWS] [REPS]   (ROWS: tokens per step, default 256 = 4 x 64)
#define _POSIX_C_SOURCE 199309L
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "gemm.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(dnnl_status_t s, const char *what) {
    if (s == dnnl_success) return;
    fprintf(stderr, "fgpipe-bench-gemm: oneDNN: %s failed (status %d)\n", what, (int)s);
    exit(1);
}

static uint16_t to_bf16(float f) {  // round to nearest even
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A bf16 matmul C [m, n] = op(A) op(B), A stored [k, m] when ta, else [m, k]; B [n, k] when tb,
// else [k, n] (row-major).
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c;
} Bf16Matmul;

static Bf16Matmul bf16_matmul(dnnl_engine_t eng, int m, int n, int k, int ta, int tb, void *A, void *B,
                              float *C) {
    dnnl_memory_desc_t da, db, dc;
    dnnl_dims_t sa = {m, k}, sb = {k, n}, sc = {m, n};
    dnnl_dims_t stride_a = {ta ? 1 : k, ta ? m : 1}, stride_b = {tb ? 1 : n, tb ? k : 1}, stride_c = {n, 1};
    check(dnnl_memory_desc_init_by_strides(&da, 2, sa, dnnl_bf16, stride_a), "src desc");
    check(dnnl_memory_desc_init_by_strides(&db, 2, sb, dnnl_bf16, stride_b), "weights desc");
    check(dnnl_memory_desc_init_by_strides(&dc, 2, sc, dnnl_f32, stride_c), "dst desc");
    dnnl_matmul_desc_t md;
    check(dnnl_matmul_desc_init(&md, &da, &db, NULL, &dc), "matmul desc");
    dnnl_primitive_desc_t pd;
    check(dnnl_primitive_desc_create(&pd, &md, NULL, eng, NULL), "matmul primitive desc");
    Bf16Matmul mm;
    check(dnnl_primitive_create(&mm.prim, pd), "matmul primitive");
    dnnl_primitive_desc_destroy(pd);
    check(dnnl_memory_create(&mm.a, &da, eng, A), "src memory");
    check(dnnl_memory_create(&mm.b, &db, eng, B), "weights memory");
    check(dnnl_memory_create(&mm.c, &dc, eng, C), "dst memory");
    return mm;
}

typedef struct {
    const char *name;
    int m_rows, n, k, tb;  // m: 0 = ROWS (tokens), else fixed
    int per_step;          // times one bp step runs it
} Shape;

int main(int argc, char **argv) {
    int rows = argc > 1 ? atoi(argv[1]) : 256, reps = argc > 2 ? atoi(argv[2]) : 5;
    // y = x W^T (tb), dx = dy W, dW = dy^T x: per linear of a block, 12 blocks; the head per
    // 4096-column block (13 a pass; forward and backward each compute the logits).
    const Shape shapes[] = {
        {"c_attn  y = x W^T", 0, 2304, 768, 1, 12}, {"c_attn  dx = dy W", 0, 768, 2304, 0, 12},
        {"c_attn  dW = dy^T x", 2304, 768, 0, 0, 12}, {"c_proj  y = x W^T", 0, 768, 768, 1, 12},
        {"c_proj  dx = dy W", 0, 768, 768, 0, 12},    {"c_proj  dW = dy^T x", 768, 768, 0, 0, 12},
        {"c_fc    y = x W^T", 0, 3072, 768, 1, 12},   {"c_fc    dx = dy W", 0, 768, 3072, 0, 12},
        {"c_fc    dW = dy^T x", 3072, 768, 0, 0, 12}, {"mlp.proj y = x W^T", 0, 768, 3072, 1, 12},
        {"mlp.proj dx = dy W", 0, 3072, 768, 0, 12},  {"mlp.proj dW = dy^T x", 768, 3072, 0, 0, 12},
        {"head    z = x W^T", 0, 4096, 768, 1, 26},   {"head    dx = dz W", 0, 768, 4096, 0, 13},
        {"head    dW = dz^T x", 4096, 768, 0, 0, 13},
    };
    int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    check(dnnl_engine_create(&eng, dnnl_cpu, 0), "engine");
    check(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags), "stream");
    printf("CPU GEMMs, %d rows (tokens), min of %d interleaved repetitions, oneDNN ISA %d\n", rows, reps,
           (int)dnnl_get_effective_cpu_isa());
    printf("| product | m x n x k | OpenBLAS GFLOP/s | oneDNN sgemm | oneDNN bf16 | bf16 + rounding | fgpipe bf16 Gemm |\n");
    printf("|---|---|---|---|---|---|---|\n");
    double step[5] = {0};
    Gemm g;
    FgError err = {0};
    if (gemm_bf16_create(&g, &err)) fprintf(stderr, "bench_gemm: %s\n", err.msg), exit(1);
    for (int s = 0; s < n_shapes; s++) {
        const Shape *sh = &shapes[s];
        int m = sh->m_rows ? sh->m_rows : rows, n = sh->n, k = sh->k ? sh->k : rows;
        int ta = sh->m_rows != 0;  // dW = dy^T x: A stored [k, m]
        size_t na = (size_t)m * k, nb = (size_t)k * n;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc((size_t)m * n * 4);
        uint16_t *A16 = malloc(na * 2), *B16 = malloc(nb * 2);
        for (size_t i = 0; i < na; i++) A[i] = (float)((i * 7) % 13) * 0.05f - 0.3f;
        for (size_t i = 0; i < nb; i++) B[i] = (float)((i * 5) % 11) * 0.05f - 0.25f;
        for (size_t i = 0; i < na; i++) A16[i] = to_bf16(A[i]);
        for (size_t i = 0; i < nb; i++) B16[i] = to_bf16(B[i]);
        Bf16Matmul mm = bf16_matmul(eng, m, n, k, ta, sh->tb, A16, B16, C);
        double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
        int lda = ta ? m : k, ldb = sh->tb ? k : n;
        for (int r = 0; r < reps; r++) {
            double t = now();
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, sh->tb ? CblasTrans : CblasNoTrans, m, n, k,
                        1.0f, A, lda, B, ldb, 0.0f, C, n);
            double t1 = now();
            check(dnnl_sgemm(ta ? 'T' : 'N', sh->tb ? 'T' : 'N', m, n, k, 1.0f, A, lda, B, ldb, 0.0f, C, n), "sgemm");
            double t2 = now();
            dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, mm.a}, {DNNL_ARG_WEIGHTS, mm.b}, {DNNL_ARG_DST, mm.c}};
            check(dnnl_primitive_execute(mm.prim, stream, 3, args), "matmul");
            check(dnnl_stream_wait(stream), "wait");
            double t3 = now();
            for (size_t i = 0; i < na; i++) A16[i] = to_bf16(A[i]);
            for (size_t i = 0; i < nb; i++) B16[i] = to_bf16(B[i]);
            check(dnnl_primitive_execute(mm.prim, stream, 3, args), "matmul");
            check(dnnl_stream_wait(stream), "wait");
            double t4 = now();
            g.run(&g, m, n, k, 1.0f, gemm_f32(A, lda, ta), gemm_f32(B, ldb, sh->tb), 0.0f, C, n);
            double t5 = now(), dt[5] = {t1 - t, t2 - t1, t3 - t2, t4 - t3, t5 - t4};
            for (int i = 0; i < 5; i++) best[i] = dt[i] < best[i] ? dt[i] : best[i];
        }
        double flop = 2.0 * m * n * k;
        printf("| %s | %d x %d x %d | %.0f | %.0f | %.0f | %.0f | %.0f |\n", sh->name, m, n, k,
               flop / best[0] / 1e9, flop / best[1] / 1e9, flop / best[2] / 1e9, flop / best[3] / 1e9,
               flop / best[4] / 1e9);
        for (int i = 0; i < 5; i++) step[i] += best[i] * sh->per_step;
        dnnl_primitive_destroy(mm.prim);
        dnnl_memory_destroy(mm.a), dnnl_memory_destroy(mm.b), dnnl_memory_destroy(mm.c);
        free(A), free(B), free(C), free(A16), free(B16);
    }
    printf("| one bp step's products (s) | | %.3f | %.3f (%.2fx) | %.3f (%.2fx) | %.3f (%.2fx) | %.3f (%.2fx) |\n",
           step[0], step[1], step[0] / step[1], step[2], step[0] / step[2], step[3], step[0] / step[3],
           step[4], step[0] / step[4]);
    gemm_bf16_destroy(&g);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return 0;
}
