// `fgpipe eval --mem-budget SIZE --weights-dir DIR` (eval.h): a checkpoint larger than the
// budget, scored by the engine's evaluation in passes (eval_pass.h) on one stage whose layers
// stream through the budget from a layer store made from the checkpoint in DIR: as many windows
// a pass as the budget holds go through each layer together, so the store is read once a pass.
// The stage is that of a forward-gradient run with every layer frozen (a store of the
// parameters alone, in the dtype the checkpoint holds them; no optimizer state, no stashes, no
// gradient), of micro-batches of one window each: its step never runs, and its lanes, one a
// micro-batch, carry a pass's windows. Each window is scored by the fused head as the in-memory
// path scores its whole logits (head_loss_of_logits) and summed window by window in order: the
// same loss and accuracy, bit for bit. The checkpoint is only read.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval.h"
#include "mem_account.h"
#include "op_timing.h"
#include "slot_plan.h"
#include "table_rows.h"
#include "text_data.h"
#include "train_internal.h"

// The checkpoint's config as this stage runs it: one stage on the CPU in FP32, fg with one
// tangent (nothing to stash), micro-batches of one window, streamed within the budget also where
// the model would fit it (its slots then keep every layer after the first pass, and nothing is
// timed at start-up).
static int stage_config(const EvalArgs *a, Storage *io, Config *c, FgError *err) {
    char *text = NULL, budget[64];
    config_defaults(c);
    int rc = io->load_config(io, a->checkpoint, &text, err);
    if (!rc) rc = config_load_text(c, text, a->checkpoint, err);
    free(text);
    if (rc) return rc;
    if (!config_is_language(c))
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s holds model '%s', not a gpt: eval reads a "
                       "GPT", a->checkpoint, c->net.model);
    snprintf(budget, sizeof budget, "%.0f", a->mem_budget);
    const char *const keys[][2] = {
        {"stages", "1"}, {"replicas", "1"}, {"device", "cpu"}, {"precision", "fp32"},
        {"mode", "fg"}, {"tangents", "1"}, {"perturb", "weight"}, {"local_groups", "0"},
        {"grad_delay", "0"}, {"micro_batch", "1"}, {"micro_batches", "1"}, {"steps", "1"},
        {"eval_every", "0"}, {"freeze", ""}, {"stream", "1"}, {"mem_budget", budget},
        {"weights_dir", a->weights_dir}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !rc; i++) {
        FgError e = {0};
        if (config_set(c, keys[i][0], keys[i][1], &e))
            rc = fg_fail(err, e.code, "eval: checkpoint %s's config with %s = %s: %s", a->checkpoint,
                         keys[i][0], keys[i][1], e.msg);
    }
    return rc ? rc : config_validate(c, err);
}

// The model the stage runs (its head fused with the loss), every layer frozen; a layer the
// checkpoint holds in BF16 stays BF16 in the store.
static int stage_model(const EvalArgs *a, Storage *io, const Config *c, Model *m, FgError *err) {
    int rc = train_build_model(c, 1, m, err);
    for (int l = 0; !rc && l < m->n_layers; l++) m->layers[l].frozen = 1;
    if (!rc && io->mark_bf16 && !c->layout.frozen_fp32) rc = io->mark_bf16(io, a->checkpoint, m, err);
    return rc;
}

// The file's windows (all of it the validation split), whole in memory: a window's T token
// ids as floats and its T labels.
static int load_windows(const EvalArgs *a, const Model *m, TextCorpus *tc, Dataset *ds, FgError *err) {
    const int T = m->tokens, V = m->classes;
    if (!a->tokens_path == !a->text_path)
        return fg_fail(err, FG_ERR_INPUT, "eval needs one of --tokens FILE (token ids: fgpipe tokenize) and "
                       "--text FILE (bytes)");
    if (a->text_path && V != 256)
        return fg_fail(err, FG_ERR_INPUT, "eval: --text %s reads bytes, but checkpoint %s has vocab "
                       "%d: tokenize the text (fgpipe tokenize) and pass --tokens", a->text_path,
                       a->checkpoint, V);
    int rc = a->tokens_path ? token_file_load(tc, a->tokens_path, token_width(V), T, V, err)
                            : token_file_load(tc, a->text_path, 1, T, 256, err);
    if (rc) return rc;
    size_t n = text_val_windows(tc);
    *ds = (Dataset){.count = n, .features = T, .classes = V, .tokens = T,
                    .x = fg_alloc_floats(n * T), .labels = fg_alloc_bytes(n * T * sizeof(Label))};
    return text_val_batch(tc, 0, (int)n, ds->x, ds->labels, err);
}

