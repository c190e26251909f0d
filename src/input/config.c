#include "config.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bf16.h"
#include "head_loss.h"

typedef enum { KEY_INT, KEY_UINT32, KEY_REAL, KEY_STRING, KEY_CHOICE } KeyType;

// Whether two checkpoints that differ in a key hold different models (config_model_mismatch
// compares the classes in this order, each in the table's order).
typedef enum {
    ID_NONE,   // how the model trains or runs, not what it is
    ID_MODEL,  // every model's: its kind, shape and data
    ID_MLP,    // an MLP's alone (the GPT's and Llama's activation is fixed)
    ID_LLAMA,  // model = llama's shape (Hugging Face's config.json: tools/fgpipe_convert_llama.py)
    ID_LORA,   // LoRA's adapters, where a checkpoint has them
} KeyIdentity;

typedef struct {
    const char *name;
    KeyType type;
    size_t offset, size;   // where in Config, and the size of string fields
    double min, max;       // numeric range (inclusive)
    const char *choices;   // KEY_CHOICE: "a|b|c", stored as the index
    double def;            // the default of a number, or of a choice (its index)
    const char *def_text;  // the default of a string
    KeyIdentity identity;
    const char *help;
} ConfigKey;

// A key is a field of one of Config's groups: its name is the field's. After the field comes
// its default.
#define AT(group, field) offsetof(Config, group.field)
#define SIZE(group, field) sizeof(((Config *)0)->group.field)
#define KEY(id, T, group, field, size, lo, hi, choices, def, text, help) \
    {#field, T, AT(group, field), size, lo, hi, choices, def, text, id, help}
#define NUM(T, group, field, def, lo, hi, help) KEY(ID_NONE, T, group, field, 0, lo, hi, NULL, def, NULL, help)
// min: the shortest value (1, or 0 where empty means "none", the default).
#define STR(group, field, def, help) \
    KEY(ID_NONE, KEY_STRING, group, field, SIZE(group, field), 1, 0, NULL, 0, def, help)
#define STR_OR_NONE(group, field, help) \
    KEY(ID_NONE, KEY_STRING, group, field, SIZE(group, field), 0, 0, NULL, 0, "", help)
#define CHOICE(group, field, choices, def, help) \
    KEY(ID_NONE, KEY_CHOICE, group, field, 0, 0, 0, choices, def, NULL, help)
// The keys that say what the model is (KeyIdentity id); MODEL_NUM and MODEL_STR are NetConfig's.
#define MODEL_NUM(id, T, field, def, lo, hi, help) KEY(id, T, net, field, 0, lo, hi, NULL, def, NULL, help)
#define MODEL_STR(id, field, def, help) KEY(id, KEY_STRING, net, field, SIZE(net, field), 1, 0, NULL, 0, def, help)
#define MODEL_CHOICE(id, group, field, choices, def, help) \
    KEY(id, KEY_CHOICE, group, field, 0, 0, 0, choices, def, NULL, help)

// The choice strings list values in the order of their enums (Mode, OptimizerKind, LrSchedule).
static const ConfigKey KEYS[] = {
    MODEL_CHOICE(ID_MODEL, input, data, "idx|text|tokens", DATA_IDX, "idx: labelled images from IDX files in data_dir; text: byte-level language modelling on text_file; tokens: language modelling on train_tokens and val_tokens (fgpipe tokenize makes them)"),
    STR(input, data_dir, "/usr/share/datasets/fashion-mnist", "directory with the IDX files (train-*, t10k-*)"),
    STR_OR_NONE(input, text_file, "data = text: the corpus; its first 90% of bytes train, the last 10% validate (launch/text-corpus.sh makes the default, the King James Bible)"),
    STR_OR_NONE(input, train_tokens, "data = tokens: the training tokens (fgpipe tokenize): little-endian uint16 (nanoGPT's and llm.c's format) up to vocab 65536, uint32 after an FGTOKU32 header above; memory-mapped: any size"),
    STR_OR_NONE(input, val_tokens, "data = tokens: the validation tokens, same format; every non-overlapping window of ctx + 1 tokens is evaluated"),
    MODEL_STR(ID_MODEL, model, "784-1024-1024-1024-10", "MLP layer widths, input to classes, e.g. 784-1024-1024-1024-10; or gpt (a byte-level GPT-2-style transformer: n_layer, n_embd, n_head, ctx); or llama (Llama 3 / Qwen3: also n_kv_head, head_dim, intermediate_size, rope_*, rms_norm_eps, qk_norm, tie_embeddings; docs/gpt.md)"),
    MODEL_STR(ID_MLP, activation, "relu", "activation after each hidden linear layer: relu | gelu"),
    MODEL_NUM(ID_MODEL, KEY_INT, n_layer, 4, 1, 96, "model = gpt: transformer blocks"),
    MODEL_NUM(ID_MODEL, KEY_INT, n_embd, 128, 1, 16384, "model = gpt: width of the residual stream (a multiple of n_head)"),
    MODEL_NUM(ID_MODEL, KEY_INT, n_head, 4, 1, 256, "model = gpt: attention heads"),
    MODEL_NUM(ID_MODEL, KEY_INT, ctx, 128, 1, 65536, "model = gpt: tokens (bytes) per sample"),
    MODEL_NUM(ID_MODEL, KEY_INT, vocab, 256, 2, 1 << 24, "model = gpt: token ids 0..vocab-1: 256 for bytes (data = text), 50257 for GPT-2's BPE, 128256 for Llama 3, 151936 for Qwen3 (above 65536 the token files hold uint32: docs/gpt.md, \"Tokenizers\"); ids travel as floats, exact below 2^24"),
    NUM(KEY_INT, net, head_block, HEAD_BLOCK_COLUMNS, 1, 1 << 20, "model = gpt, training: the head fused with the loss forms its logits this many vocabulary columns at a time (docs/gpt.md, \"The fused head and loss\"); a row's block of logits is all it holds at once"),
    NUM(KEY_INT, net, pad_vocab, 1, 1, 1024, "model = gpt: the token table (and the head) has vocab rounded up to a multiple of this many rows (GPT-2: 64, for aligned GEMMs); the pad rows are left out of the loss and never sampled"),
    MODEL_NUM(ID_LLAMA, KEY_INT, n_kv_head, 4, 1, 256, "model = llama: key and value heads (grouped-query attention; divides n_head)"),
    MODEL_NUM(ID_LLAMA, KEY_INT, head_dim, 32, 2, 4096, "model = llama: features per attention head (even; not necessarily n_embd / n_head)"),
    MODEL_NUM(ID_LLAMA, KEY_INT, intermediate_size, 344, 1, 1 << 20, "model = llama: width of the SwiGLU MLP"),
    MODEL_NUM(ID_LLAMA, KEY_REAL, rope_theta, 10000, 1, 1e12, "model = llama: rotary embedding base (Llama 3: 500000, Qwen3: 1000000)"),
    MODEL_NUM(ID_LLAMA, KEY_REAL, rope_scaling_factor, 0, 0, 1e6, "model = llama: Llama 3's rope_scaling factor (rope_type llama3; Llama 3.2: 32); 0: no scaling"),
    MODEL_NUM(ID_LLAMA, KEY_REAL, rope_scaling_low_freq_factor, 1, 0, 1e6, "model = llama, rope_scaling_factor > 0: low_freq_factor"),
    MODEL_NUM(ID_LLAMA, KEY_REAL, rope_scaling_high_freq_factor, 4, 0, 1e6, "model = llama, rope_scaling_factor > 0: high_freq_factor (above the low one)"),
    MODEL_NUM(ID_LLAMA, KEY_INT, rope_scaling_original_max_position_embeddings, 8192, 0, 1 << 24, "model = llama, rope_scaling_factor > 0: original_max_position_embeddings"),
    MODEL_NUM(ID_LLAMA, KEY_REAL, rms_norm_eps, 1e-6, 1e-30, 1, "model = llama: RMSNorm's epsilon"),
    MODEL_NUM(ID_LLAMA, KEY_INT, qk_norm, 0, 0, 1, "model = llama: 1: RMSNorm over head_dim on each q and k head before the rotation (Qwen3)"),
    MODEL_NUM(ID_LLAMA, KEY_INT, tie_embeddings, 1, 0, 1, "model = llama: 1: the head is the token table (tie_word_embeddings)"),
    MODEL_NUM(ID_LORA, KEY_INT, lora_rank, 0, 0, 65536, "model = llama: LoRA adapters of this rank on the projections in lora_targets, on a frozen base (docs/gpt.md, \"LoRA\"); 0: none"),
    MODEL_NUM(ID_LORA, KEY_REAL, lora_alpha, 16, 0, 1e9, "lora_rank > 0: the adapters' delta is scaled by lora_alpha / lora_rank"),
    MODEL_STR(ID_LORA, lora_targets, "q,v", "lora_rank > 0: comma-separated projections to adapt, any of q,k,v,o,gate,up,down"),
    NUM(KEY_REAL, net, lora_dropout, 0, 0, 1, "lora_rank > 0: dropout on the adapters' input: 0 only (fgpipe has no dropout)"),
    STR_OR_NONE(net, freeze, "layers whose parameters stay fixed (fine-tuning): comma-separated layer names or dotted prefixes, e.g. embedding,h.0 (all of block 0) or fc1; the GPT's tied embedding and head freeze together"),
    CHOICE(method, mode, "bp|fg|fg+bp", MODE_BP, "bp: backprop (schedule zb unless set); fg: forward gradient (JVP along random tangents); fg+bp: fg corrected by backprop in the pipeline bubbles (unless set: perturb = activity, estimator = mix, shrink = 0, the best measured). A key set in the config or by --set wins over the mode's default"),
    CHOICE(timetable, schedule, "gpipe|1f1b|zb", SCHEDULE_ZB, "pipeline schedule of bp; zb (the default: the fastest measured, 29% shorter steps than 1f1b at 4 stages) keeps each micro-batch's output adjoints for its split backward; 1f1b keeps less (the same weights bit for bit), for a stage short of memory; gpipe keeps every micro-batch's activations at once"),
    CHOICE(method, estimator, "auto|fg|cv|guided|mix", EST_AUTO, "fg+bp estimator: cv (control variate; the auto choice for perturb = weight), plain fg, guided (tangent 0 follows the last exact gradient), or mix ((1 - shrink) c + shrink fg; the auto choice for perturb = activity); fg+bp's default: mix where perturb is activity, else auto"),
    NUM(KEY_REAL, method, shrink, 1, 0, 1, "fg+bp cv and mix: weight of the step's own noisy term (cv: of the residual, mix: of fg against c); 1 is unbiased (cv) or plain fg (mix), below 1 trades bias toward the bubbles' exact gradient for less variance; fg+bp's default: 0 with mix (c alone, the best measured), else 1"),
    CHOICE(method, cv_scale, "1|auto", CV_SCALE_ONE, "fg+bp estimator cv: the control variate's scale beta per layer; 1: c itself; auto: beta_l = Cov/Var of the layer's c.v with d, from an average over earlier steps (still unbiased; guards against a stale or poor c, e.g. at lag 1)"),
    CHOICE(method, perturb, "weight|activity", PERTURB_WEIGHT, "where fg's random tangents enter: weight (every parameter) or activity (every linear layer's output, one tangent per sample; far less variance, keeps layer inputs until the update); fg+bp's default: activity, unless a chosen key needs weight tangents (estimator cv or guided, tangent_rank, cv_scale = auto, lora_rank, table_block_rows)"),
    NUM(KEY_INT, timetable, lag, 0, 0, 2, "fg+bp with select >= 0: every B op's lag (0: this step's micro-batches, 1 or 2: those of 1 or 2 steps before)"),
    NUM(KEY_INT, timetable, max_lag, 2, 0, 2, "fg+bp with select = -1: the most steps a B op may lag behind its micro-batch's F"),
    NUM(KEY_INT, timetable, grad_delay, 0, 0, 2, "mode = bp: apply each step's gradient this many steps late (none in the run's first grad_delay steps): bp at the staleness of fg+bp's B ops at lag `lag` (a baseline, and the exact reference of fg+bp with select = micro_batches, estimator = mix, shrink = 0); stages in memory, clip_norm = 0"),
    CHOICE(timetable, recompute, "none|stage", RECOMPUTE_NONE, "mode = bp or fg+bp: none keeps every layer's input of a micro-batch from its F to its B; stage keeps only the stage's input and reruns the stage's forward right before the micro-batch's B (zb, fg+bp: before Bi, which keeps the stage's output adjoint alone, and again before Bw, which redoes Bi's input adjoints from it): the same weights bitwise, one more F per B for a stage's activations of one micro-batch in flight instead of all (docs/pipeline.md, \"Recomputation\"); stages in memory"),
    NUM(KEY_INT, timetable, calibrate_steps, 3, 0, 100, "fg+bp on M > 1 stages: steps of F ops alone, all stages at once, timed before training; the timetable is planned with their F times (select = -1: which B ops run and where; an explicit select: its planned times only); the first step is a warm-up and counts only when it is the only one; 0: the F times of the start-up timing, each stage alone"),
    NUM(KEY_INT, timetable, select, -1, -1, 1024, "fg+bp: -1 (auto): the builder fits nested adjoint chains into the bubbles (with c alone, estimator = mix and shrink = 0, it may instead backprop every micro-batch at a lag <= max_lag, lengthening the step, where that gives more exact samples per second: see lag_cost); n: micro-batches 0..n-1 on every stage at lag `lag`"),
    NUM(KEY_REAL, timetable, lag_cost, 0.25, 0, 10, "fg+bp with select = -1 and c alone: the timetable is chosen by exact micro-batches per second, each weighed 1 / (1 + lag_cost x its stage's lag); 0.25 measured on the main job, where lag 1 took 1.15-1.5x the steps of lag 0 to 0.88 and 0.85 test accuracy"),
    NUM(KEY_INT, layout, stages, 1, 1, 64, "pipeline stages M; the MPI world size must be stages x replicas"),
    NUM(KEY_INT, layout, replicas, 1, 1, 1024, "data-parallel replicas R of the pipeline (run stages x replicas MPI ranks); a step takes R x micro_batches x micro_batch samples"),
    CHOICE(layout, device, "cpu|cuda", DEVICE_CPU, "where each stage computes: cpu (OpenBLAS) or cuda (the GPU of the rank's node-local index)"),
    CHOICE(layout, precision, "fp32|tf32|bf16", PRECISION_FP32, "the GEMMs' arithmetic: fp32, tf32 (device = cuda: tensor cores, FP32 inputs rounded to 10-bit mantissas) or bf16 (inputs rounded to bf16, FP32 accumulation: tensor cores, or oneDNN on a CPU with avx512_bf16); bf16 also keeps the weights' copy the GEMMs read, activations between layers, stashes and op F's messages in BF16, on the CPU and on the GPU (master weights, optimizer state, gradients, tangents and the loss stay FP32: docs/core.md, docs/gpu.md)"),
    STR(layout, boundaries, "auto", "first layer index of stages 1..M-1, e.g. 2,4,6; auto: balance the timed work"),
    NUM(KEY_INT, method, tangents, 1, 1, 4096, "K tangents per micro-batch (fg); variance falls as 1/K"),
    NUM(KEY_INT, method, tangent_rank, 0, 0, 4096, "perturb = weight: each linear weight tangent a sum of this many random rank-1 matrices (unbiased; makes r (in + out) values per layer instead of in x out; LayerNorm and embedding tangents stay full); 0: full Gaussian"),
    NUM(KEY_INT, method, local_groups, 0, 0, 4096, "mode = fg or fg+bp, perturb = activity, MLP, cpu: every hidden layer learns from its own loss, G fixed random classifiers on as many groups of its outputs, its tangents stopped there (far less variance; docs/design.md); 0: the model's loss"),
    NUM(KEY_INT, training, micro_batch, 32, 1, 1 << 20, "samples per micro-batch"),
    NUM(KEY_INT, training, micro_batches, 4, 1, 1024, "micro-batches per optimizer step"),
    NUM(KEY_INT, training, epochs, 1, 0, 1 << 20, "passes over the training set (when steps = 0)"),
    NUM(KEY_INT, training, steps, 0, 0, 1 << 30, "optimizer steps; 0 derives them from epochs"),
    CHOICE(optim, optimizer, "sgd|adam", OPT_ADAM, "sgd (with momentum) or adam (AdamW with weight_decay)"),
    NUM(KEY_REAL, optim, lr, 1e-3, 0, 1e3, "peak learning rate"),
    NUM(KEY_REAL, optim, min_lr, 0, 0, 1e3, "learning rate at the end of the cosine decay"),
    NUM(KEY_INT, optim, warmup_steps, 0, 0, 1 << 30, "steps of linear warm-up from 0 to lr"),
    CHOICE(optim, lr_schedule, "constant|cosine", LR_COSINE, "learning rate after warm-up"),
    NUM(KEY_REAL, optim, momentum, 0.9, 0, 1, "SGD momentum"),
    NUM(KEY_REAL, optim, beta1, 0.9, 0, 1, "Adam first-moment decay"),
    NUM(KEY_REAL, optim, beta2, 0.999, 0, 1, "Adam second-moment decay"),
    NUM(KEY_REAL, optim, eps, 1e-8, 0, 1, "Adam epsilon"),
    NUM(KEY_REAL, optim, weight_decay, 0, 0, 1, "decoupled weight decay per unit of learning rate"),
    NUM(KEY_REAL, optim, clip_norm, 0, 0, 1e30, "clip the gradient (estimate) to this L2 norm; 0: off"),
    NUM(KEY_REAL, training, diverge_factor, 100, 0, 1e30, "stop with an error (exit 2) when a step's loss exceeds this many times the larger of the run's first loss and ln(classes), a uniform guess's: the run diverged; 0: never"),
    NUM(KEY_UINT32, training, seed, 1, 0, 4294967295.0, "seeds initial weights, shuffling and tangents"),
    NUM(KEY_INT, training, print_every, 100, 1, 1 << 30, "steps between progress lines when not on a terminal"),
    NUM(KEY_INT, training, eval_every, 0, 0, 1 << 30, "steps between test-set evaluations (0: at the end)"),
    NUM(KEY_REAL, layout, mem_budget, 0, 0, 1e18, "bytes of memory per stage (weights, optimizer state, activations); a stage that needs more keeps its layers in weights_dir and streams them (0: no limit)"),
    NUM(KEY_REAL, layout, mem_runtime, -1, -1, 1e18, "bytes of mem_budget the process holds besides the stage's own buffers: the program, MPI, HDF5, OpenBLAS and the data (docs/out-of-core.md, \"The runtime\"); -1: measured at start-up, the process's resident bytes before the stage's first buffer with a margin for what the runtime adds later"),
    STR_OR_NONE(layout, weights_dir, "directory on local flash for the layer stores of out-of-core stages (with mem_budget)"),
    NUM(KEY_INT, layout, frozen_fp32, 0, 0, 1, "1: a frozen layer (a LoRA base, freeze) that the checkpoint of --init-from or --resume holds in BF16 is widened to FP32 in its layer store and checkpoints (twice the bytes on flash and read per step); 0: kept in BF16 as imported (docs/out-of-core.md, \"A frozen base in BF16\")"),
    NUM(KEY_INT, layout, stream, 0, 0, 1, "1: every stage streams its layers from weights_dir (mem_budget > 0), also one that would fit mem_budget in memory (a stage that streams can need more than in memory: it keeps a wave's activations; to measure the streamed step); 0: only a stage that does not fit"),
    NUM(KEY_INT, layout, table_block_rows, 0, 0, 1 << 24, "model = gpt or llama, device = cpu: the token table (embedding and fused head) in blocks of this many rows, read, computed and written a block at a time, so that a streamed stage holds a block of it, not the whole table (docs/out-of-core.md, \"Row blocks of the token table\"); a multiple of head_block, and of 1024 / n_embd; 0: chosen by the run (whole, or the row blocks a streamed stage needs to fit mem_budget, printed at start-up)"),
    NUM(KEY_INT, layout, io_every_step, 0, 0, 1, "1: a streamed stage prints every step's I/O (GB read and written, I/O and compute seconds, the bound max(I/O, compute) and step / bound); 0: one line of averages after the first 4 steps"),
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])
_Static_assert(N_KEYS <= CONFIG_MAX_KEYS, "Config.chosen has a mark per key");

