// fgpipe command line: `fgpipe train --config FILE [--set key=value ...]`.
#include "cli.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "run_plan.h"
#include "tokenize.h"
#include "train.h"

// Each subcommand's usage (`fgpipe SUBCOMMAND --help`); `fgpipe --help` prints them all and
// the config keys.
static const char USAGE_TRAIN[] =
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
    "  --init-from FILE     start from a checkpoint's weights (any stage count) at step\n"
    "                       0 with fresh optimizer state: fine-tuning, transfer learning\n"
    "  --mem-budget BYTES   memory per stage (suffix K, M, G: powers of 1024); a stage\n"
    "                       needing more streams its layers from --weights-dir\n"
    "  --weights-dir DIR    local flash for the layer stores of such stages\n"
    "  --resume-weights     continue from the layer stores in --weights-dir (after a crash\n"
    "                       or a stop: they always hold a whole step)\n";
static const char USAGE_GENERATE[] =
    "usage: fgpipe generate --checkpoint FILE [--prompt TEXT] [--tokens N]\n"
    "                       [--temperature T] [--top-k K] [--seed S]\n"
    "                       [--vocab DIR | --tokenizer JSON]\n"
    "  samples N tokens (default 256) from a GPT checkpoint (model = gpt) on one rank:\n"
    "  bytes for vocab 256, GPT-2's BPE (DIR: encoder.json, vocab.bpe; default\n"
    "  data/gpt2) for vocab 50257, a Hugging Face tokenizer.json's tokens (Llama 3,\n"
    "  Qwen3); temperature 0 takes the most likely token; top-k 0 samples among all\n";
static const char USAGE_EVAL[] =
    "usage: fgpipe eval --checkpoint FILE (--tokens FILE | --text FILE) [--ctx T]\n"
    "                   [--batch B] [--summary-json F] [--logits F]\n"
    "                   [--mem-budget BYTES --weights-dir DIR]\n"
    "  on one rank: the mean loss in nats per token over every non-overlapping window\n"
    "  of T + 1 tokens of a file (T: the model's ctx unless smaller), and next-token\n"
    "  accuracy; --text reads bytes as tokens (byte-level models: also bits per byte);\n"
    "  --logits writes the first window's logits, float32 [T][vocab]. --mem-budget\n"
    "  (suffix K, M, G): a model larger than BYTES streams its layers from a layer store\n"
    "  made from the checkpoint in DIR (local flash), layer-major in passes of as many\n"
    "  windows as BYTES holds: the same loss; T is the model's ctx, no --logits, --batch\n";
static const char USAGE_TOKENIZE[] =
    "usage: fgpipe tokenize --in TEXT --out TOKENS.bin [--vocab DIR | --tokenizer JSON]\n"
    "                       [--decode]\n"
    "  byte-level BPE: UTF-8 text -> little-endian token ids (--decode: back): GPT-2's\n"
    "  (DIR holds encoder.json and vocab.bpe; default data/gpt2: launch/gpt2-vocab.sh),\n"
    "  or a Hugging Face tokenizer.json's (Llama 3, Qwen3: launch/hf-tokenizer.sh);\n"
    "  uint16 up to 65536 tokens, else uint32 after an 8-byte header FGTOKU32\n";
