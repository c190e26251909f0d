// Shared by the CUDA tests (test_cuda.c, test_cuda_gpt.c): the GPU backend under test, copies
// to and from it, the relative error against the CPU, one layer's every op on both backends,
// a whole model's bp gradient and fg derivatives on both, and main's skip without a GPU.
// Include after cmocka.h. Tolerance: max |GPU - CPU| / max(1, max |CPU|).
#ifndef FGPIPE_GPU_TEST_UTIL_H
#define FGPIPE_GPU_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "model.h"
#include "stage.h"
#include "test_util.h"

static Backend gpu;
static const Backend *cpu = &backend_cpu;

static inline float *random_floats(size_t n, uint64_t seed) {
    float *v = fg_alloc_floats(n);
    Rng r = {seed};
    fill_uniform(&r, v, n, 1.0f);
    return v;
}

// A device copy of host floats.
static inline float *on_gpu(const float *host, size_t n) {
    float *d = backend_alloc_floats(&gpu, n);
    gpu.upload(&gpu, d, host, n * sizeof(float));
    return d;
}

// Host copy of device floats (the caller frees it).
static inline float *from_gpu(const float *dev, size_t n) {
    float *h = fg_alloc_floats(n);
    gpu.download(&gpu, h, dev, n * sizeof(float));
    FgError err = {0};
    if (gpu.sync(&gpu, &err)) fail_msg("GPU: %s", err.msg);
    return h;
}

// max |got - want| / max(1, max |want|)
static inline double rel_error(const float *got, const float *want, size_t n) {
    double worst = 0.0, scale = 1.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)got[i] - want[i]));
    return worst / scale;
}

static inline void assert_close(const float *dev, const float *want, size_t n, double tol, const char *what) {
    float *got = from_gpu(dev, n);
    double e = rel_error(got, want, n);
    fg_free(got);
    if (!(e <= tol)) fail_msg("%s: GPU differs from CPU by %.3g (relative), tolerance %.1g", what, e, tol);
}

// Inputs of B samples of L: token ids for an embedding, else uniform in [-1, 1).
static inline float *layer_input(const Layer *L, int B, uint64_t seed) {
    size_t n = (size_t)B * L->in;
    float *x = random_floats(n, seed);
    for (size_t i = 0; L->kind == LAYER_EMBEDDING && i < n; i++)
        x[i] = (float)(int)((x[i] + 1.0f) * 0.5f * (float)(L->vocab - 1) + 0.5f);
    return x;
}