static const ConfigKey *find_key(const char *name);

static int chosen(const Config *c, const char *key) { return c->chosen[find_key(key) - KEYS]; }

// The mode's defaults of the keys not chosen (config.h), each from the keys before it.
static void mode_defaults(Config *c) {
    MethodConfig *m = &c->method;
    const int fg_bp = m->mode == MODE_FG_BP;
    const int needs_weight = (chosen(c, "estimator") && m->estimator != EST_AUTO &&
                              estimator_info((EstimatorKind)m->estimator)->dots_reference) ||
                             (chosen(c, "tangent_rank") && m->tangent_rank > 0) ||
                             (chosen(c, "cv_scale") && m->cv_scale == CV_SCALE_AUTO) ||
                             // LoRA's adapters and the token table's row blocks take weight
                             // tangents only: fg+bp's default follows them.
                             c->net.lora_rank > 0 || c->layout.table_block_rows > 0;
    if (!chosen(c, "perturb")) m->perturb = fg_bp && !needs_weight ? PERTURB_ACTIVITY : PERTURB_WEIGHT;
    if (!chosen(c, "estimator")) m->estimator = fg_bp && m->perturb == PERTURB_ACTIVITY ? EST_MIX : EST_AUTO;
    if (!chosen(c, "shrink")) m->shrink = fg_bp && config_estimator(c) == EST_MIX ? 0.0 : 1.0;
}