static const char USAGE_PLAN[] =
    "usage: fgpipe plan --config FILE [--set key=value ...] [--costs SUMMARY.json\n"
    "                   [--measured]] [--json FILE] [--batches --mem-budget BYTES\n"
    "                   (--weights-dir DIR | --disk-bw GB/s) [--frozen-bf16]]\n"
    "  on one rank, without training: the timetable of every schedule (bp-gpipe,\n"
    "  bp-1f1b, bp-zb, fg, fg+bp) for the config's stages, micro-batches and replicas:\n"
    "  step time, bubble, B ops, activation memory and bytes sent per stage. Op costs\n"
    "  are timed here one stage at a time (any number of stages), or for the mode of a\n"
    "  run taken from its summary.json (--costs: its timetable exactly; --measured: with\n"
    "  the op times the run measured). --batches: for a stage streaming its weights\n"
    "  from flash, activation memory, bytes moved and the bandwidth needed against the\n"
    "  micro-batch size for bp-zb, fg and fg+bp, and the size each would choose (the\n"
    "  flash measured in DIR, or --disk-bw); with replicas, for the node whose R replicas\n"
    "  share one store: where the step turns compute-bound, the largest that fits;\n"
    "  --frozen-bf16: the frozen layers (a LoRA base imported in BF16) read as BF16.\n"
    "  Bounded: a mode whose timing here passes about 200 GFLOP of GEMMs or 3/4 of\n"
    "  the memory, or comes after 60 s of timing, is not timed (its rows say why;\n"
    "  exit 2 when none is); SIGTERM or SIGINT end it at once (exit 128 + signal).\n"
    "  --node devices=D,tflops=F,memory=BYTES,flash=GB/s [--params N] [--at BATCH]: the\n"
    "  same two curves for a node described, not measured (nothing is timed): D devices\n"
    "  sharing one store, the config's transformer or one of N parameters; where a batch\n"
    "  of BATCH sequences (default 64) stands\n";

static const struct {
    const char *name, *text;
} USAGES[] = {{"train", USAGE_TRAIN}, {"generate", USAGE_GENERATE}, {"eval", USAGE_EVAL},
              {"tokenize", USAGE_TOKENIZE}, {"plan", USAGE_PLAN}};
enum { N_USAGES = sizeof USAGES / sizeof *USAGES };

static void usage(FILE *f) {
    for (int i = 0; i < N_USAGES; i++) fprintf(f, "%s%s", i ? "\n" : "", USAGES[i].text);
    fprintf(f, "\nconfig keys:\n");
    config_write_help(f);
}

