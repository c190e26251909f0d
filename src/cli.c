// fgpipe command line: `fgpipe train --config FILE [--set key=value ...]`.
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "config.h"
#include "train.h"
#include "transport_staged.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: fgpipe train --config FILE [--set key=value ...] [--out DIR]\n"
            "                    [--summary-json FILE] [--trace FILE]\n"
            "       mpirun -np M fgpipe train ... --set stages=M   (one pipeline stage per rank)\n"
            "       mpirun -np M*R fgpipe train ... --set stages=M --set replicas=R\n"
            "                                       (R data-parallel pipelines; launch/fgpipe-run)\n"
            "\n"
            "  --config FILE        key = value lines (launch/configs/fashion-mnist-mlp.conf)\n"
            "  --set key=value      override one config key (repeatable)\n"
            "  --out DIR            write config.txt (resolved config) and loss.csv there\n"
            "  --summary-json FILE  write the run's result as one JSON object\n"
            "  --trace FILE         write the planned and measured timeline of the last step\n"
            "                       (Chrome trace JSON: open in Perfetto or chrome://tracing)\n"
            "  --save-params FILE   write the final parameters as raw float32 (flat layout)\n"
            "  --checkpoint FILE    write an HDF5 checkpoint at the end (default with --out:\n"
            "                       DIR/checkpoint.h5); SIGTERM or SIGUSR1 write it at the next\n"
            "                       step boundary and end the run with exit code 0\n"
            "  --checkpoint-every S also every S steps\n"
            "  --no-checkpoint      write none (not even the default one of --out)\n"
            "  --log FILE           per-step HDF5 log: loss, gradient norms and cosines to the\n"
            "                       exact gradient, variance reduction, bubble use, op times\n"
            "                       (docs/log.md; plots: tools/fgpipe-report)\n"
            "  --device cpu|cuda    where the stages compute (the config key device)\n"
            "  --resume FILE|DIR    continue from a checkpoint (DIR: DIR/checkpoint.h5), on any\n"
            "                       number of stages\n"
            "  --mem-budget BYTES   memory per stage (suffix K, M, G: powers of 1024); a stage\n"
            "                       needing more streams its layers from --weights-dir\n"
            "  --weights-dir DIR    local flash for the layer stores of such stages\n"
            "  --resume-weights     continue from the layer stores in --weights-dir (after a crash\n"
            "                       or a stop: they always hold a whole step)\n"
            "\nconfig keys:\n");
    config_write_help(f);
}

// Exit codes: 0 success, 2 bad usage or input (config, data files), 1 anything else.
static int fail(const FgError *err) {
    fprintf(stderr, "fgpipe: error: %s\n", err->msg);
    return err->code ? err->code : 1;
}

// Set by SIGTERM / SIGUSR1 (Slurm's warning before the time limit); read at step boundaries.
static volatile sig_atomic_t stop_requested;
static void request_stop(int sig) {
    (void)sig;
    stop_requested = 1;
}

void fgpipe_catch_stop_signals(void) {
    struct sigaction sa = {0};
    sa.sa_handler = request_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
}

// "512M" -> "536870912": the config key takes plain bytes.
static int parse_bytes(const char *s, char *out, size_t size, FgError *err) {
    char *end;
    double v = strtod(s, &end);
    double unit = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
    if (end == s || v < 0 || (unit > 1 ? end[1] : end[0]))
        return fg_fail(err, FG_ERR_INPUT, "--mem-budget '%s': expected bytes, e.g. 4000000, 512M or 2G", s);
    snprintf(out, size, "%.0f", v * unit);
    return FG_OK;
}