// Key k's default (the table's) into c.
static void set_default(Config *c, const ConfigKey *k) {
    char *field = (char *)c + k->offset;
    switch (k->type) {
    case KEY_STRING: snprintf(field, k->size, "%s", k->def_text); break;
    case KEY_CHOICE:
    case KEY_INT: *(int *)field = (int)k->def; break;
    case KEY_UINT32: *(uint32_t *)field = (uint32_t)k->def; break;
    case KEY_REAL: *(double *)field = k->def; break;
    }
}

void config_defaults(Config *c) {
    *c = (Config){0};
    for (size_t i = 0; i < N_KEYS; i++) set_default(c, &KEYS[i]);
    mode_defaults(c);
}

static const ConfigKey *find_key(const char *name) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

static int choice_index(const char *choices, const char *value) {
    size_t len = strlen(value);
    int index = 0;
    for (const char *s = choices; *s; index++) {
        const char *bar = strchr(s, '|');
        size_t n = bar ? (size_t)(bar - s) : strlen(s);
        if (n == len && strncmp(s, value, n) == 0) return index;
        s += n + (bar != NULL);
    }
    return -1;
}

static const char *choice_name(const char *choices, int index, char *buf, size_t size) {
    const char *s = choices;
    for (int i = 0; i < index && s; i++) s = strchr(s, '|'), s = s ? s + 1 : s;
    if (!s) return "?";
    const char *bar = strchr(s, '|');
    snprintf(buf, size, "%.*s", (int)(bar ? (size_t)(bar - s) : strlen(s)), s);
    return buf;
}