// `fgpipe SUBCOMMAND ... --help`: that subcommand's usage (train's and plan's with the config
// keys) on stdout; 0 when argv asks for it, -1 when not.
static int subcommand_help(int argc, char **argv) {
    int asked = 0;
    for (int i = 2; i < argc; i++) asked |= strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
    for (int i = 0; i < N_USAGES && asked; i++)
        if (strcmp(argv[1], USAGES[i].name) == 0) {
            fputs(USAGES[i].text, stdout);
            if (i == 0 || i == N_USAGES - 1) {
                printf("\nconfig keys:\n");
                config_write_help(stdout);
            }
            return 0;
        }
    return -1;
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

// The config file, then --set overrides, then the flags that are config keys; validated.
static int load_config(RunArgs *a, const char *path, const char *const *sets, int n_sets,
                       const char *const *flag_values, FgError *err) {
    Config *c = &a->cfg;
    FgError e = {0};
    config_defaults(c);
    if (config_load(c, path, err)) return err->code;
    for (int i = 0; i < n_sets; i++) {
        const char *eq = strchr(sets[i], '=');
        if (!eq) return fg_fail(err, FG_ERR_INPUT, "--set '%s': expected key=value", sets[i]);
        char *key = strndup(sets[i], (size_t)(eq - sets[i]));
        int rc = config_set(c, key, eq + 1, &e);
        free(key);
        if (rc) return fg_fail(err, e.code, "--set %s: %s", sets[i], e.msg);
    }
    static const char *const flags[][2] = {{"--device", "device"}, {"--mem-budget", "mem_budget"},
                                           {"--weights-dir", "weights_dir"}};
    for (int i = 0; i < 3; i++)
        if (flag_values[i] && config_set(c, flags[i][1], flag_values[i], &e))
            return fg_fail(err, e.code, "%s %s: %s", flags[i][0], flag_values[i], e.msg);
    if (a->resume_weights && c->layout.mem_budget <= 0)
        return fg_fail(err, FG_ERR_INPUT, "--resume-weights needs mem_budget and weights_dir (the "
                       "run whose layer stores it continues)");
    return config_validate(c, err);
}

// Checkpoint and resume paths: --out DIR checkpoints into DIR/checkpoint.h5 unless told not
// to; a directory to resume from means DIR/checkpoint.h5.
static int resolve_paths(RunArgs *a, int no_checkpoint, FgError *err) {
    const char *dirs[] = {a->out.out_dir, a->in.resume_path};
    for (int i = 0; i < 2; i++)  // room for "/checkpoint.h5" in the buffers below
        if (dirs[i] && strlen(dirs[i]) > sizeof a->checkpoint_buf - 64)
            return fg_fail(err, FG_ERR_INPUT, "%s: a path of %zu bytes is too long",
                           i ? "--resume" : "--out", strlen(dirs[i]));
    if (no_checkpoint && (a->out.checkpoint_path || a->out.checkpoint_every))
        return fg_fail(err, FG_ERR_INPUT, "--no-checkpoint contradicts --checkpoint and --checkpoint-every");
    if (!a->out.checkpoint_path && a->out.out_dir && !no_checkpoint) {
        snprintf(a->checkpoint_buf, sizeof a->checkpoint_buf, "%s/checkpoint.h5", a->out.out_dir);
        a->out.checkpoint_path = a->checkpoint_buf;
    }
    struct stat sb;
    if (a->in.resume_path && !stat(a->in.resume_path, &sb) && S_ISDIR(sb.st_mode)) {
        snprintf(a->resume_buf, sizeof a->resume_buf, "%s/checkpoint.h5", a->in.resume_path);
        a->in.resume_path = a->resume_buf;
    }
    if (a->in.resume_path && a->in.init_from)
        return fg_fail(err, FG_ERR_INPUT, "--resume continues a run, --init-from starts a new one "
                       "from a checkpoint's weights: give one of them");
    // Either flag would replace the stores' weights, silently: at step 0 (--init-from) or at
    // the checkpoint's step (--resume).
    if (a->resume_weights && (a->in.resume_path || a->in.init_from))
        return fg_fail(err, FG_ERR_INPUT, "--resume-weights continues from the layer stores; %s "
                       "loads a checkpoint's weights instead: give one of them",
                       a->in.resume_path ? "--resume" : "--init-from");
    return FG_OK;
}

// Parses the arguments of `fgpipe train` into a (the config loaded, overridden and validated).
static int parse_train(int argc, char **argv, RunArgs *a, FgError *err) {
    const char *config_path = NULL, *flag_values[3] = {NULL, NULL, NULL};  // device, budget, dir
    char mem_budget[64] = "";
    const char *sets[256];
    int n_sets = 0, no_checkpoint = 0, rc;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        int more = i + 1 < argc;
        if (strcmp(f, "--config") == 0 && more) config_path = argv[++i];
        else if (strcmp(f, "--out") == 0 && more) a->out.out_dir = argv[++i];
        else if (strcmp(f, "--summary-json") == 0 && more) a->summary_path = argv[++i];
        else if (strcmp(f, "--trace") == 0 && more) a->out.trace_path = argv[++i];
        else if (strcmp(f, "--save-params") == 0 && more) a->out.params_path = argv[++i];
        else if (strcmp(f, "--checkpoint") == 0 && more) a->out.checkpoint_path = argv[++i];
        else if (strcmp(f, "--no-checkpoint") == 0) no_checkpoint = 1;
        else if (strcmp(f, "--resume") == 0 && more) a->in.resume_path = argv[++i];
        else if (strcmp(f, "--init-from") == 0 && more) a->in.init_from = argv[++i];
        else if (strcmp(f, "--log") == 0 && more) a->out.log_path = argv[++i];
        else if (strcmp(f, "--device") == 0 && more) flag_values[0] = argv[++i];
        else if (strcmp(f, "--weights-dir") == 0 && more) flag_values[2] = argv[++i];
        else if (strcmp(f, "--resume-weights") == 0) a->resume_weights = 1;
        else if (strcmp(f, "--mem-budget") == 0 && more) {
            if ((rc = parse_bytes(argv[++i], mem_budget, sizeof mem_budget, err))) return rc;
            flag_values[1] = mem_budget;
        } else if (strcmp(f, "--checkpoint-every") == 0 && more) {
            char *end;
            a->out.checkpoint_every = strtol(argv[++i], &end, 10);
            if (*end || a->out.checkpoint_every <= 0)
                return fg_fail(err, FG_ERR_INPUT, "--checkpoint-every '%s': expected a positive step count", argv[i]);
        } else if (strcmp(f, "--set") == 0 && more && n_sets < 256) {
            sets[n_sets++] = argv[++i];
        } else {
            return fg_fail(err, FG_ERR_INPUT, "unknown or incomplete argument '%s' (see fgpipe --help)", f);
        }
    }
    if (!config_path) return fg_fail(err, FG_ERR_INPUT, "train needs --config FILE (see fgpipe --help)");
    if ((rc = load_config(a, config_path, sets, n_sets, flag_values, err)) ||
        (rc = resolve_paths(a, no_checkpoint, err)))
        return rc;
    return cli_check_paths(a, config_path, err);
}

