// Training throughput and memory of bp and fg on the default MLP, against OpenBLAS's own
// sgemm on the same GEMM shapes. Prints one table. Usage: fgpipe-bench [CONFIG] [STEPS]
//
// Each measurement runs in its own child process: peak RSS is then that mode's own, and the
// parent never starts an OpenMP thread pool (libgomp's pool does not survive fork()).
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "model.h"
#include "progress.h"
#include "train.h"

typedef struct {
    double samples_per_s, test_acc;
    long peak_rss;
    int ok;
} ModeResult;

static ModeResult run_mode(const char *config_path, const char *mode, int tangents, int steps) {
    ModeResult r = {0};
    int fds[2];
    if (pipe(fds)) return r;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        Config c;
        config_defaults(&c);
        FgError err = {0};
        char k[16], s[16];
        snprintf(k, sizeof k, "%d", tangents);
        snprintf(s, sizeof s, "%d", steps);
        int rc = config_load(&c, config_path, &err) || config_set(&c, "mode", mode, &err) ||
                 config_set(&c, "tangents", k, &err) || config_set(&c, "steps", s, &err) ||
                 config_set(&c, "print_every", s, &err);
        TrainResult tr;
        Transport local = transport_local();
        TrainEnv env = {&backend_cpu, &local, NULL, NULL};
        if (!rc) rc = train_run(&c, &env, NULL, NULL, &tr, &err);
        if (rc) fprintf(stderr, "bench: %s\n", err.msg);
        ModeResult out = {rc ? 0 : tr.samples_per_s, rc ? 0 : tr.test_acc, 0, !rc};
        if (write(fds[1], &out, sizeof out) != sizeof out) _exit(1);
        _exit(rc);
    }
    close(fds[1]);
    int status;
    struct rusage ru;
    if (read(fds[0], &r, sizeof r) != sizeof r) r.ok = 0;
    close(fds[0]);
    wait4(pid, &status, 0, &ru);
    r.peak_rss = ru.ru_maxrss * 1024L;
    return r;
}

// Seconds for the GEMMs of one bp micro-batch step: forward y = x W^T, input adjoint
// dx = dy W (not for the first layer, as in training), weight gradient dW += dy^T x.
static double time_bp_gemms(const Model *m, int B, int reps, double *flops) {
    size_t maxp = 0;
    for (int l = 0; l < m->n_layers; l++) maxp = FG_MAX(maxp, m->layers[l].param_count);
    float *W = fg_alloc_floats(maxp), *dW = fg_alloc_floats(maxp);
    float *x = fg_alloc_floats((size_t)B * m->max_width), *y = fg_alloc_floats((size_t)B * m->max_width);
    for (size_t i = 0; i < maxp; i++) W[i] = (float)(i % 7) * 0.01f;
    *flops = 0;
    double t0 = 0;
    for (int r = -1; r < reps; r++) {  // r = -1 warms up
        if (r == 0) t0 = wall_seconds();
        for (int l = 0; l < m->n_layers; l++) {
            const Layer *L = &m->layers[l];
            if (L->kind != LAYER_LINEAR) continue;
            int in = L->in, out = L->out;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1, x, in, W, in, 0, y, out);
            if (l > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1, y, out, W, in, 0, x, in);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1, y, out, x, in, 1, dW, in);
            if (r == 0) *flops += 2.0 * B * in * out * (l > 0 ? 3 : 2);
        }
    }
    double t = (wall_seconds() - t0) / reps;
    fg_free(W), fg_free(dW), fg_free(x), fg_free(y);
    return t;
}

static double sgemm_gflops_in_child(const Model *m, int B) {
    int fds[2];
    double gflops = 0;
    if (pipe(fds)) return 0;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        double flops, seconds = time_bp_gemms(m, B, 50, &flops);
        gflops = flops / seconds / 1e9;
        _exit(write(fds[1], &gflops, sizeof gflops) != sizeof gflops);
    }
    close(fds[1]);
    if (read(fds[0], &gflops, sizeof gflops) != sizeof gflops) gflops = 0;
    close(fds[0]);
    waitpid(pid, NULL, 0);
    return gflops;
}

int main(int argc, char **argv) {
    const char *config_path = argc > 1 ? argv[1] : "launch/configs/fashion-mnist-mlp.conf";
    int steps = argc > 2 ? atoi(argv[2]) : 200;
    Config c;
    config_defaults(&c);
    FgError err = {0};
    Model m;
    if (config_load(&c, config_path, &err) || model_build_mlp(&m, c.net.model, c.net.activation, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 2;
    }
    printf("fgpipe bench: model %s (%zu params), micro-batch %d x %d, %d steps per mode\n\n",
           c.net.model, m.n_params, c.training.micro_batches, c.training.micro_batch, steps);

    double gemm_gflops = sgemm_gflops_in_child(&m, c.training.micro_batch);
    if (gemm_gflops <= 0) {
        fprintf(stderr, "bench: sgemm timing failed\n");
        return 1;
    }
    // The counted FLOPs of a bp step: 6 x params x samples (forward 2, backward 4).
    double bp_flops_per_sample = 6.0 * (double)m.n_params;

    printf("%-10s %14s %14s %14s %12s\n", "mode", "samples/s", "GFLOP/s", "peak RSS MiB", "vs sgemm");
    printf("%-10s %14s %14.1f %14s %12s\n", "sgemm", "-", gemm_gflops, "-", "1.00");
    struct { const char *name, *mode; int k; } modes[] = {
        {"bp", "bp", 1}, {"fg K=1", "fg", 1}, {"fg K=4", "fg", 4}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        ModeResult r = run_mode(config_path, modes[i].mode, modes[i].k, steps);
        if (!r.ok) {
            printf("%-10s failed\n", modes[i].name);
            return 1;
        }
        // GFLOP/s and the sgemm ratio are defined for bp only (fg does other work per sample).
        char gflops[32] = "-", ratio[32] = "-";
        if (strcmp(modes[i].mode, "bp") == 0) {
            double g = r.samples_per_s * bp_flops_per_sample / 1e9;
            snprintf(gflops, sizeof gflops, "%.1f", g);
            snprintf(ratio, sizeof ratio, "%.2f", g / gemm_gflops);
        }
        printf("%-10s %14.0f %14s %14.0f %12s\n", modes[i].name, r.samples_per_s, gflops,
               r.peak_rss / 1048576.0, ratio);
    }
    printf("\nGFLOP/s of bp counts 6 x params x samples; sgemm times the same GEMM shapes alone.\n");
    return 0;
}