const char *config_choice_name(const char *key, int value, char *buf) {
    const ConfigKey *k = find_key(key);
    if (!k || k->type != KEY_CHOICE) return strcpy(buf, "?");
    return choice_name(k->choices, value, buf, CONFIG_NAME_MAX);
}

static int set_value(Config *c, const ConfigKey *k, const char *key, const char *value, FgError *err);

int config_set(Config *c, const char *key, const char *value, FgError *err) {
    const ConfigKey *k = find_key(key);
    int rc = set_value(c, k, key, value, err);
    if (rc) return rc;
    c->chosen[k - KEYS] = 1;
    mode_defaults(c);
    return FG_OK;
}

static int set_value(Config *c, const ConfigKey *k, const char *key, const char *value, FgError *err) {
    if (!k) {
        char known[1024] = "";
        for (size_t i = 0; i < N_KEYS; i++) {
            strncat(known, KEYS[i].name, sizeof known - strlen(known) - 2);
            if (i + 1 < N_KEYS) strncat(known, " ", sizeof known - strlen(known) - 1);
        }
        return fg_fail(err, FG_ERR_INPUT, "unknown config key '%s' (known keys: %s)", key, known);
    }
    char *field = (char *)c + k->offset;
    if (k->type == KEY_STRING) {
        if (strlen(value) < k->min || strlen(value) >= k->size)
            return fg_fail(err, FG_ERR_INPUT, "%s: value must be %.0f to %zu characters", key,
                           k->min, k->size - 1);
        snprintf(field, k->size, "%s", value);
        return FG_OK;
    }
    if (k->type == KEY_CHOICE) {
        int i = choice_index(k->choices, value);
        if (i < 0)
            return fg_fail(err, FG_ERR_INPUT, "%s: '%s' is not one of %s", key, value, k->choices);
        *(int *)field = i;
        return FG_OK;
    }
    char *end;
    errno = 0;
    double v = strtod(value, &end);
    if (end == value || *end || errno || !isfinite(v))
        return fg_fail(err, FG_ERR_INPUT, "%s: '%s' is not a number", key, value);
    if (k->type != KEY_REAL && v != floor(v))
        return fg_fail(err, FG_ERR_INPUT, "%s: '%s' is not a whole number", key, value);
    if (v < k->min || v > k->max)
        return fg_fail(err, FG_ERR_INPUT, "%s: %s is outside [%g, %g]", key, value, k->min, k->max);
    if (k->type == KEY_INT) *(int *)field = (int)v;
    else if (k->type == KEY_UINT32) *(uint32_t *)field = (uint32_t)v;
    else *(double *)field = v;
    return FG_OK;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r')) *--e = 0;
    return s;
}