// A number flag's value: an integer (real = 0) or a real in [lo, hi].
static int parse_number(const char *flag, const char *text, int real, double lo, double hi,
                        double *out, FgError *err) {
    char *end;
    *out = real ? strtod(text, &end) : (double)strtol(text, &end, 10);
    if (end == text || *end || !(*out >= lo && *out <= hi))
        return fg_fail(err, FG_ERR_INPUT, "%s '%s': expected %s in [%g, %g]", flag, text,
                       real ? "a number" : "an integer", lo, hi);
    return FG_OK;
}

static int parse_generate(int argc, char **argv, RunArgs *a, FgError *err) {
    GenerateArgs *g = &a->gen;
    *g = (GenerateArgs){.prompt = "", .vocab_dir = "data/gpt2", .tokens = 256, .temperature = 1.0,
                        .top_k = 0, .seed = 1};
    a->command = COMMAND_GENERATE;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        double v = 0;
        int rc = FG_OK;
        if (i + 1 >= argc) return fg_fail(err, FG_ERR_INPUT, "generate: '%s' needs a value", f);
        const char *value = argv[++i];
        if (strcmp(f, "--checkpoint") == 0) g->checkpoint = value;
        else if (strcmp(f, "--prompt") == 0) g->prompt = value;
        else if (strcmp(f, "--vocab") == 0) g->vocab_dir = value;
        else if (strcmp(f, "--tokenizer") == 0) g->tokenizer = value;
        else if (strcmp(f, "--tokens") == 0 && !(rc = parse_number(f, value, 0, 0, 1 << 24, &v, err))) g->tokens = (int)v;
        else if (strcmp(f, "--temperature") == 0 && !(rc = parse_number(f, value, 1, 0, 100, &v, err))) g->temperature = v;
        else if (strcmp(f, "--top-k") == 0 && !(rc = parse_number(f, value, 0, 0, 65536, &v, err))) g->top_k = (int)v;
        else if (strcmp(f, "--seed") == 0 && !(rc = parse_number(f, value, 0, 0, 4294967295.0, &v, err))) g->seed = (uint32_t)v;
        else if (!rc) return fg_fail(err, FG_ERR_INPUT, "generate: unknown argument '%s' (see fgpipe --help)", f);
        if (rc) return rc;
    }
    if (!g->checkpoint) return fg_fail(err, FG_ERR_INPUT, "generate needs --checkpoint FILE");
    return FG_OK;
}

// The options of a streamed evaluation beside the in-memory one's: both or neither of
// --mem-budget and --weights-dir, and none of what a streamed one has no use for.
static int check_eval_budget(const EvalArgs *e, int batch_given, FgError *err) {
    if ((e->mem_budget > 0) != (e->weights_dir != NULL))
        return fg_fail(err, FG_ERR_INPUT, e->weights_dir ? "eval: --weights-dir needs --mem-budget "
                       "BYTES (the memory its layers stream through)" : "eval: --mem-budget needs "
                       "--weights-dir DIR (local flash for the layer store the checkpoint's layers "
                       "stream from)");
    if (e->mem_budget > 0 && e->logits_path)
        return fg_fail(err, FG_ERR_INPUT, "eval: --logits with --mem-budget: a streamed evaluation "
                       "scores each window in its fused head and never holds its logits whole");
    if (e->mem_budget > 0 && batch_given)
        return fg_fail(err, FG_ERR_INPUT, "eval: --batch with --mem-budget: the budget decides how "
                       "many windows a pass takes");
    return FG_OK;
}