static int cmd_train(int argc, char **argv, TransportFactory make_transport,
                     BackendFactory make_backend, void *arg) {
    const char *config_path = NULL, *summary = NULL, *device = NULL, *weights_dir = NULL;
    char mem_budget[64] = "";
    LayerStreams streams = {0};
    TrainOutputs outputs = {0};
    const char *sets[256];
    int n_sets = 0, no_checkpoint = 0;
    FgError err = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(a, "--config") == 0 && has_value) config_path = argv[++i];
        else if (strcmp(a, "--out") == 0 && has_value) outputs.out_dir = argv[++i];
        else if (strcmp(a, "--summary-json") == 0 && has_value) summary = argv[++i];
        else if (strcmp(a, "--trace") == 0 && has_value) outputs.trace_path = argv[++i];
        else if (strcmp(a, "--save-params") == 0 && has_value) outputs.params_path = argv[++i];
        else if (strcmp(a, "--checkpoint") == 0 && has_value) outputs.checkpoint_path = argv[++i];
        else if (strcmp(a, "--no-checkpoint") == 0) no_checkpoint = 1;
        else if (strcmp(a, "--resume") == 0 && has_value) outputs.resume_path = argv[++i];
        else if (strcmp(a, "--log") == 0 && has_value) outputs.log_path = argv[++i];
        else if (strcmp(a, "--device") == 0 && has_value) device = argv[++i];
        else if (strcmp(a, "--weights-dir") == 0 && has_value) weights_dir = argv[++i];
        else if (strcmp(a, "--resume-weights") == 0) streams.resume = 1;
        else if (strcmp(a, "--mem-budget") == 0 && has_value) {
            if (parse_bytes(argv[++i], mem_budget, sizeof mem_budget, &err)) return fail(&err);
        }
        else if (strcmp(a, "--checkpoint-every") == 0 && has_value) {
            char *end;
            outputs.checkpoint_every = strtol(argv[++i], &end, 10);
            if (*end || outputs.checkpoint_every <= 0) {
                fg_fail(&err, FG_ERR_INPUT, "--checkpoint-every '%s': expected a positive step count", argv[i]);
                return fail(&err);
            }
        }
        else if (strcmp(a, "--set") == 0 && has_value && n_sets < 256) sets[n_sets++] = argv[++i];
        else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else {
            fg_fail(&err, FG_ERR_INPUT, "unknown or incomplete argument '%s' (see fgpipe --help)", a);
            return fail(&err);
        }
    }
    if (!config_path) {
        fg_fail(&err, FG_ERR_INPUT, "train needs --config FILE (see fgpipe --help)");
        return fail(&err);
    }
    Config cfg;
    config_defaults(&cfg);
    if (config_load(&cfg, config_path, &err)) return fail(&err);
    for (int i = 0; i < n_sets; i++) {
        char kv[512];
        snprintf(kv, sizeof kv, "%s", sets[i]);
        char *eq = strchr(kv, '=');
        if (!eq) {
            fg_fail(&err, FG_ERR_INPUT, "--set '%s': expected key=value", sets[i]);
            return fail(&err);
        }
        *eq = 0;
        FgError e = {0};
        if (config_set(&cfg, kv, eq + 1, &e)) {
            fg_fail(&err, e.code, "--set %s: %s", sets[i], e.msg);
            return fail(&err);
        }
    }
    FgError e = {0};
    const char *flags[][3] = {{"--device", "device", device},
                              {"--mem-budget", "mem_budget", mem_budget[0] ? mem_budget : NULL},
                              {"--weights-dir", "weights_dir", weights_dir}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i][2] && config_set(&cfg, flags[i][1], flags[i][2], &e)) {
            fg_fail(&err, e.code, "%s %s: %s", flags[i][0], flags[i][2], e.msg);
            return fail(&err);
        }
    if (streams.resume && cfg.mem_budget <= 0) {
        fg_fail(&err, FG_ERR_INPUT, "--resume-weights needs mem_budget and weights_dir (the run "
                "whose layer stores it continues)");
        return fail(&err);
    }
    if (config_validate(&cfg, &err)) return fail(&err);

    // Checkpoint and resume paths: a directory means DIR/checkpoint.h5.
    char ckpt[4096], resume[4096];
    if (no_checkpoint && (outputs.checkpoint_path || outputs.checkpoint_every)) {
        fg_fail(&err, FG_ERR_INPUT, "--no-checkpoint contradicts --checkpoint and --checkpoint-every");
        return fail(&err);
    }
    if (!outputs.checkpoint_path && outputs.out_dir && !no_checkpoint) {
        snprintf(ckpt, sizeof ckpt, "%s/checkpoint.h5", outputs.out_dir);
        outputs.checkpoint_path = ckpt;
    }
    struct stat sb;
    if (outputs.resume_path && !stat(outputs.resume_path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(resume, sizeof resume, "%s/checkpoint.h5", outputs.resume_path);
        outputs.resume_path = resume;
    }
    const Backend *be = &backend_cpu;
    if (cfg.device != DEVICE_CPU) {
        if (!make_backend) {
            fg_fail(&err, FG_ERR_INPUT, "device = cuda, but this fgpipe was built without CUDA "
                    "(nvcc was not found when it was configured)");
            return fail(&err);
        }
        if (make_backend(arg, (DeviceKind)cfg.device, &be, &err)) return fail(&err);
    }
    // `made` stays the factory's (main owns and destroys it); t is what the stages talk through.
    Transport made, staged_transport, *t = &made;
    Storage io = {0};
    if (make_transport(arg, cfg.stages, cfg.replicas, be, &made, &io, &err)) return fail(&err);
    if (be->on_device && !made.device_memory) {
        staged_transport = transport_staged(made, be);
        t = &staged_transport;
    }
    if (io.open_stream) {
        streams.arg = io.ctx, streams.open = io.open_stream;
        outputs.streams = &streams;
    }
    if (io.save) outputs.storage = &io;
    else if (outputs.resume_path || outputs.checkpoint_every) {
        fg_fail(&err, FG_ERR_INPUT, "this build of fgpipe has no checkpoint storage");
        return fail(&err);
    }
    fgpipe_catch_stop_signals();  // again: MPI start-up may have set its own
    outputs.stop_requested = &stop_requested;
    // Replica 0's last stage reports, its first stage describes the run.
    int reporter = t->stage == t->stages - 1 && t->replica == 0;
    if (t->stage == 0 && t->replica == 0) {
        static const char *const modes[] = {"bp", "fg", "fg+bp"};
        char tangents[32] = "";
        if (cfg.mode != MODE_BP) snprintf(tangents, sizeof tangents, " (K=%d tangents)", cfg.tangents);
        fprintf(stderr, "fgpipe: mode %s%s, model %s (%s), %d micro-batches x %d samples, %s lr %g, seed %u\n",
                modes[cfg.mode], tangents, cfg.model, cfg.activation, cfg.micro_batches,
                cfg.micro_batch, cfg.optimizer == OPT_ADAM ? "adam" : "sgd", cfg.lr, cfg.seed);
    }
    TrainResult res;
    int rc = train_run(&cfg, be, t, &outputs, &res, &err);
    if (t == &staged_transport) transport_staged_free(t);
    if (rc) return fail(&err);
    if (reporter) {
        printf("result: %ld steps, train loss %.4f -> %.4f, test loss %.4f, test accuracy %.4f, "
               "%.0f samples/s, peak RSS %.0f MiB (last stage)\n",
               res.steps, res.first_loss, res.final_loss, res.test_loss, res.test_acc,
               res.samples_per_s, res.peak_rss_bytes / 1048576.0);
        fflush(stdout);
        if (summary && train_write_summary(&cfg, &res, summary, &err)) return fail(&err);
    }
    return 0;
}

int fgpipe_cli(int argc, char **argv, TransportFactory make_transport,
               BackendFactory make_backend, void *arg) {
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return cmd_train(argc - 2, argv + 2, make_transport, make_backend, arg);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0)) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