// Micro-batches (windows) a step holds: as many as the budget keeps beside the runtime and two
// slots of the largest layer (one read while the other computes), at most the file's windows;
// one where not even that fits (the slots' floor then decides, or refuses naming the smallest
// budget). A pass takes the step's lanes: these windows. The need grows with them: bisection.
static int choose_windows(const Backend *be, Config *c, const Model *m, const int *layout,
                          double runtime, int spill, size_t windows, FgError *err) {
    SlotNeeds s = slot_plan_needs(c, m, layout[0], layout[1]);
    const double beside = runtime + s.two + (spill ? 0.0 : s.tied);
    int lo = 1, hi = (int)FG_MIN((size_t)SCHED_MAX_MICROBATCHES, FG_MAX(windows, 1)), rc = FG_OK;
    while (lo < hi && !rc) {
        double in_memory, work;
        c->training.micro_batches = lo + (hi - lo + 1) / 2;
        rc = pipeline_stage_needs(be, c, m, layout, 0, 1, 1, &in_memory, &work, err);
        if (beside + work <= c->layout.mem_budget) lo = c->training.micro_batches;
        else hi = c->training.micro_batches - 1;
    }
    c->training.micro_batches = lo;
    return rc;
}

// The stage, its store made from the checkpoint's weights, then one evaluation.
static int run_stage(const EvalArgs *a, Storage *io, const LayerStreams *streams, Config *c,
                     Model *m, const Dataset *ds, EvalResult *res, FgError *err) {
    const Backend *be = &backend_cpu;
    Transport t = transport_local();
    const int layout[2] = {0, m->n_layers}, spill = streams->open_spill != NULL;
    const double runtime = mem_runtime_bytes(c);
    Pipeline *p = calloc(1, sizeof *p);
    int rc = table_rows_choose(be, c, m, layout, &t, runtime, spill, err), stopped = 0;
    if (!rc) rc = choose_windows(be, c, m, layout, runtime, spill, ds->count, err);
    if (!rc) rc = pipeline_init(p, be, c, m, layout, &t, ds, streams, 0,
                                  (OpCostSource){.time = pipeline_time_ops}, err);
    if (!rc) rc = state_load_weights(p, io, a->checkpoint, layout, err);
    if (!rc) rc = pipeline_evaluate(p, ds, NULL, &res->loss, &res->accuracy, &stopped, err);
    FgError close_err = {0};
    if (pipeline_free(p, rc ? &close_err : err) && !rc) rc = err->code ? err->code : FG_ERR_INPUT;
    free(p);
    return rc;
}

int eval_streamed(const EvalArgs *a, Storage *io, const LayerStreams *streams, EvalResult *res,
                  FgError *err) {
    Config *c = calloc(1, sizeof *c);
    Model m = {0};
    TextCorpus tc = {0};
    Dataset ds = {0};
    int rc = !streams || !streams->open
                 ? fg_fail(err, FG_ERR_INPUT, "eval --mem-budget: this build cannot stream layers from local flash")
                 : stage_config(a, io, c, err);
    if (!rc) rc = stage_model(a, io, c, &m, err);
    if (!rc && a->ctx && a->ctx != m.tokens)
        rc = fg_fail(err, FG_ERR_INPUT, "eval: --ctx %d with --mem-budget: a streamed evaluation "
                     "scores windows of the model's ctx (%d); leave --ctx out", a->ctx, m.tokens);
    if (!rc) rc = load_windows(a, &m, &tc, &ds, err);
    if (!rc && ds.count == 0)
        rc = fg_fail(err, FG_ERR_INPUT, "eval: %s has no window of %d tokens",
                     a->tokens_path ? a->tokens_path : a->text_path, m.tokens + 1);
    if (!rc) rc = run_stage(a, io, streams, c, &m, &ds, res, err);
    res->windows = (long)ds.count, res->tokens = (long)ds.count * m.tokens, res->ctx = m.tokens;
    dataset_free(&ds);
    text_corpus_free(&tc);
    free(c);
    return rc;
}