// forward, jvp (both tangents, no xdot, no pdot), backward (fused, without dx, and each half
// alone: Bi with dp NULL, Bw with dx NULL and p NULL unless the layer's weight half reads it),
// on both backends from the same inputs.
static inline void check_layer_ops(const Layer *L, int B, int K, double tol, const char *tag) {
    size_t np = L->param_count ? L->param_count : 1, nx = (size_t)B * L->in, ny = (size_t)B * L->out;
    float *p = random_floats(np, 10), *pdot = random_floats(np * K, 11), *x = layer_input(L, B, 12);
    float *xdot = random_floats(nx * K, 13), *dy = random_floats(ny, 14);
    float *y = fg_alloc_floats(ny), *ydot = fg_alloc_floats(ny * K), *dx = fg_alloc_floats(nx);
    float *dpar = random_floats(np, 15);
    float *g_p = on_gpu(p, np), *g_pdot = on_gpu(pdot, np * K), *g_x = on_gpu(x, nx);
    float *g_xdot = on_gpu(xdot, nx * K), *g_dy = on_gpu(dy, ny), *g_dpar = on_gpu(dpar, np);
    float *g_y = backend_alloc_floats(&gpu, ny), *g_ydot = backend_alloc_floats(&gpu, ny * K);
    float *g_dx = backend_alloc_floats(&gpu, nx);
    char what[160];

    cpu->forward(cpu, L, p, x, y, B);
    gpu.forward(&gpu, L, g_p, g_x, g_y, B);
    snprintf(what, sizeof what, "%s %s B=%d forward", tag, L->name, B);
    assert_close(g_y, y, ny, tol, what);
    for (int variant = 0; variant < 3; variant++) {  // both tangents, no xdot, no pdot
        const float *xd = variant == 1 ? NULL : xdot, *pd = variant == 2 ? NULL : pdot;
        cpu->jvp(cpu, L, p, L->param_count ? pd : NULL, x, xd, y, ydot, B, K);
        gpu.jvp(&gpu, L, g_p, L->param_count && pd ? g_pdot : NULL, g_x, xd ? g_xdot : NULL, g_y,
                g_ydot, B, K);
        snprintf(what, sizeof what, "%s %s B=%d K=%d jvp variant %d", tag, L->name, B, K, variant);
        assert_close(g_ydot, ydot, ny * K, tol, what);
        assert_close(g_y, y, ny, tol, what);
    }
    cpu->backward(cpu, L, p, x, dy, dx, dpar, B);
    gpu.backward(&gpu, L, g_p, g_x, g_dy, g_dx, g_dpar, B);
    snprintf(what, sizeof what, "%s %s B=%d backward", tag, L->name, B);
    assert_close(g_dx, dx, nx, tol, what);
    if (L->param_count) assert_close(g_dpar, dpar, np, tol, what);
    cpu->backward(cpu, L, p, x, dy, NULL, dpar, B);  // dx skipped: only dp accumulates
    gpu.backward(&gpu, L, g_p, g_x, g_dy, NULL, g_dpar, B);
    if (L->param_count) assert_close(g_dpar, dpar, np, tol, what);
    gpu.zero(&gpu, g_dx, nx * sizeof(float));
    gpu.backward(&gpu, L, g_p, g_x, g_dy, g_dx, NULL, B);
    assert_close(g_dx, dx, nx, tol, what);
    int reads = layer_grad_reads_params(L);  // a LoRA adapter's weight half reads A and B
    cpu->backward(cpu, L, reads ? p : NULL, x, dy, NULL, dpar, B);
    gpu.backward(&gpu, L, reads ? g_p : NULL, g_x, g_dy, NULL, g_dpar, B);
    if (L->param_count) assert_close(g_dpar, dpar, np, tol, what);

    float *host[] = {p, pdot, x, xdot, dy, y, ydot, dx, dpar};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) fg_free(host[i]);
    float *dev[] = {g_p, g_pdot, g_x, g_xdot, g_dy, g_dpar, g_y, g_ydot, g_dx};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu.free(&gpu, dev[i]);
}

// One backend's results for a whole model on one stage: the loss, the bp gradient (fused, and
// as Bi then Bw) and the fg derivatives d[K] along tangents of one key.
typedef struct {
    float loss, d[8];
    float *grad, *split;
} ModelRun;

static inline ModelRun run_model(const Backend *be, const Model *m, const float *params, int B,
                                 const float *x, const Label *labels, int K) {
    ModelRun out = {0};
    FgError err = {0};
    Stage st;
    int rows = B * m->tokens;
    LogitRows C = model_logit_rows(m);
    size_t nx = (size_t)B * m->in_features;
    assert_int_equal(stage_init(&st, be, m, 0, m->n_layers, B, K, &err), FG_OK);
    float *p = backend_alloc_floats(be, m->n_params), *xd = backend_alloc_floats(be, nx);
    float *g = backend_alloc_floats(be, m->n_params), *stash = backend_alloc_floats(be, stage_stash_floats(&st, B));
    float *dz = backend_alloc_floats(be, (size_t)rows * C.stride), *g2 = backend_alloc_floats(be, m->n_params);
    float *adj = backend_alloc_floats(be, stage_adjoint_floats(&st, B));
    Label *lab = be->alloc(be, (size_t)rows * sizeof(Label));
    be->upload(be, p, params, m->n_params * sizeof(float));
    be->upload(be, xd, x, nx * sizeof(float));
    be->upload(be, lab, labels, (size_t)rows * sizeof(Label));
    const float *y, *ydot;
    stage_forward(&st, p, NULL, xd, NULL, B, stash, &y, NULL);
    out.loss = be->loss_backward(be, y, lab, rows, C, dz);
    stage_backward(&st, p, stash, dz, NULL, g, B);
    stage_backward_input(&st, p, stash, dz, NULL, adj, B);  // the same gradient as Bi and Bw
    stage_backward_weight(&st, p, stash, adj, g2, B);  // p: read only where Bw needs it (LoRA)
    TangentKey key = {.seed = 5, .stream = STREAM_TANGENT, .step = 2, .microbatch = 1};
    stage_forward(&st, p, &key, xd, NULL, B, NULL, &y, &ydot);
    be->loss_jvp(be, y, ydot, lab, rows, C, K, out.d);
    out.grad = fg_alloc_floats(m->n_params);
    out.split = fg_alloc_floats(m->n_params);
    be->download(be, out.grad, g, m->n_params * sizeof(float));
    be->download(be, out.split, g2, m->n_params * sizeof(float));
    if (be->sync(be, &err)) fail_msg("%s: %s", be->name, err.msg);
    float *bufs[] = {p, xd, g, stash, dz, g2, adj};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]);
    be->free(be, lab);
    stage_free(&st);
    return out;
}