// Lines of f (named `path` in messages) onto c, each read whole however long. A read error
// (a directory, an I/O error) is an error, not the end of the file.
static int config_read(Config *c, FILE *f, const char *path, FgError *err) {
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = FG_OK;
    errno = 0;
    while (rc == FG_OK && getline(&line, &cap, f) >= 0) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = fg_fail(err, FG_ERR_INPUT, "config %s:%d: expected 'key = value', got '%s'", path,
                         lineno, s);
            break;
        }
        *eq = 0;
        FgError e = {0};
        rc = config_set(c, trim(s), trim(eq + 1), &e);
        if (rc) fg_fail(err, rc, "config %s:%d: %s", path, lineno, e.msg);
    }
    if (rc == FG_OK && ferror(f))
        rc = fg_fail(err, FG_ERR_INPUT, "config %s: read error at line %d: %s", path, lineno + 1,
                     strerror(errno ? errno : EIO));
    free(line);
    return rc;
}

int config_load(Config *c, const char *path, FgError *err) {
    FILE *f = fopen(path, "r");
    if (!f) return fg_fail(err, FG_ERR_INPUT, "config %s: %s", path, strerror(errno));
    int rc = config_read(c, f, path, err);
    fclose(f);
    return rc;
}

int config_load_text(Config *c, const char *text, const char *name, FgError *err) {
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    if (!f) return fg_fail(err, FG_ERR_INPUT, "config of %s: %s", name, strerror(errno));
    int rc = config_read(c, f, name, err);
    fclose(f);
    return rc;
}

