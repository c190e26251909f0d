// GPU benchmark of the CUDA backend. Prints two tables:
//  1. GEMM TFLOP/s of the linear layers' forward shapes through the backend (cublasSgemm, FP32)
//     against the best of cuBLASLt's heuristic algorithms for the same shape (FP32 compute).
//  2. Training samples/s of one stage holding the whole model, bp and fg (K = 1), for the
//     default MLP and a wide one (4 x 8192), on the GPU and, for the default MLP, on the CPU.
//  3. With 2 GPUs and NCCL: the share of the messages between two stages hidden behind compute.
// usage: fgpipe-bench-cuda [ROWS]   (rows per micro-batch, default 256)
//        fgpipe-bench-cuda link     the host link's bandwidth alone: copies of 256 MiB to and
//        from the GPU from page-locked memory (a streamed stage's slots) and from pageable
//        memory, each the best of 5 (bench/bench_gpu_stream.sh's PCIe bound)
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "model.h"
#include "progress.h"
#include "stage.h"
#ifdef FGPIPE_HAVE_NCCL
#include "transport_nccl.h"
#endif

static double gemm_best_lt(int rows, int in, int out, const float *W, const float *x, float *y) {
    cublasLtHandle_t lt;
    cublasLtCreate(&lt);
    cublasLtMatmulDesc_t op;
    cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayout_t A, B, C;  // row-major data seen column-major, as in layers_cuda.cu
    cublasLtMatrixLayoutCreate(&A, CUDA_R_32F, in, out, in);
    cublasLtMatrixLayoutCreate(&B, CUDA_R_32F, in, rows, in);
    cublasLtMatrixLayoutCreate(&C, CUDA_R_32F, out, rows, out);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t ws_bytes = (size_t)64 << 20;
    void *ws;
    cudaMalloc(&ws, ws_bytes);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, op, A, B, C, C, pref, 16, res, &found);
    const float one = 1.0f, zero = 0.0f;
    double best = INFINITY;
    for (int a = 0; a < found; a++) {
        int reps = 20;
        for (int r = 0; r < 2; r++)  // warm-up
            cublasLtMatmul(lt, op, &one, W, A, x, B, &zero, y, C, y, C, &res[a].algo, ws, ws_bytes, 0);
        cudaDeviceSynchronize();
        double t0 = wall_seconds();
        for (int r = 0; r < reps; r++)
            cublasLtMatmul(lt, op, &one, W, A, x, B, &zero, y, C, y, C, &res[a].algo, ws, ws_bytes, 0);
        cudaDeviceSynchronize();
        best = fmin(best, (wall_seconds() - t0) / reps);
    }
    cudaFree(ws);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(A), cublasLtMatrixLayoutDestroy(B), cublasLtMatrixLayoutDestroy(C);
    cublasLtMatmulDescDestroy(op);
    cublasLtDestroy(lt);
    return best;
}

// Seconds per forward GEMM (+ bias) of a linear layer through the backend.
static double gemm_backend(const Backend *be, const Layer *L, const float *p, const float *x,
                           float *y, int rows) {
    int reps = 20;
    for (int r = 0; r < 2; r++) be->forward(be, L, p, x, y, rows);
    be->sync(be, NULL);
    double t0 = wall_seconds();
    for (int r = 0; r < reps; r++) be->forward(be, L, p, x, y, rows);
    be->sync(be, NULL);
    return (wall_seconds() - t0) / reps;
}

static void gemm_table(const Backend *gpu, const char *model, int rows) {
    Model m;
    FgError err = {0};
    if (model_build_mlp(&m, model, "relu", &err)) return;
    for (int l = 0; l < m.n_layers; l++) {
        const Layer *L = &m.layers[l];
        if (L->kind != LAYER_LINEAR) continue;
        float *p = backend_alloc_floats(gpu, L->param_count);
        float *x = backend_alloc_floats(gpu, (size_t)rows * L->in), *y = backend_alloc_floats(gpu, (size_t)rows * L->out);
        double flop = 2.0 * rows * L->in * L->out;
        double ours = gemm_backend(gpu, L, p, x, y, rows), best = gemm_best_lt(rows, L->in, L->out, p, x, y);
        printf("| %-26s | %5d x %5d x %5d | %8.1f | %8.1f | %5.2f |\n", model, rows, L->in, L->out,
               flop / ours / 1e12, flop / best / 1e12, best / ours);
        gpu->free(gpu, p), gpu->free(gpu, x), gpu->free(gpu, y);
    }
}

