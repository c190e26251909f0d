// Run configuration: a flat list of `key = value` lines, overridable with --set key=value; in
// memory the keys sit in groups (c->method.mode, c->training.steps).
//
// One table (config.c) describes every key: its type, accepted values, default, help text, and
// whether it says what the model is (a checkpoint of another value holds another model).
// Parsing, defaults, validation, error messages, the dump of the resolved config and the
// model check of a resumed checkpoint all read that table.
#ifndef FGPIPE_CONFIG_H
#define FGPIPE_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "estimator.h"
#include "optimizer.h"
#include "tangent.h"

typedef enum { MODE_BP, MODE_FG, MODE_FG_BP } Mode;
typedef enum { SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_ZB } ScheduleKind;
typedef enum { CV_SCALE_ONE, CV_SCALE_AUTO } CvScaleChoice;
typedef enum { RECOMPUTE_NONE, RECOMPUTE_STAGE } RecomputeKind;
typedef enum { DEVICE_CPU, DEVICE_CUDA } DeviceKind;
typedef enum { DATA_IDX, DATA_TEXT, DATA_TOKENS } DataKind;

// The keys in groups, by what they decide. A key's name is its field's (config.c's table).
typedef struct {
    int data;              // DataKind: labelled images (IDX files), a text file (bytes) or
                           // files of tokens (uint16, or uint32 above vocab 65536)
    char data_dir[256];    // IDX files (train-*, t10k-*)
    char text_file[256];   // data = text: the corpus (first 90% trains, the rest validates)
    char train_tokens[256], val_tokens[256];  // data = tokens: token files (text_data.h)
} InputConfig;

typedef struct {
    char model[256];       // MLP widths "784-1024-10", "gpt" (the next four keys) or "llama"
    char activation[16];   // relu | gelu
    int n_layer, n_embd, n_head, ctx;  // model = gpt: blocks, width, heads, tokens per sample
    int vocab;             // model = gpt: token ids 0..vocab-1 (256: bytes; GPT-2: 50257)
    int pad_vocab;         // the token table's rows are vocab rounded up to a multiple of this
    int head_block;        // training: the fused head's vocabulary columns per block
    char freeze[256];      // layers held fixed: names or dotted prefixes, "embedding,h.0"
    // model = llama (Llama 3, Qwen3: Hugging Face config.json's names)
    int n_kv_head, head_dim, intermediate_size;  // kv heads, features per head, MLP width
    double rope_theta, rms_norm_eps;
    double rope_scaling_factor;  // > 0: Llama 3's rope_scaling (rope_type llama3); 0: none
    double rope_scaling_low_freq_factor, rope_scaling_high_freq_factor;
    int rope_scaling_original_max_position_embeddings;
    int qk_norm;           // Qwen3: RMSNorm of each q and k head
    int tie_embeddings;    // the head is the token table (two copies kept equal)
    // LoRA on model = llama (docs/gpt.md, "LoRA"): rank 0: none
    int lora_rank;
    double lora_alpha, lora_dropout;  // scale alpha / rank; dropout: 0 only
    char lora_targets[64];            // "q,k,v,o,gate,up,down" or a part of it
} NetConfig;

// How gradients are made: the mode, fg's tangents and fg+bp's estimator.
typedef struct {
    int mode;              // Mode
    int estimator;         // EstimatorKind (fg+bp); EST_AUTO: cv for perturb = weight, mix for activity
    int cv_scale;          // CvScaleChoice (fg+bp cv): scale of c per layer, 1 or online (cv_scale.h)
    int perturb;           // Perturbation (tangent.h): where fg's tangents enter
    double shrink;         // fg+bp cv and mix: weight of the step's own noisy term (estimator.h)
    int tangents;          // K tangents per micro-batch (fg)
    int tangent_rank;      // perturb = weight: weight tangents of this rank (0: full)
    int local_groups;      // local losses: G heads per hidden layer (0: none; local_loss.h)
} MethodConfig;

// Which ops run when: the schedule, fg+bp's B ops and their lags.
typedef struct {
    int schedule;          // ScheduleKind (bp)
    int lag;               // fg+bp, select >= 0: every B op's lag (steps behind its F)
    int max_lag;           // fg+bp, select = -1: the most any B op may lag
    int grad_delay;        // bp: steps each gradient waits before its update
    int recompute;         // RecomputeKind (bp, fg+bp): B reruns F from the kept stage input
    int calibrate_steps;   // fg+bp on M > 1 stages: timed steps of F ops before planning
    int select;            // fg+bp: micro-batches to backprop per step; -1: as many as fit
    double lag_cost;       // fg+bp, select = -1, c alone: progress a correction loses per step
                           // of lag, in the choice of timetable (pipeline_build_timetable)
} TimetableConfig;

// Where the stages run and what they may hold.
typedef struct {
    int stages;            // M pipeline stages (one per rank)
    int replicas;          // R data-parallel replicas of the pipeline (stages x replicas ranks)
    int device;            // DeviceKind: where each stage computes
    int precision;         // Precision (backend.h): the GEMMs' arithmetic on the GPU
    char boundaries[256];  // first layer of stages 1..M-1, "2,4,6"; "auto": balance by cost
    double mem_budget;     // bytes a stage may hold; a stage needing more streams its layers
                           // from weights_dir (0: no limit); it covers the whole process
    double mem_runtime;    // bytes of mem_budget the process holds besides the stage's own
                           // buffers (program, libraries, data); -1: measured at start-up
    char weights_dir[256]; // out-of-core stages keep their layer stores here (local flash)
    int io_every_step;     // a streamed stage prints each step's I/O line
    int stream;            // 1: every stage streams (with mem_budget), also one that fits in memory
    int frozen_fp32;       // 1: frozen layers widened to FP32 on flash even where the checkpoint
                           // holds them in BF16 (0: kept as the checkpoint holds them)
    int table_block_rows;  // > 0: a token table of more rows is read, computed and written this
                           // many rows at a time (Layer.block_rows); 0: whole
} LayoutConfig;