// model = gpt or llama reads text (bytes) or tokens; each names its files, and bytes need vocab
// 256.
static int validate_language(const Config *c, FgError *err) {
    int gpt = strcmp(c->net.model, "gpt") == 0 || strcmp(c->net.model, "llama") == 0;
    if (gpt != config_is_language(c))
        return fg_fail(err, FG_ERR_INPUT, gpt ? "model = gpt reads text or tokens: set data = text "
                       "and text_file, or data = tokens, train_tokens and val_tokens" :
                       "data = text or tokens trains model = gpt (an MLP reads images: data = idx)");
    if (c->input.data == DATA_TEXT && !c->input.text_file[0])
        return fg_fail(err, FG_ERR_INPUT, "data = text needs text_file (launch/text-corpus.sh prints "
                       "the default corpus's path)");
    if (c->input.data == DATA_TEXT && c->net.vocab != 256)
        return fg_fail(err, FG_ERR_INPUT, "data = text reads bytes: vocab must be 256, not %d "
                       "(tokenize the text for a larger vocabulary: fgpipe tokenize, data = tokens)",
                       c->net.vocab);
    if (c->input.data == DATA_TOKENS && (!c->input.train_tokens[0] || !c->input.val_tokens[0]))
        return fg_fail(err, FG_ERR_INPUT, "data = tokens needs train_tokens and val_tokens (files of "
                       "token ids: fgpipe tokenize --in TEXT --out FILE makes them)");
    return FG_OK;
}

int config_lora_targets(const char *list, int *mask, FgError *err) {
    static const char *const names[] = {"q", "k", "v", "o", "gate", "up", "down"};
    char copy[sizeof ((Config *)0)->net.lora_targets];
    snprintf(copy, sizeof copy, "%s", list);
    *mask = 0;
    for (char *save = NULL, *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        int i = 0;
        while (i < 7 && strcmp(t, names[i])) i++;
        if (i == 7)
            return fg_fail(err, FG_ERR_INPUT, "lora_targets: '%s' is not one of q,k,v,o,gate,up,down", t);
        *mask |= 1 << i;
    }
    if (!*mask) return fg_fail(err, FG_ERR_INPUT, "lora_targets: '%s' names no projection", list);
    return FG_OK;
}

// LoRA: model = llama (on the CPU or the GPU, in memory or streamed: its base read-only),
// weight perturbation, no dropout.
static int validate_lora(const Config *c, FgError *err) {
    const NetConfig *n = &c->net;
    if (n->lora_rank == 0) return FG_OK;
    int mask;
    if (strcmp(n->model, "llama"))
        return fg_fail(err, FG_ERR_INPUT, "lora_rank: LoRA adapters are built for model = llama "
                       "only, not model = %s", n->model);
    if (n->lora_dropout != 0)
        return fg_fail(err, FG_ERR_INPUT, "lora_dropout = %g: only 0 (fgpipe has no dropout)",
                       n->lora_dropout);
    if (!(n->lora_alpha > 0))
        return fg_fail(err, FG_ERR_INPUT, "lora_alpha = %g: must be positive", n->lora_alpha);
    int rc = config_lora_targets(n->lora_targets, &mask, err);
    if (rc) return rc;
    if (c->method.mode != MODE_BP && (c->method.perturb != PERTURB_WEIGHT || c->method.tangent_rank > 0))
        return fg_fail(err, FG_ERR_INPUT, "lora_rank: LoRA's forward gradient perturbs the "
                       "adapters' weights: perturb = weight and tangent_rank = 0");
    return FG_OK;
}

// The CPU computes in fp32, or in bf16 where it has AVX512-BF16 (gemm.h): refused by name
// here, before anything is built.
static int validate_cpu_precision(const Config *c, FgError *err) {
    if (c->layout.device == DEVICE_CUDA || c->layout.precision == PRECISION_FP32) return FG_OK;
    if (c->layout.precision == PRECISION_TF32)
        return fg_fail(err, FG_ERR_INPUT, "precision = tf32 needs device = cuda (TF32 is a GPU "
                       "tensor-core format; the CPU computes in fp32 or bf16)");
    const char *missing = cpu_bf16_missing();
    if (missing)
        return fg_fail(err, FG_ERR_INPUT, "precision = bf16 on the CPU needs %s: use precision = "
                       "fp32, or device = cuda", missing);
    return FG_OK;
}