// The GPU's run of a whole model against the CPU's: gradients within tol relative, the loss
// within tol / 10 relative, each d_k within tol relative to max(1, |d_k|).
static inline void compare_model(const Model *m, const float *params, int B, const float *x,
                                 const Label *labels, int K, double tol, const char *what) {
    assert_true(K <= 8);
    ModelRun c = run_model(cpu, m, params, B, x, labels, K), g = run_model(&gpu, m, params, B, x, labels, K);
    double e = rel_error(g.grad, c.grad, m->n_params);
    if (e > tol) fail_msg("%s: bp gradient differs by %.3g", what, e);
    if (memcmp(c.split, c.grad, m->n_params * sizeof(float)) != 0)
        fail_msg("%s: CPU Bi + Bw differs from the fused backward", what);
    e = rel_error(g.split, c.grad, m->n_params);
    if (e > tol) fail_msg("%s: GPU Bi + Bw gradient differs by %.3g", what, e);
    if (!(fabsf(g.loss - c.loss) <= (float)(tol / 10) * c.loss)) fail_msg("%s: loss GPU %g CPU %g", what, g.loss, c.loss);
    for (int k = 0; k < K; k++)
        if (!(fabsf(g.d[k] - c.d[k]) <= tol * fmaxf(1.0f, fabsf(c.d[k]))))
            fail_msg("%s: fg d[%d] GPU %g CPU %g", what, k, g.d[k], c.d[k]);
    fg_free(c.grad), fg_free(c.split), fg_free(g.grad), fg_free(g.split);
}

// compare_model on a token model (vocab 256) with its initial parameters plus U(-0.1, 0.1)
// (LoRA's B away from 0 too), B = 2 samples of random tokens and labels, K = 3 tangents.
static inline void compare_token_model(const Model *m, uint64_t seed, double tol, const char *what) {
    int T = m->tokens, B = 2, K = 3;
    float *params = fg_alloc_floats(m->n_params);
    model_init_params(m, params, 1);
    Rng r = {seed};
    for (size_t i = 0; i < m->n_params; i++) params[i] += 0.1f * rng_uniform(&r);
    float *x = fg_alloc_floats((size_t)B * T);
    Label *labels = fg_alloc_bytes((size_t)B * T * sizeof(Label));
    for (int i = 0; i < B * T; i++) x[i] = (float)rng_int(&r, 0, 255), labels[i] = (Label)rng_int(&r, 0, 255);
    compare_model(m, params, B, x, labels, K, tol, what);
    fg_free(params), fg_free(x), fg_free(labels);
}

// main's part: exit 77 (ctest: skipped) without a GPU; else the backend on GPU 0, the tests,
// and the number of failures.
static inline int run_gpu_tests(const char *name, const struct CMUnitTest *tests, size_t n) {
    if (backend_cuda_device_count() == 0) {
        fprintf(stderr, "%s: SKIPPED: no CUDA GPU visible (the CUDA code was compiled; run the "
                        "gpu-labelled tests on a machine with a GPU)\n", name);
        return 77;
    }
    FgError err = {0};
    if (backend_cuda_create(0, &gpu, &err)) {
        fprintf(stderr, "%s: %s\n", name, err.msg);
        return 1;
    }
    int failed = _cmocka_run_group_tests(name, tests, n, NULL, NULL);
    backend_cuda_destroy(&gpu);
    return failed;
}

#endif