static int parse_eval(int argc, char **argv, RunArgs *a, FgError *err) {
    EvalArgs *e = &a->eval;
    *e = (EvalArgs){.batch = 8};
    a->command = COMMAND_EVAL;
    char budget[64];
    int batch_given = 0;
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        double v = 0;
        int rc = FG_OK;
        if (i + 1 >= argc) return fg_fail(err, FG_ERR_INPUT, "eval: '%s' needs a value", f);
        const char *value = argv[++i];
        if (strcmp(f, "--checkpoint") == 0) e->checkpoint = value;
        else if (strcmp(f, "--tokens") == 0) e->tokens_path = value;
        else if (strcmp(f, "--text") == 0) e->text_path = value;
        else if (strcmp(f, "--summary-json") == 0) e->summary_path = value;
        else if (strcmp(f, "--logits") == 0) e->logits_path = value;
        else if (strcmp(f, "--ctx") == 0 && !(rc = parse_number(f, value, 0, 1, 65536, &v, err))) e->ctx = (int)v;
        else if (strcmp(f, "--batch") == 0 && !(rc = parse_number(f, value, 0, 1, 4096, &v, err))) e->batch = (int)v, batch_given = 1;
        else if (strcmp(f, "--weights-dir") == 0) e->weights_dir = value;
        else if (strcmp(f, "--mem-budget") == 0 && !(rc = parse_bytes(value, budget, sizeof budget, err))) e->mem_budget = atof(budget);
        else if (!rc) return fg_fail(err, FG_ERR_INPUT, "eval: unknown argument '%s' (see fgpipe --help)", f);
        if (rc) return rc;
    }
    if (!e->checkpoint) return fg_fail(err, FG_ERR_INPUT, "eval needs --checkpoint FILE");
    return check_eval_budget(e, batch_given, err);
}

static int parse_plan(int argc, char **argv, RunArgs *a, FgError *err) {
    const char *config_path = NULL, *sets[256], *flags[3] = {NULL, NULL, NULL};
    char mem_budget[64] = "";
    int n_sets = 0, rc = FG_OK;
    double v = 0;
    a->command = COMMAND_PLAN;
    for (int i = 0; i < argc && !rc; i++) {
        const int more = i + 1 < argc;
        if (strcmp(argv[i], "--config") == 0 && more) config_path = argv[++i];
        else if (strcmp(argv[i], "--batches") == 0) a->plan.batches = 1;
        else if (strcmp(argv[i], "--frozen-bf16") == 0) a->plan.frozen_bf16 = 1;
        else if (strcmp(argv[i], "--disk-bw") == 0 && more &&
                 !(rc = parse_number("--disk-bw", argv[++i], 1, 1e-3, 1e4, &v, err)))
            a->plan.disk_bandwidth = v * 1e9;
        else if (strcmp(argv[i], "--mem-budget") == 0 && more &&
                 !(rc = parse_bytes(argv[++i], mem_budget, sizeof mem_budget, err)))
            flags[1] = mem_budget;
        else if (strcmp(argv[i], "--weights-dir") == 0 && more) flags[2] = argv[++i];
        else if (strcmp(argv[i], "--costs") == 0 && more) a->plan.costs_path = argv[++i];
        else if (strcmp(argv[i], "--json") == 0 && more) a->plan.json_path = argv[++i];
        else if (strcmp(argv[i], "--measured") == 0) a->plan.measured = 1;
        else if (strcmp(argv[i], "--node") == 0 && more) a->plan.node = argv[++i];
        else if (strcmp(argv[i], "--params") == 0 && more &&
                 !(rc = parse_number("--params", argv[++i], 1, 1e3, 1e16, &v, err)))
            a->plan.node_params = v;
        else if (strcmp(argv[i], "--at") == 0 && more &&
                 !(rc = parse_number("--at", argv[++i], 1, 1, 1 << 24, &v, err)))
            a->plan.node_batch = (int)v;
        else if (strcmp(argv[i], "--set") == 0 && more && n_sets < 256) sets[n_sets++] = argv[++i];
        else if (!rc) return fg_fail(err, FG_ERR_INPUT, "plan: unknown or incomplete argument '%s' (see fgpipe --help)", argv[i]);
    }
    if (rc) return rc;
    if (!config_path) return fg_fail(err, FG_ERR_INPUT, "plan needs --config FILE (see fgpipe --help)");
    return load_config(a, config_path, sets, n_sets, flags, err);
}