int config_validate(const Config *c, FgError *err) {
    if (c->training.steps == 0 && c->training.epochs == 0)
        return fg_fail(err, FG_ERR_INPUT, "steps and epochs are both 0: set one of them");
    if (c->timetable.select > c->training.micro_batches)
        return fg_fail(err, FG_ERR_INPUT, "select (%d) is more than micro_batches (%d)", c->timetable.select,
                       c->training.micro_batches);
    if (c->method.perturb == PERTURB_ACTIVITY && c->method.mode == MODE_FG_BP &&
        c->method.estimator != EST_AUTO &&
        estimator_info((EstimatorKind)c->method.estimator)->dots_reference)
        return fg_fail(err, FG_ERR_INPUT, "perturb = activity works in mode fg+bp with estimator "
                       "= mix, fg or auto (cv and guided dot c with weight tangents)");
    if (c->method.cv_scale == CV_SCALE_AUTO && !config_uses_cv(c))
        return fg_fail(err, FG_ERR_INPUT, "cv_scale = auto applies to mode fg+bp with estimator "
                       "cv and perturb = weight (it scales the control variate c)");
    if (c->method.tangent_rank > 0 && c->method.perturb != PERTURB_WEIGHT)
        return fg_fail(err, FG_ERR_INPUT, "tangent_rank applies to perturb = weight (activity "
                       "perturbation has no weight tangents)");
    if (c->method.tangent_rank > 0 && c->method.mode == MODE_FG_BP && c->method.estimator == EST_GUIDED)
        return fg_fail(err, FG_ERR_INPUT, "tangent_rank > 0 and estimator = guided: the guide "
                       "is a full vector, not of rank tangent_rank");
    if (c->method.local_groups > 0 &&
        (c->method.mode == MODE_BP || c->method.perturb != PERTURB_ACTIVITY ||
         c->layout.device != DEVICE_CPU ||
         config_is_language(c)))
        return fg_fail(err, FG_ERR_INPUT, "local_groups needs mode = fg or fg+bp, perturb = "
                       "activity, device = cpu and an MLP (the local losses are not written for the "
                       "others)");
    if (c->timetable.grad_delay > 0 && (c->method.mode != MODE_BP || c->optim.clip_norm > 0))
        return fg_fail(err, FG_ERR_INPUT, "grad_delay applies to mode = bp with clip_norm = 0 "
                       "(fg+bp's staleness is its lag; a delayed gradient is clipped by no norm)");
    if (c->timetable.recompute != RECOMPUTE_NONE && c->method.mode == MODE_FG)
        return fg_fail(err, FG_ERR_INPUT, "recompute = stage applies to mode = bp or fg+bp (mode "
                       "fg runs no backward: it keeps nothing to recompute)");
    if (c->timetable.recompute != RECOMPUTE_NONE && c->layout.mem_budget > 0)
        return fg_fail(err, FG_ERR_INPUT, "recompute = stage needs every stage in memory: with "
                       "mem_budget a streamed stage would read its layers a third time per step "
                       "(set mem_budget = 0, or recompute = none)");
    if (c->layout.stream && c->layout.mem_budget <= 0)
        return fg_fail(err, FG_ERR_INPUT, "stream = 1 needs mem_budget and weights_dir (the "
                       "budget the streamed stage keeps to)");
    if (c->layout.mem_budget > 0 && !c->layout.weights_dir[0])
        return fg_fail(err, FG_ERR_INPUT, "mem_budget is set but weights_dir is not: name a "
                       "directory on local flash for the layers that do not fit (--weights-dir)");
    int rc = validate_language(c, err);
    if (!rc) rc = config_validate_table_blocks(c, err);
    if (!rc) rc = validate_lora(c, err);
    if (rc) return rc;
    if ((rc = validate_cpu_precision(c, err))) return rc;
    if (c->optim.lr_schedule == LR_COSINE && c->optim.min_lr > c->optim.lr)
        return fg_fail(err, FG_ERR_INPUT, "min_lr (%g) is larger than lr (%g)", c->optim.min_lr, c->optim.lr);
    return FG_OK;
}

// One key's value as config_write prints it.
static void key_value(const Config *c, const ConfigKey *k, char *buf, size_t size) {
    const char *field = (const char *)c + k->offset;
    switch (k->type) {
    case KEY_STRING: snprintf(buf, size, "%s", field); break;
    case KEY_CHOICE: choice_name(k->choices, *(const int *)field, buf, size); break;
    case KEY_INT: snprintf(buf, size, "%d", *(const int *)field); break;
    case KEY_UINT32: snprintf(buf, size, "%u", *(const uint32_t *)field); break;
    case KEY_REAL: snprintf(buf, size, "%.17g", *(const double *)field); break;
    }
}

void config_write(const Config *c, FILE *f) {
    char buf[512];  // longer than any string key
    for (size_t i = 0; i < N_KEYS; i++) {
        key_value(c, &KEYS[i], buf, sizeof buf);
        fprintf(f, "%s = %s\n", KEYS[i].name, buf);
    }
}

// Whether a and b differ in key k, with both values.
static int differs(const Config *a, const Config *b, const ConfigKey *k, char *value_a,
                   char *value_b, size_t size) {
    key_value(a, k, value_a, size);
    key_value(b, k, value_b, size);
    return strcmp(value_a, value_b) != 0;
}

// The first of keys[0..n) on which a and b differ, with both values; NULL when they agree.
static const char *first_difference(const Config *a, const Config *b, const char *const *keys,
                                    int n, char *value_a, char *value_b, size_t size) {
    for (int i = 0; i < n; i++)
        if (differs(a, b, find_key(keys[i]), value_a, value_b, size)) return keys[i];
    return NULL;
}