typedef struct {
    int micro_batch;       // B samples per micro-batch
    int micro_batches;     // N micro-batches per optimizer step
    int epochs;            // used when steps == 0
    int steps;             // optimizer steps; 0: derived from epochs
    uint32_t seed;
    int print_every;       // progress lines when stderr is not a terminal
    int eval_every;        // steps between test-set evaluations (0: only at the end)
    double diverge_factor;  // stop when the loss exceeds this many times its start (0: never)
} TrainingConfig;

typedef struct {
    int optimizer;         // OptimizerKind
    double lr, min_lr, momentum, beta1, beta2, eps, weight_decay, clip_norm;
    int warmup_steps;
    int lr_schedule;       // LrSchedule
} OptimConfig;

enum { CONFIG_MAX_KEYS = 96 };

typedef struct {
    InputConfig input;
    NetConfig net;
    MethodConfig method;
    TimetableConfig timetable;
    LayoutConfig layout;
    TrainingConfig training;
    OptimConfig optim;
    // Keys given a value by config_set (a config file, --set, a stored config), by the index
    // of config.c's table; the others take their mode's default (config_defaults).
    unsigned char chosen[CONFIG_MAX_KEYS];
} Config;

// Every key's default. Some depend on the mode, and follow it wherever it is set, for each
// key not chosen: fg+bp takes perturb = activity, estimator = mix and shrink = 0 (the best
// fg+bp measured, docs/pipeline.md), except that perturb stays weight where a chosen key
// needs weight tangents (estimator cv or guided, tangent_rank, cv_scale = auto), and shrink is
// 0 only where the estimator is mix. bp's schedule is zb in every mode (only bp reads it).
void config_defaults(Config *c);
// Applies one key=value, marks the key chosen and re-derives the mode's defaults of the keys
// not chosen; errors name the key and the accepted values.
int config_set(Config *c, const char *key, const char *value, FgError *err);
// A combination measured to learn (almost) nothing, as a warning with the figures, or NULL:
// fg+bp with weight perturbation and the cv estimator at K = 1 tangents.
const char *config_warning(const Config *c);
// Reads `key = value` lines; '#' starts a comment. Errors name the file and line.
int config_load(Config *c, const char *path, FgError *err);
// The same from text in memory (a checkpoint's stored config); errors name `name`.
int config_load_text(Config *c, const char *text, const char *name, FgError *err);
// Checks relations between keys (e.g. steps or epochs set).
int config_validate(const Config *c, FgError *err);
// Writes every key with its resolved value, in file syntax (loadable again).
void config_write(const Config *c, FILE *f);
// Writes the key reference (name, accepted values, help) for --help.
void config_write_help(FILE *f);

// The first key that defines the model (config.c's MODEL_* rows: data, model, its shape, the
// MLP's activation, and LoRA's keys when a has adapters: b must keep them) on which a and b
// differ, with both values; NULL when they agree. a: the stored config (a checkpoint's), b: the
// run's.
const char *config_model_mismatch(const Config *a, const Config *b, char *value_a, char *value_b,
                                  size_t size);
// The same for a layer store's config a (--resume-weights): every key its bytes depend on (the
// model, LoRA's keys always, pad_vocab, freeze, optimizer, seed, mode).
const char *config_store_mismatch(const Config *a, const Config *b, char *value_a, char *value_b,
                                  size_t size);

OptimizerConfig config_optimizer(const Config *c);
// The estimator auto resolves to: cv for perturb = weight, mix for activity.
EstimatorKind config_estimator(const Config *c);
// fg+bp whose op F dots the reference with its tangents (cv, guided).
int config_dots_reference(const Config *c);
// Micro-batches whose tangent terms op U forms: the step's, over every replica, or 0 where the
// estimator weighs them by 0 (fg+bp's cv and mix at shrink 0: the update is c alone).
int config_update_microbatches(const Config *c, int replicas);
// The most steps a B op of the timetable may lag (fg+bp: lag with a fixed select, else max_lag;
// 0 for the other modes).
int config_timetable_lag(const Config *c);
// Language modelling (model = gpt): data = text or tokens.
int config_is_language(const Config *c);
// lora_targets' names as LORA_* bits (model.h) into *mask; an unknown name is refused.
int config_lora_targets(const char *list, int *mask, FgError *err);
// The path of the data a run reads for training (data_dir, text_file or train_tokens).
const char *config_data_path(const Config *c);

// fg+bp with the control-variate estimator (auto resolves to it): op F dots the reference
// (the last step's c) with every tangent it makes.
int config_uses_cv(const Config *c);

// Row blocks of the token table (table_block_rows; config_blocks.c): the fewest rows a block
// may have (a multiple of head_block whose n_embd floats a row make whole 4 KiB pages); whether
// the run's options forbid them (1: option names the key and value, "perturb = activity", and
// why says what blocks are built for); table_block_rows checked.
enum { CONFIG_OPTION_MAX = 64 };
int config_table_block_unit(const Config *c);
int config_table_blocks_forbidden(const Config *c, char *option, char *why, size_t size);
int config_validate_table_blocks(const Config *c, FgError *err);

// The name of value `value` of a choice key ("mode", 2 -> "fg+bp"), written into buf: the
// one table of names is config.c's.
enum { CONFIG_NAME_MAX = 24 };
const char *config_choice_name(const char *key, int value, char *buf);

#endif