// fgpipe plan has no step boundary to stop at (one op's timing of a large model takes
// seconds): SIGTERM or SIGINT ends it at once, saying so, with the signal's exit status
// (--json's temporary file is left as PATH.tmp; PATH is untouched).
static void plan_stopped(int sig) {
    static const char msg[] = "fgpipe: error: plan stopped by a signal (SIGTERM or SIGINT)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(128 + sig);
}

// fgpipe eval and generate read a checkpoint and change nothing: a signal ends them at once in
// the same way (their --summary-json or --logits is left as PATH.tmp; PATH is untouched; a
// streamed eval's layer store in --weights-dir, a scratch copy of the checkpoint's weights, is
// left as it was, a new one made by the next eval).
static void read_stopped(int sig) {
    static const char msg[] = "fgpipe: error: stopped by a signal (SIGTERM or SIGINT)\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(128 + sig);
}

static void end_at_signals(void (*handler)(int)) {
    struct sigaction sa = {0};
    sa.sa_handler = handler;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int cli_plan(const RunArgs *a, const Backend *be) {
    FgError err = {0};
    end_at_signals(plan_stopped);
    return plan_print(&a->cfg, be, &a->plan, stdout, &err) ? cli_fail(&err) : 0;
}

int cli_read_checkpoint(const RunArgs *a, Storage *io, const LayerStreams *streams) {
    FgError err = {0};
    end_at_signals(read_stopped);
    if (stop_requested) read_stopped(SIGTERM);  // a signal before now (MPI's start-up) was caught
    int rc = a->command == COMMAND_EVAL ? eval_checkpoint(&a->eval, io, streams, stdout, &err)
                                        : generate_text(&a->gen, io, stdout, &err);
    return rc ? cli_fail(&err) : 0;
}

int cli_parse(int argc, char **argv, RunArgs *a) {
    FgError err = {0};
    *a = (RunArgs){0};
    if (argc >= 2 && subcommand_help(argc, argv) == 0) return 0;
    if (argc >= 2 && strcmp(argv[1], "generate") == 0)
        return parse_generate(argc - 2, argv + 2, a, &err) ? cli_fail(&err) : -1;
    if (argc >= 2 && strcmp(argv[1], "eval") == 0)
        return parse_eval(argc - 2, argv + 2, a, &err) ? cli_fail(&err) : -1;
    if (argc >= 2 && strcmp(argv[1], "tokenize") == 0)
        return tokenize_command(argc - 2, argv + 2, &err) ? cli_fail(&err) : 0;
    if (argc >= 2 && strcmp(argv[1], "plan") == 0)
        return parse_plan(argc - 2, argv + 2, a, &err) ? cli_fail(&err) : -1;
    if (argc >= 2 && strcmp(argv[1], "train") == 0)
        return parse_train(argc - 2, argv + 2, a, &err) ? cli_fail(&err) : -1;
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0)) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}

int cli_fail(const FgError *err) {
    fprintf(stderr, "fgpipe: error: %s\n", err->msg);
    return err->code ? err->code : 1;
}