// Samples/s of training steps of one stage holding the whole model (one micro-batch of
// `rows` per step): bp = forward with stash, loss gradient, backward, Adam; fg = forward with
// one tangent, loss jvp, the estimate regenerated from the seed, Adam.
static double samples_per_s(const Backend *be, const char *model, int rows, int fg, double budget_s) {
    Model m;
    FgError err = {0};
    if (model_build_mlp(&m, model, "relu", &err)) return NAN;
    Stage st;
    if (stage_init(&st, be, &m, 0, m.n_layers, rows, fg ? 1 : 0, &err)) return NAN;
    size_t n = m.n_params;
    float *host = fg_alloc_floats(n);
    model_init_params(&m, host, 1);
    float *p = backend_alloc_floats(be, n), *g = backend_alloc_floats(be, n), *state = backend_alloc_floats(be, 2 * n);
    be->upload(be, p, host, n * sizeof(float));
    float *x = backend_alloc_floats(be, (size_t)rows * m.in_features), *dz = backend_alloc_floats(be, (size_t)rows * m.classes);
    float *stash = fg ? NULL : backend_alloc_floats(be, stage_stash_floats(&st, rows));
    Label *labels = be->alloc(be, (size_t)rows * sizeof(Label));
    OptimizerConfig oc = {.kind = OPT_ADAM, .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    int steps = 0;
    double t0 = 0;
    for (;; steps++) {
        if (steps == 2) be->sync(be, NULL), t0 = wall_seconds();  // two warm-up steps
        if (steps > 2 && wall_seconds() - t0 > budget_s) break;
        const float *y, *ydot;
        if (fg) {
            TangentKey key = {.seed = 1, .stream = STREAM_TANGENT, .step = (uint32_t)steps};
            float d, coeff;
            stage_forward(&st, p, &key, x, NULL, rows, NULL, &y, &ydot);
            be->loss_jvp(be, y, ydot, labels, rows, model_logit_rows(&m), 1, &d);
            coeff = d;
            be->zero(be, g, n * sizeof(float));
            stage_add_tangents(&st, key, 1, &coeff, g);
        } else {
            stage_forward(&st, p, NULL, x, NULL, rows, stash, &y, NULL);
            be->loss_backward(be, y, labels, rows, model_logit_rows(&m), dz);
            be->zero(be, g, n * sizeof(float));
            stage_backward(&st, p, stash, dz, NULL, g, rows);
        }
        be->optimizer_step(be, &oc, steps, oc.lr, p, p, g, 1.0f, state, n, n);
    }
    be->sync(be, NULL);
    double rate = (double)(steps - 2) * rows / (wall_seconds() - t0);
    void *bufs[] = {p, g, state, x, dz, stash, labels};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->free(be, bufs[i]);
    fg_free(host);
    stage_free(&st);
    return rate;
}

#ifdef FGPIPE_HAVE_NCCL
// Table 3: a 2-stage pipeline of forward ops, one thread and one GPU per stage, messages through
// the NCCL transport, run as pipeline.c runs a stage (receives double-buffered ahead, a sync
// after each op). Three timings of N micro-batches, best of 5 each:
//   full      the activations sent whole;
//   compute   the same ops with 1-float messages (the same dependencies, next to no transfer);
//   transfer  the N full messages alone, without compute.
// Hidden share = 1 - (full - compute) / transfer: 1 when the transfers overlap compute entirely.
enum { PIPE_N = 8, PIPE_ROUNDS = 5 };

typedef struct {
    int stage, rows;
    const Model *m;
    int first, last;  // layers of this stage
    NcclWiring wiring;
    pthread_barrier_t *barrier;
    double seconds[3];  // full, compute, transfer
} PipeStage;

// One timed round: N ops of this stage (compute), messages of `floats` floats (send).
static double pipe_round(PipeStage *ps, Transport *t, const Backend *be, Stage *st,
                         const float *p, float *x, float **in, size_t floats, int compute) {
    FgError err = {0};
    int handle = 0, rc = FG_OK;
    pthread_barrier_wait(ps->barrier);
    double t0 = wall_seconds();
    if (ps->stage == 1) rc = t->post_recv(t, 0, 0, in[0], floats * sizeof(float), &handle, &err);
    for (int b = 0; b < PIPE_N && !rc; b++) {
        const float *src = x, *y, *ydot;
        if (ps->stage == 1) {
            if ((rc = t->wait_recv(t, handle, &err))) break;
            if (compute && floats > 1) src = in[b & 1];
            if (b + 1 < PIPE_N &&
                (rc = t->post_recv(t, 0, b + 1, in[(b + 1) & 1], floats * sizeof(float), &handle, &err)))
                break;
        }
        if (compute) stage_forward(st, p, NULL, src, NULL, ps->rows, NULL, &y, &ydot);
        else y = x;
        if (ps->stage == 0) rc = t->send(t, 1, b, y, floats * sizeof(float), &err);
        if (!rc) rc = be->sync(be, &err);
    }
    if (rc) {  // the other stage may wait for this one inside NCCL: end the process
        fprintf(stderr, "fgpipe-bench-cuda: stage %d: %s\n", ps->stage, err.msg);
        exit(1);
    }
    double s = wall_seconds() - t0;
    pthread_barrier_wait(ps->barrier);
    return s;
}

static void *pipe_stage(void *arg) {
    PipeStage *ps = arg;
    Backend be;
    FgError err = {0};
    Transport t, inner = {.stage = ps->stage, .stages = 2, .replica = 0, .replicas = 1};
    Stage st;
    int ok = !backend_cuda_create(ps->stage, &be, &err);
    ok = ok && !stage_init(&st, &be, ps->m, ps->first, ps->last, ps->rows, 0, &err);
    // Everything is allocated before the transport starts: NCCL kernels waiting for a peer and
    // an allocation in the other thread can block each other.
    size_t msg = (size_t)ps->rows * ps->m->layers[ps->last - 1].out;
    size_t x_floats = (size_t)ps->rows * ps->m->layers[ps->first].in;
    float *p = NULL, *x = NULL, *in[2] = {NULL, NULL};
    if (ok) {
        p = backend_alloc_floats(&be, model_range_count(ps->m, ps->first, ps->last));
        x = backend_alloc_floats(&be, x_floats > msg ? x_floats : msg);
        in[0] = backend_alloc_floats(&be, x_floats), in[1] = backend_alloc_floats(&be, x_floats);
        ok = !be.sync(&be, &err) && !transport_nccl_create(inner, &be, &ps->wiring, &t, &err);
    }
    if (!ok) {  // the other stage may wait for this one inside NCCL: end the process
        fprintf(stderr, "fgpipe-bench-cuda: stage %d: %s\n", ps->stage, err.msg);
        exit(1);
    }
    size_t floats = ps->stage == 0 ? msg : x_floats;  // the message between the two
    for (int kind = 0; kind < 3; kind++) {
        ps->seconds[kind] = INFINITY;
        for (int r = 0; r <= PIPE_ROUNDS; r++) {  // round 0 warms up (and grows the send slots)
            double s = pipe_round(ps, &t, &be, &st, p, x, in, kind == 1 ? 1 : floats, kind != 2);
            if (r) ps->seconds[kind] = fmin(ps->seconds[kind], s);
        }
    }
    transport_nccl_destroy(&t);
    void *bufs[] = {p, x, in[0], in[1]};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be.free(&be, bufs[i]);
    stage_free(&st);
    backend_cuda_destroy(&be);
    return NULL;
}

static void hidden_share(const char *model, int rows) {
    Model m;
    FgError err = {0};
    NcclId ids[2];
    if (model_build_mlp(&m, model, "relu", &err) || transport_nccl_new_id(&ids[0], &err) ||
        transport_nccl_new_id(&ids[1], &err)) {
        fprintf(stderr, "fgpipe-bench-cuda: %s\n", err.msg);
        return;
    }
    int cut = m.n_layers / 2;
    while (cut < m.n_layers - 1 && m.layers[cut].kind != LAYER_LINEAR) cut++;  // as partition_layers
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    PipeStage ps[2] = {{.stage = 0, .rows = rows, .m = &m, .first = 0, .last = cut, .barrier = &barrier},
                       {.stage = 1, .rows = rows, .m = &m, .first = cut, .last = m.n_layers, .barrier = &barrier}};
    ps[0].wiring.next = 1, ps[1].wiring.prev = 1;
    memcpy(ps[0].wiring.to_next, ids, sizeof ids);
    memcpy(ps[1].wiring.to_prev, ids, sizeof ids);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, pipe_stage, &ps[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    pthread_barrier_destroy(&barrier);
    double full = fmax(ps[0].seconds[0], ps[1].seconds[0]), compute = fmax(ps[0].seconds[1], ps[1].seconds[1]);
    double transfer = fmax(ps[0].seconds[2], ps[1].seconds[2]);
    double hidden = fmin(1.0, fmax(0.0, 1.0 - (full - compute) / transfer));
    printf("| %-26s | %8.2f | %10.3f | %11.3f | %9.3f | %5.0f%% |\n", model,
           rows * m.layers[cut].in * 4.0 / 1048576.0, compute * 1e3, transfer * 1e3, full * 1e3, 100 * hidden);
}
#endif

static void hidden_table(int rows) {
    const char *models[] = {"784-1024-1024-1024-10", "784-8192-8192-8192-8192-10"};
    printf("\n2 stages on 2 GPUs, %d forward micro-batches, messages through NCCL:\n", 8);
    printf("| model                      | msg MiB  | compute ms | transfer ms | NCCL ms   | hidden |\n|---|---|---|---|---|---|\n");
#ifdef FGPIPE_HAVE_NCCL
    if (backend_cuda_device_count() >= 2) {
        for (int i = 0; i < 2; i++) hidden_share(models[i], rows);
        return;
    }
    const char *why = "n/a (needs 2 GPUs)";
#else
    const char *why = "n/a (built without NCCL)";
#endif
    for (int i = 0; i < 2; i++) printf("| %-26s | %s |\n", models[i], why);
}

// GB/s of the best of 5 copies of bytes, to the device (to_device) or back.
static double link_gbps(void *host, void *dev, size_t bytes, int to_device) {
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        cudaEventRecord(a, 0);
        if (to_device) cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, 0);
        else cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, 0);
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        if (ms < best) best = ms;
    }
    cudaEventDestroy(a), cudaEventDestroy(b);
    return bytes / (best * 1e-3) / 1e9;
}