// Whether the keys of class id tell a's model (a checkpoint's) from b's. lora: 1 compares
// LoRA's keys always, 0 only when a has adapters (a base loads under new ones).
static int class_compared(const Config *a, const Config *b, KeyIdentity id, int lora) {
    switch (id) {
    case ID_MODEL: return 1;
    case ID_MLP: return !config_is_language(a);
    case ID_LLAMA: return strcmp(a->net.model, "llama") == 0;
    case ID_LORA: return (lora || a->net.lora_rank > 0) && (a->net.lora_rank || b->net.lora_rank);
    case ID_NONE: break;
    }
    return 0;
}

// Two model keys the weights may not depend on: a language model's windows come from text or
// from token files alike (data), and Llama's weights hold no position table: it runs at any ctx
// up to the one it was made with (RoPE), a GPT at its own.
static int weights_differ_in(const Config *a, const Config *b, const char *key) {
    if (strcmp(key, "data") == 0) return !(config_is_language(a) && config_is_language(b));
    if (strcmp(key, "ctx") == 0) return strcmp(a->net.model, "llama") != 0 || b->net.ctx > a->net.ctx;
    return 1;
}

// The table's model keys (KeyIdentity), class by class. Not pad_vocab: the table's rows are
// checked as the tensors load (256 rows pad to 256).
static const char *model_mismatch(const Config *a, const Config *b, int lora, char *value_a,
                                  char *value_b, size_t size) {
    for (KeyIdentity id = ID_MODEL; id <= ID_LORA; id++) {
        if (!class_compared(a, b, id, lora)) continue;
        for (size_t i = 0; i < N_KEYS; i++) {
            const ConfigKey *k = &KEYS[i];
            if (k->identity == id && weights_differ_in(a, b, k->name) &&
                differs(a, b, k, value_a, value_b, size))
                return k->name;
        }
    }
    return NULL;
}

const char *config_model_mismatch(const Config *a, const Config *b, char *value_a, char *value_b,
                                  size_t size) {
    return model_mismatch(a, b, 0, value_a, value_b, size);
}

const char *config_store_mismatch(const Config *a, const Config *b, char *value_a, char *value_b,
                                  size_t size) {
    static const char *const keys[] = {"pad_vocab", "freeze", "optimizer", "seed", "mode"};
    const char *key = model_mismatch(a, b, 1, value_a, value_b, size);
    return key ? key : first_difference(a, b, keys, 5, value_a, value_b, size);
}

void config_write_help(FILE *f) {
    for (size_t i = 0; i < N_KEYS; i++)
        fprintf(f, "  %-14s %s%s%s%s\n", KEYS[i].name, KEYS[i].help, KEYS[i].choices ? " [" : "",
                KEYS[i].choices ? KEYS[i].choices : "", KEYS[i].choices ? "]" : "");
}

int config_dots_reference(const Config *c) {
    return c->method.mode == MODE_FG_BP && estimator_info(config_estimator(c))->dots_reference;
}

int config_is_language(const Config *c) {
    return c->input.data == DATA_TEXT || c->input.data == DATA_TOKENS;
}

const char *config_data_path(const Config *c) {
    return c->input.data == DATA_TEXT ? c->input.text_file
           : c->input.data == DATA_TOKENS ? c->input.train_tokens : c->input.data_dir;
}

int config_timetable_lag(const Config *c) {
    if (c->method.mode != MODE_FG_BP) return 0;
    return c->timetable.select >= 0 ? c->timetable.lag : c->timetable.max_lag;
}

int config_update_microbatches(const Config *c, int replicas) {
    int weighs_zero = c->method.mode == MODE_FG_BP && estimator_info(config_estimator(c))->shrinks &&
                      c->method.shrink == 0.0;
    return weighs_zero ? 0 : c->training.micro_batches * replicas;
}

int config_uses_cv(const Config *c) {
    return c->method.mode == MODE_FG_BP && config_estimator(c) == EST_CV;
}

OptimizerConfig config_optimizer(const Config *c) {
    OptimizerConfig o = {
        .kind = (OptimizerKind)c->optim.optimizer,
        .lr = c->optim.lr,
        .min_lr = c->optim.min_lr,
        .warmup_steps = c->optim.warmup_steps,
        .schedule = (LrSchedule)c->optim.lr_schedule,
        .momentum = c->optim.momentum,
        .beta1 = c->optim.beta1,
        .beta2 = c->optim.beta2,
        .eps = c->optim.eps,
        .weight_decay = c->optim.weight_decay,
        .clip_norm = c->optim.clip_norm,
    };
    return o;
}

const char *config_warning(const Config *c) {
    if (c->method.mode != MODE_FG_BP || c->method.perturb != PERTURB_WEIGHT ||
        config_estimator(c) != EST_CV || c->method.tangents > 1 || c->method.shrink == 0.0)
        return NULL;  // at shrink 0 cv's update is c alone: no tangent enters it
    return "fg+bp with perturb = weight, estimator cv and tangents = 1 was measured to learn "
           "almost nothing: the byte GPT of launch/configs/gpt-kjv.conf ended 2000 steps at 3.16 "
           "nats/byte (bp: 1.53), the main job's MLP at 0.5508 test accuracy after 1 epoch (bp: "
           "0.8736); fg+bp's defaults (perturb = activity, estimator = mix, shrink = 0) are the "
           "best measured (docs/pipeline.md)";
}