// Replica 0's first stage describes the run.
static void print_run(const Config *c) {
    char mode[CONFIG_NAME_MAX], tangents[64] = "";
    if (c->method.mode != MODE_BP && !run_plan(c, 1).tangents)
        snprintf(tangents, sizeof tangents, " (no tangents: shrink = 0 weighs fg by 0)");
    else if (c->method.mode != MODE_BP && c->method.local_groups)
        snprintf(tangents, sizeof tangents, " (K=%d tangents, local losses: %d groups per hidden "
                 "layer)", c->method.tangents, c->method.local_groups);
    else if (c->method.mode != MODE_BP)
        snprintf(tangents, sizeof tangents, " (K=%d tangents)", c->method.tangents);
    char model[160], kv[48] = "";
    if (strcmp(c->net.model, "llama") == 0)
        snprintf(kv, sizeof kv, ", n_kv_head %d, head_dim %d", c->net.n_kv_head, c->net.head_dim);
    if (config_is_language(c))
        snprintf(model, sizeof model, "%.8s (n_layer %d, n_embd %d, n_head %d%s, ctx %d, vocab %d, "
                 "head fused with the loss)", c->net.model, c->net.n_layer, c->net.n_embd,
                 c->net.n_head, kv, c->net.ctx, c->net.vocab);
    else
        snprintf(model, sizeof model, "%.64s (%s)", c->net.model, c->net.activation);
    fprintf(stderr, "fgpipe: mode %s%s, model %s, %d micro-batches x %d samples, %s lr %g, seed %u\n",
            config_choice_name("mode", c->method.mode, mode), tangents, model,
            c->training.micro_batches, c->training.micro_batch,
            c->optim.optimizer == OPT_ADAM ? "adam" : "sgd", c->optim.lr, c->training.seed);
}

// The result line: the run's first and last loss (each the mean of a window where the run is
// long enough for two), the evaluation, speed and the largest stage's peak RSS.
static void print_result(const Config *c, const TrainResult *res) {
    char loss[128], rss[96];
    int n = snprintf(loss, sizeof loss, "%ld steps, train loss %.4f -> %.4f", res->steps,
                     res->first_loss, res->final_loss);
    if (res->loss_window > 1)
        snprintf(loss + n, sizeof loss - n, " (means of the first and last %d steps)", res->loss_window);
    else
        snprintf(loss + n, sizeof loss - n, " (first and last step)");
    int big = 0;
    for (int s = 1; s < res->stages; s++)
        if (res->per_stage.peak_rss[s] > res->per_stage.peak_rss[big]) big = s;
    n = snprintf(rss, sizeof rss, "peak RSS %.0f MiB", res->per_stage.peak_rss[big] / 1048576.0);
    if (res->stages > 1) snprintf(rss + n, sizeof rss - n, " (stage %d, the largest)", big);
    if (c->input.data == DATA_TOKENS)  // per token: nats, next-token accuracy
        printf("result: %s, val loss %.4f nats/token, val next-token accuracy %.4f, %.0f tokens/s, %s\n",
               loss, res->test_loss, res->test_acc, res->samples_per_s * c->net.ctx, rss);
    else if (c->input.data == DATA_TEXT)  // per byte: nats, bits, next-byte accuracy
        printf("result: %s, val loss %.4f nats/byte (%.4f bits/byte), val next-byte accuracy %.4f, "
               "%.0f tokens/s, %s\n", loss, res->test_loss, res->test_loss / M_LN2, res->test_acc,
               res->samples_per_s * c->net.ctx, rss);
    else
        printf("result: %s, test loss %.4f, test accuracy %.4f, %.0f samples/s, %s\n", loss,
               res->test_loss, res->test_acc, res->samples_per_s, rss);
}

int cli_train(RunArgs *a, const TrainEnv *env) {
    FgError err = {0};
    Transport *t = env->tr;
    a->in.stop_requested = &stop_requested;
    if (t->stage == 0 && t->replica == 0) print_run(&a->cfg);
    TrainResult res;
    if (train_run(&a->cfg, env, &a->in, &a->out, &res, &err)) return cli_fail(&err);
    if (t->stage != t->stages - 1 || t->replica != 0) return 0;  // replica 0's last stage reports
    print_result(&a->cfg, &res);
    train_print_memory(&res, stdout);
    fflush(stdout);
    if (a->summary_path && train_write_summary(&a->cfg, &res, a->summary_path, &err)) return cli_fail(&err);
    return 0;
}