static int link_table(void) {
    const size_t bytes = (size_t)256 << 20;
    void *dev, *pinned, *pageable = malloc(bytes);
    if (cudaMalloc(&dev, bytes) != cudaSuccess || cudaMallocHost(&pinned, bytes) != cudaSuccess || !pageable) {
        fprintf(stderr, "fgpipe-bench-cuda: cannot allocate %zu bytes for the link test\n", bytes);
        return 1;
    }
    memset(pinned, 1, bytes), memset(pageable, 1, bytes);
    printf("| host memory | to the GPU GB/s | from the GPU GB/s |\n|---|---|---|\n");
    printf("| page-locked | %.1f | %.1f |\n", link_gbps(pinned, dev, bytes, 1), link_gbps(pinned, dev, bytes, 0));
    printf("| pageable    | %.1f | %.1f |\n", link_gbps(pageable, dev, bytes, 1), link_gbps(pageable, dev, bytes, 0));
    cudaFree(dev), cudaFreeHost(pinned), free(pageable);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "link")) {
        if (backend_cuda_device_count() == 0) return 77;
        return link_table();
    }
    int rows = argc > 1 ? atoi(argv[1]) : 256;
    if (backend_cuda_device_count() == 0) {
        fprintf(stderr, "fgpipe-bench-cuda: no CUDA GPU visible; nothing to measure\n");
        return 77;
    }
    Backend gpu;
    FgError err = {0};
    if (backend_cuda_create(0, &gpu, &err)) {
        fprintf(stderr, "fgpipe-bench-cuda: %s\n", err.msg);
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const char *models[] = {"784-1024-1024-1024-10", "784-8192-8192-8192-8192-10"};
    printf("fgpipe CUDA bench on %s, %d rows per micro-batch, FP32\n\n", prop.name, rows);
    printf("| model                      | rows x in x out       | ours TF/s | cuBLASLt best TF/s | ours / best |\n");
    printf("|---|---|---|---|---|\n");
    for (int i = 0; i < 2; i++) gemm_table(&gpu, models[i], rows);
    printf("\n| model                      | device | bp samples/s | fg samples/s |\n|---|---|---|---|\n");
    for (int i = 0; i < 2; i++)
        printf("| %-26s | cuda   | %12.0f | %12.0f |\n", models[i], samples_per_s(&gpu, models[i], rows, 0, 2.0),
               samples_per_s(&gpu, models[i], rows, 1, 2.0));
    printf("| %-26s | cpu    | %12.0f | %12.0f |\n", models[0], samples_per_s(&backend_cpu, models[0], rows, 0, 3.0),
           samples_per_s(&backend_cpu, models[0], rows, 1, 3.0));
    if (gpu.sync(&gpu, &err)) fprintf(stderr, "fgpipe-bench-cuda: %s\n", err.msg);
    backend_cuda_destroy(&gpu);
    hidden_table(rows);
    return 0;
}
