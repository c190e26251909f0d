// The run driver, in the order a run goes: open it (model, data, the stage, where it starts,
// its output files), run its steps (each with its outputs, then the stop, checkpoint and
// evaluation policy), finish it (final checkpoint, replica check, evaluation, trace, result).
#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data.h"
#include "model.h"
#include "op_timing.h"
#include "progress.h"
#include "train_internal.h"

enum {
    WINDOW = 20,  // steps averaged for the first and final loss (runs of 2 WINDOW steps or more)
    TIMES = 4096  // the median step time is taken over the last TIMES steps
};

typedef struct {
    const Config *cfg;
    const TrainEnv *env;
    TrainInputs in;
    TrainOutputs out;
    TrainResult *res;
    Model model;
    Dataset train, test;
    TextCorpus text;         // data = text: the corpus train's windows are drawn from
    Pipeline p;
    int reporter;            // replica 0's last stage: progress, loss.csv, the log
    size_t shard, batch;     // samples of a step: one replica's, all replicas'
    long per_epoch, total, first_step;
    size_t *order;           // the epoch's order of the training samples
    double *step_times, recent[WINDOW], train_time;
    double start_loss;  // the run's first step's (check_divergence)
    double *busy;            // [stages][3]: seconds of F, B, U ops in the last step
    // The bookkeeping on each step's allreduce (pipeline_run_scalars): [0] the stop flag, then
    // with rows (timeline) replica 0's measured times of the step before, whose row waits
    // (row_step >= 0, its result row_result) for them.
    int timeline;
    long row_step;
    StepResult row_result;
    double row_lr;
    LineFile loss_csv;       // .fd -1: none
    StepLog log;
    Progress prog;
    LayerStreamStats io_from;  // a streamed stage's I/O when the bound's steps began
    LayerStreamStats io_last;  // ... after the step before (io_every_step)
    double io_seconds;         // their time so far
} Run;

// A streamed stage says which bound its step is on once IO_STEPS steps after the first (a
// warm-up: the slots fill, the page cache is cold) have run.
enum { IO_STEPS = 3 };
static void watch_io_bound(Run *r, long step, double seconds, double waves_bound) {
    LayerSource *src = &r->p.src;
    long n = step - r->first_step;
    // A replica that reads its node's shared slots moves nothing: the node's I/O rank says it.
    if (!src->streamed || src->reads_only) return;
    if (r->cfg->layout.io_every_step) {
        LayerStreamStats now;
        src->io_stats(src, &now);
        LayerStreamStats d = layer_stream_stats_sub(now, r->io_last);
        IoBound b = layer_io_bound(&d, seconds, 1);
        report_io_step(r->env->tr, step, seconds, waves_bound, &b);
        r->io_last = now;
    }
    if (n < 0 || n > IO_STEPS) return;
    LayerStreamStats now;
    src->io_stats(src, &now);
    if (n == 0) {
        r->io_from = now;
        return;
    }
    r->io_seconds += seconds;
    if (n < IO_STEPS && step + 1 < r->total) return;
    LayerStreamStats d = layer_stream_stats_sub(now, r->io_from);
    IoBound b = layer_io_bound(&d, r->io_seconds, (int)n);
    report_io_bound(r->cfg, r->env->tr, src, &b, (int)n);
}

// data = text or tokens: training windows are drawn per step from the training split
// (train.text); the validation split is its non-overlapping windows, gathered once (test).
static int load_text(Run *r, FgError *err) {
    const InputConfig *in = &r->cfg->input;
    const int T = r->cfg->net.ctx, V = r->cfg->net.vocab;
    int rc = in->data == DATA_TEXT ? text_corpus_load(&r->text, in->text_file, T, err)
                                   : token_corpus_load(&r->text, in->train_tokens, in->val_tokens, T, V, err);
    if (rc) return rc;
    r->train = (Dataset){.count = r->text.train.n / (size_t)T, .features = T, .classes = V,
                         .tokens = T, .text = &r->text};
    size_t n = text_val_windows(&r->text);
    r->test = (Dataset){.count = n, .features = T, .classes = V, .tokens = T,
                        .x = fg_alloc_floats(n * T), .labels = fg_alloc_bytes(n * T * sizeof(Label))};
    return text_val_batch(&r->text, 0, (int)n, r->test.x, r->test.labels, err);
}

// A frozen layer its checkpoint holds in BF16 stays BF16 on flash and in checkpoints: decided
// before the stores are made.
static int mark_stored_bf16(const Run *r, Model *m, FgError *err) {
    const char *path = r->in.resume_path ? r->in.resume_path : r->in.init_from;
    const Storage *io = r->env->storage;
    if (!path || !io || !io->mark_bf16 || r->cfg->layout.frozen_fp32) return FG_OK;
    return io->mark_bf16((Storage *)io, path, m, err);
}

// The model, the data (stage 0 reads the inputs, the others only labels and sizes) and the
// stage's part of the model.
static int load_model_and_data(Run *r, FgError *err) {
    const Config *c = r->cfg;
    Transport *t = r->env->tr;
    Model *m = &r->model;
    int rc;
    if ((rc = train_build_model(c, 1, m, err)) || (rc = mark_stored_bf16(r, m, err)) ||
        (rc = layout_plan(c, r->env, m, r->res, err)))
        return rc;
    int (*load)(Dataset *, const char *, const char *, FgError *) =
        t->stage == 0 ? dataset_load_split : dataset_load_split_labels;
    if (config_is_language(c)) rc = load_text(r, err);
    else if (!(rc = load(&r->train, c->input.data_dir, "train", err)))
        rc = load(&r->test, c->input.data_dir, "t10k", err);
    if (rc) return rc;
    const Dataset *a = &r->train, *b = &r->test;
    if (a->features != m->in_features || a->classes > m->classes || b->features != m->in_features ||
        b->classes > m->classes)
        return fg_fail(err, FG_ERR_INPUT, "model: '%s' takes %d features and %d classes, but the data "
                       "in %s has %d features and %d classes (test set: %d and %d)", c->net.model,
                       m->in_features, m->classes,
                       config_data_path(c),
                       a->features, a->classes, b->features, b->classes);
    // A step takes `batch` samples of the epoch's order; replica r the r-th run of `shard`.
    r->shard = (size_t)c->training.micro_batch * c->training.micro_batches;
    r->batch = r->shard * t->replicas;
    if (r->batch > a->count)
        return fg_fail(err, FG_ERR_INPUT, "micro_batch x micro_batches x replicas = %zu is more than "
                       "the %zu training samples", r->batch, a->count);
    r->per_epoch = (long)(a->count / r->batch);
    r->total = c->training.steps ? c->training.steps : (long)c->training.epochs * r->per_epoch;
    return FG_OK;
}

// Where the run starts: step 0, a checkpoint's step, or the layer stores' (--resume-weights).
static int find_first_step(Run *r, FgError *err) {
    const TrainEnv *e = r->env;
    int first_of_grid = e->tr->stage == 0 && e->tr->replica == 0, rc;
    if (r->in.resume_path) {
        if ((rc = state_load_checkpoint(&r->p, e->storage, r->in.resume_path, r->res->layout, r->total, err)))
            return rc;
        if (first_of_grid)
            fprintf(stderr, "fgpipe: resumed from %s at step %ld\n", r->in.resume_path, r->p.first_step);
    } else if (r->in.init_from) {
        if ((rc = state_load_weights(&r->p, e->storage, r->in.init_from, r->res->layout, err))) return rc;
        if (first_of_grid) fprintf(stderr, "fgpipe: weights from %s, step 0\n", r->in.init_from);
    } else if (e->streams && e->streams->resume && first_of_grid) {
        fprintf(stderr, "fgpipe: resumed from the layer stores in %s at step %ld\n",
                r->cfg->layout.weights_dir, r->p.first_step);
    }
    r->first_step = r->res->first_step = r->p.first_step;
    r->res->loss_window = r->total - r->first_step >= 2 * WINDOW ? WINDOW : 1;
    if (r->first_step >= r->total)
        return fg_fail(err, FG_ERR_INPUT, "the layer stores in %s are at step %ld; the run has only "
                       "%ld steps", r->cfg->layout.weights_dir, r->first_step, r->total);
    return FG_OK;
}

// config.txt and loss.csv in --out, the step log (all on the reporting stage).
static int open_outputs(Run *r, FgError *err) {
    const Config *c = r->cfg;
    const char *dir = r->out.out_dir;
    int rc = FG_OK;
    if (!r->reporter) return FG_OK;
    if (dir) {
        if (mkdir(dir, 0755) && errno != EEXIST)
            return fg_fail(err, FG_ERR_INPUT, "--out %s: %s", dir, strerror(errno));
        if ((rc = report_write_config(c, dir, err)) ||
            (rc = report_start_loss_csv(&r->loss_csv, dir, r->first_step, err)))
            return rc;
    }
    if (r->out.log_path) {
        char mode[CONFIG_NAME_MAX], est[CONFIG_NAME_MAX];
        int e = config_estimator(c);
        const char *estimator = c->method.mode == MODE_FG_BP ? config_choice_name("estimator", e, est)
                                                      : config_choice_name("mode", c->method.mode, mode);
        char *text = report_config_text(c);
        const TrainResult *res = r->res;
        double work_ms[SCHED_MAX_STAGES];
        for (int s = 0; s < res->stages; s++) work_ms[s] = 1e3 * res->per_stage.work[s];
        LogInfo info = {config_choice_name("mode", c->method.mode, mode), estimator, text, res->layout_by,
                        res->stages, c->training.micro_batches, r->p.K, res->layout, work_ms,
                        res->per_stage.corrections, res->per_stage.lag,
                        res->per_stage.bubble_used, res->makespan_vs_fg};
        rc = r->env->storage->open_log(r->env->storage, r->out.log_path, &info, &r->log, err);
        free(text);
    }
    return rc;
}

// The timetable's figures per stage: corrections per step, their largest lag, the share of the
// bubble planned for B ops.
static void plan_figures(Run *r) {
    TrainResult *res = r->res;
    const Schedule *S = &r->p.tt.sched;
    res->stages = S->M;
    res->timetable = schedule_mode_name(S->mode);
    for (int s = 0; s < S->M; s++) {
        StageBubbles planned = schedule_stage_bubbles(S, s);
        res->per_stage.corrections[s] = (double)planned.corrections / S->n_phases;
        res->per_stage.lag[s] = planned.max_lag;
        res->per_stage.bubble_used[s] = planned.bubble_used;
    }
    memcpy(res->op_costs, r->p.tt.costs, sizeof res->op_costs);
    res->makespan_vs_fg = S->makespan / S->fg_makespan;
    ScheduleStats st = schedule_stats(S);
    res->bubble_planned = st.bubble_fraction;
    res->bubble_used_by_b = st.bubble_used_by_b;
}

// The checkpoint a run reads (--resume, --init-from), checked by every stage before any file
// is touched (a streamed stage's store, --out): a refused run leaves them all as they were.
static int check_inputs(Run *r, FgError *err) {
    Transport *t = r->env->tr;
    const char *path = r->in.resume_path ? r->in.resume_path : r->in.init_from;
    int rc = !path ? FG_OK : state_check_input(r->cfg, &r->model, r->env->storage, path,
                                               r->in.resume_path != NULL, r->res->layout, t->stage,
                                               t->stages, r->total, err);
    double bad = rc != FG_OK;
    FgError ignored = {0};
    int rc2 = t->allreduce_sum_world(t, &bad, 1, rc ? &ignored : err);
    if (rc || rc2) return rc ? rc : rc2;
    return bad > 0 ? fg_fail(err, FG_ERR_INPUT, "another stage refused checkpoint %s (its message "
                             "names why)", path) : FG_OK;
}

static int open_run(Run *r, FgError *err) {
    const TrainEnv *e = r->env;
    int rc, want_stats = r->out.log_path && e->storage;
    if ((rc = load_model_and_data(r, err)) || (rc = check_inputs(r, err)) ||
        (rc = layout_table_rows(r->cfg, e, &r->model, r->res->layout, err)) ||
        (rc = pipeline_init(&r->p, e->be, r->cfg, &r->model, r->res->layout, e->tr, &r->train,
                            e->streams, want_stats, (OpCostSource){.time = pipeline_time_ops}, err)))
        return rc;
    plan_figures(r);
    const char *warning = config_warning(r->cfg);
    if (e->tr->stage == 0 && e->tr->replica == 0 && warning) fprintf(stderr, "fgpipe: warning: %s\n", warning);
    if (e->tr->stage == 0 && e->tr->replica == 0)
        report_print_layout(&r->model, r->res, e->tr->stages, &r->p);
    if ((rc = find_first_step(r, err)) || (rc = open_outputs(r, err)) ||
        (rc = pipeline_publish(&r->p, err)))  // accepted: a new store replaces the old
        return rc;
    r->order = fg_alloc_bytes(r->train.count * sizeof(size_t));
    r->step_times = fg_alloc_bytes(TIMES * sizeof(double));
    r->busy = calloc((size_t)3 * e->tr->stages, sizeof(double));
    r->timeline = r->out.out_dir || r->out.log_path;  // every step's row, with its timeline
    r->row_step = -1;
    pipeline_reserve_run_scalars(&r->p, 1 + (r->timeline ? 2 * r->p.tt.sched.n_ops : 0));
    progress_init(&r->prog, stderr, r->first_step, r->total, r->cfg->training.print_every);
    return FG_OK;
}

// A loss that is not finite, or far above the run's start, stops the run before the next
// checkpoint could replace a good one. The scale is the larger of the first step's loss and
// ln(classes), a uniform guess's loss, so a resumed, well-trained run is not held to its own
// small loss.
static int check_divergence(Run *r, long step, const StepResult *sr, FgError *err) {
    const Config *c = r->cfg;
    const double loss = sr->loss;
    char where[160] = "";
    if (sr->not_finite_at >= 0)  // bf16: counted where values cross between layers
        snprintf(where, sizeof where, "; the first values not finite were %s layer %d (%s)",
                 sr->not_finite_adjoint ? "the input adjoint of" : "the input of", sr->not_finite_at,
                 r->model.layers[sr->not_finite_at].name);
    if (step == r->first_step) r->start_loss = loss;
    if (!isfinite(loss) && step == r->first_step && step > 0)
        return fg_fail(err, FG_ERR_INPUT, "loss is %f at step %ld, the first after resuming: the "
                       "checkpoint's weights give it%s", loss, step, where);
    if (!isfinite(loss))
        return fg_fail(err, FG_ERR_INPUT, "loss is %f at step %ld: the run diverged (lower lr, "
                       "now %g, or set clip_norm)%s", loss, step, c->optim.lr, where);
    double scale = FG_MAX(r->start_loss, log((double)r->model.classes));
    if (c->training.diverge_factor > 0 && loss > c->training.diverge_factor * scale)
        return fg_fail(err, FG_ERR_INPUT, "loss %.4g at step %ld is over diverge_factor = %g times "
                       "%.4g (the larger of the run's first loss and ln %d classes): the run "
                       "diverged; lower lr (now %g) or set clip_norm (diverge_factor = 0: no check)",
                       loss, step, c->training.diverge_factor, scale, r->model.classes, c->optim.lr);
    return FG_OK;
}

// The run's first loss: the mean of its first n steps' (all still in recent).
static void first_window_loss(Run *r, long n) {
    r->res->first_loss = 0.0;
    for (long i = 0; i < n; i++) r->res->first_loss += r->recent[(r->first_step + i) % WINDOW] / n;
}

// A step's row of loss.csv and the log, from its result and its measured timeline.
static int write_step_row(Run *r, long step, const StepResult *sr, double lr, const Schedule *measured,
                          FgError *err) {
    double used[SCHED_MAX_STAGES];
    int M = r->env->tr->stages, rc = FG_OK;
    ScheduleStats ms = schedule_stats(measured);
    memset(r->busy, 0, (size_t)3 * M * sizeof(double));
    for (int i = 0; i < measured->n_ops; i++) {
        const ScheduledOp *op = &measured->ops[i];
        r->busy[3 * op->stage + (op->kind == OP_F ? 0 : op->kind == OP_U ? 2 : 1)] += op->end - op->start;
    }
    for (int s = 0; s < M; s++) used[s] = schedule_stage_bubbles(measured, s).bubble_used;
    char row[256];
    snprintf(row, sizeof row, "%ld,%.6f,%.6g,%.6f,%.6f,%.4f,%.4f\n", step, sr->loss, lr,
             sr->seconds, ms.makespan, ms.bubble_fraction, ms.bubble_used_by_b);
    if (r->loss_csv.fd >= 0 && (rc = line_file_append(&r->loss_csv, row, err))) return rc;
    StepRecord rec = {step, sr->loss, lr, sr->estimate_norm, sr->exact_norm, sr->cos_estimate_exact,
                      sr->cos_fg_exact, sr->variance_reduction, sr->seconds, ms.makespan,
                      ms.bubble_fraction, ms.bubble_used_by_b, sr->cv_beta_median, r->busy, used};
    if (r->log.ctx) rc = r->log.append(&r->log, &rec, err);
    return rc;
}

// The row still waiting for its timeline, now (before a checkpoint, a stop, the run's end):
// one gather of the last step's timeline, collective over the pipeline.
static int flush_step_row(Run *r, FgError *err) {
    if (r->row_step < 0) return FG_OK;
    Schedule measured;
    int rc = report_gather_measured(&r->p, &measured, err);
    if (!rc) rc = write_step_row(r, r->row_step, &r->row_result, r->row_lr, &measured, err);
    report_free_measured(&measured);
    r->row_step = -1;
    return rc;
}

// After step `step`, what its allreduce summed (pipeline_run_scalars): *stop, whether any rank
// had a stop request before the step, and the step before's timeline (its row, if it still
// waits); then this step's own flag and times for the next step's sum.
static int exchange_bookkeeping(Run *r, long step, const StepResult *sr, int *stop, FgError *err) {
    double *sums = pipeline_run_scalars(&r->p);
    int rc = FG_OK;
    *stop = sums[0] > 0;
    if (r->timeline && r->row_step >= 0) {
        Schedule measured;
        report_measured_schedule(&r->p, pipeline_step_phase(&r->p, r->row_step), sums + 1, &measured);
        rc = write_step_row(r, r->row_step, &r->row_result, r->row_lr, &measured, err);
        report_free_measured(&measured);
    }
    OptimizerConfig oc = config_optimizer(r->cfg);
    r->row_step = r->timeline ? step : -1;
    r->row_result = *sr;
    r->row_lr = lr_at(&oc, step, r->total);  // before a stop shortens the run
    sums[0] = r->in.stop_requested && *r->in.stop_requested ? 1.0 : 0.0;
    if (r->timeline && r->env->tr->replica == 0) report_local_measured(&r->p, sums + 1);
    else if (r->timeline) memset(sums + 1, 0, (size_t)2 * r->p.tt.sched.n_ops * sizeof(double));
    return rc;
}

// After each step: the loss window, the progress line (the step's row follows with the next
// step's sums: exchange_bookkeeping).
static int step_outputs(Run *r, long step, const StepResult *sr, FgError *err) {
    OptimizerConfig oc = config_optimizer(r->cfg);
    double lr = lr_at(&oc, step, r->total);
    long done = step + 1 - r->first_step;
    r->train_time += sr->seconds;
    r->step_times[(step - r->first_step) % TIMES] = sr->seconds;
    watch_io_bound(r, step, sr->seconds, sr->waves_bound);
    r->recent[step % WINDOW] = sr->loss;
    if (done == r->res->loss_window) first_window_loss(r, done);
    int rc = check_divergence(r, step, sr, err);
    if (rc) {  // its row goes into the outputs first (every rank sees the same loss)
        flush_step_row(r, &(FgError){0});
        return rc;
    }
    if (r->reporter) progress_step(&r->prog, step, sr->loss, lr, (long)((step + 1 - r->first_step) * r->batch));
    return FG_OK;
}

// A checkpoint and the outputs a resume appends to stay in step: after a crash and --resume,
// loss.csv and the log hold every step up to the checkpoint. They are flushed first: rows past
// a checkpoint are dropped on resume, rows missing before it would be lost for good.
static int checkpoint_and_flush(Run *r, const char *path, long next_step, FgError *err) {
    int rc = flush_step_row(r, err);
    if (!rc && r->loss_csv.fd >= 0) rc = line_file_sync(&r->loss_csv, err);
    if (!rc && r->log.ctx) rc = r->log.flush(&r->log, err);
    if (!rc) rc = state_save_checkpoint(&r->p, r->env->storage, path, r->res->layout, next_step, err);
    return rc;
}

// Replica 0 evaluates (pipeline_solo: replicas sharing its node's stores wait); called on
// every rank. *stopped: a stop request (a signal) ended it within a layer; every rank learns
// it (one sum over the grid), so all of them stop alike.
static int evaluate_replica0(Run *r, double *loss, double *acc, int *stopped, FgError *err) {
    Transport *t = r->env->tr;
    int rc = pipeline_solo(&r->p, 1, err), mine = 0;
    if (!rc && t->replica == 0)
        rc = pipeline_evaluate(&r->p, &r->test, r->in.stop_requested, loss, acc, &mine, err);
    int rc2 = pipeline_solo(&r->p, 0, rc ? &(FgError){0} : err);
    double any = mine;
    if (!(rc = rc ? rc : rc2)) rc = t->allreduce_sum_world(t, &any, 1, err);
    *stopped = any > 0;
    return rc;
}

// A stop request: a checkpoint on which step `next` runs, then the run ends there (exit 0).
static int stop_run(Run *r, long next, const char *when, int *stop, FgError *err) {
    const char *ckpt = r->env->storage ? r->out.checkpoint_path : NULL;
    int rc = ckpt ? checkpoint_and_flush(r, ckpt, next, err) : FG_OK;
    if (rc) return rc;
    if (r->reporter) fprintf(stderr, "fgpipe: stopped by a signal %s %ld\n", when, next);
    r->res->stopped = *stop = 1;
    r->total = next;
    return FG_OK;
}

// After each step's outputs: a stop request (checkpoint, then stop), the periodic checkpoint,
// the periodic evaluation. requested: some rank saw a signal (exchange_bookkeeping: a signal may
// reach only some ranks); *stop: the run ends after this step.
static int stop_and_checkpoint_policy(Run *r, long step, int requested, int *stop, FgError *err) {
    const char *ckpt = r->env->storage ? r->out.checkpoint_path : NULL;
    long next = step + 1;
    int rc = FG_OK;
    *stop = 0;
    // In the last step a stop is just the end: the run is complete, not stopped.
    if (requested && next < r->total) return stop_run(r, next, "after step", stop, err);
    if (ckpt && r->out.checkpoint_every && next % r->out.checkpoint_every == 0 && next < r->total &&
        (rc = checkpoint_and_flush(r, ckpt, next, err)))
        return rc;
    int every = r->cfg->training.eval_every;
    if (every && next % every == 0 && next < r->total) {
        double loss, acc;
        int stopped;
        if ((rc = evaluate_replica0(r, &loss, &acc, &stopped, err))) return rc;
        if (stopped) return stop_run(r, next, "during the evaluation after step", stop, err);
        if (r->reporter)
            fprintf(stderr, "%seval step %ld: test loss %.4f  test accuracy %.4f\n",
                    r->prog.is_tty ? "\n" : "", next, loss, acc);
    }
    return FG_OK;
}

static int run_steps(Run *r, FgError *err) {
    Transport *t = r->env->tr;
    int rc = FG_OK, stop = 0, requested = 0;
    for (long step = r->first_step; step < r->total && !rc && !stop; step++) {
        if (step % r->per_epoch == 0 || step == r->first_step)
            dataset_shuffle(r->order, r->train.count, r->cfg->training.seed, (uint32_t)(step / r->per_epoch));
        StepResult sr;
        size_t sample0 = (size_t)(step % r->per_epoch) * r->batch + (size_t)t->replica * r->shard;
        if (!(rc = pipeline_step(&r->p, step, r->total, r->order, sample0, &sr, err)) &&
            !(rc = exchange_bookkeeping(r, step, &sr, &requested, err)) &&
            !(rc = step_outputs(r, step, &sr, err)) &&
            !(step == r->first_step && (rc = report_activations_after_first_step(&r->p, r->reporter, err))))
            rc = stop_and_checkpoint_policy(r, step, requested, &stop, err);
    }
    if (!rc) rc = flush_step_row(r, err);
    if (r->log.ctx) {
        int rc2 = r->log.close(&r->log, err);
        if (!rc) rc = rc2;
    }
    if (r->reporter) progress_finish(&r->prog);
    return rc;
}

// Bytes of the data this rank holds: the sets' arrays and the mapped corpus files.
static double data_bytes(const Run *r) {
    const Dataset *sets[2] = {&r->train, &r->test};
    double bytes = (double)r->text.map_bytes[0] + (double)r->text.map_bytes[1];
    for (int i = 0; i < 2; i++)
        bytes += (sets[i]->x ? (double)sets[i]->count * sets[i]->features * sizeof(float) : 0.0) +
                 (sets[i]->labels ? (double)sets[i]->count * sets[i]->tokens * sizeof(Label) : 0.0);
    return bytes;
}

// The run's numbers: losses, speed, layout, timetable and memory.
static int fill_result(Run *r, const ScheduleStats *ms, const double *ms_stage, FgError *err) {
    TrainResult *res = r->res;
    Transport *t = r->env->tr;
    int M = t->stages, rc;
    long window = FG_MIN(r->total - r->first_step, res->loss_window);
    if (window < res->loss_window) first_window_loss(r, window);  // stopped before the window was full
    for (long i = 0; i < window; i++) res->final_loss += r->recent[(r->total - 1 - i) % WINDOW] / window;
    res->per_stage.peak_rss[t->stage] = (double)peak_rss_bytes();
    res->per_stage.stash_bytes[t->stage] = pipeline_stash_bytes(&r->p);
    report_memory_of_stage(&r->p.mem, data_bytes(r), t->stage, &res->per_stage);
    double cost[N_OP_COSTS];
    pipeline_measured_costs(&r->p, cost);
    for (int k = 0; k < N_OP_COSTS; k++) res->measured_costs[k * M + t->stage] = cost[k];
    if ((rc = t->allreduce_sum(t, res->per_stage.peak_rss, M, err)) ||
        (rc = t->allreduce_sum(t, res->per_stage.stash_bytes, M, err)) ||
        (rc = t->allreduce_sum(t, res->per_stage.activation_peak, M, err)) ||
        (rc = t->allreduce_sum(t, &res->per_stage.memory[0][0], N_MEM_OWNERS * SCHED_MAX_STAGES, err)) ||
        (rc = t->allreduce_sum(t, res->measured_costs, N_OP_COSTS * M, err)))
        return rc;
    size_t n_times = (size_t)FG_MIN(r->total - r->first_step, (long)TIMES);
    res->steps = r->total;
    res->train_seconds = r->train_time;
    res->samples_per_s = r->train_time > 0 ? (double)(r->total - r->first_step) * r->batch / r->train_time : 0.0;
    res->step_seconds = n_times ? fg_median(r->step_times, n_times) : 0.0;
    res->n_params = r->model.n_params;
    for (int s = 0; s < M; s++) res->per_stage.bubble_used_measured[s] = ms_stage[s];
    res->bubble_measured = ms->bubble_fraction;
    res->bubble_used_measured = ms->bubble_used_by_b;
    res->peak_rss_bytes = peak_rss_bytes();
    return FG_OK;
}

// The last step's update goes into the weights (a streamed stage's stores hold the finished
// run whatever is done with it next), then the final checkpoint, the replica check, the test
// set, the trace, --save-params and the result.
static int finish_run(Run *r, FgError *err) {
    Transport *t = r->env->tr;
    const char *ckpt = r->env->storage ? r->out.checkpoint_path : NULL;
    int rc;
    if ((rc = pipeline_apply_pending(&r->p, err))) return rc;
    if (ckpt && !r->res->stopped && (rc = checkpoint_and_flush(r, ckpt, r->total, err))) return rc;
    if ((rc = state_check_replicas_agree(&r->p, err))) return rc;
    // A run a signal stopped (every rank knows it) goes to its end without an evaluation, which
    // the signal would stop anyway; one stopped within a layer loses nothing but the test loss.
    int stopped = r->res->stopped;
    r->res->test_loss = r->res->test_acc = NAN;
    if (!stopped && (rc = evaluate_replica0(r, &r->res->test_loss, &r->res->test_acc, &stopped, err)))
        return rc;
    if (stopped && r->reporter) fprintf(stderr, "fgpipe: stopped by a signal: no test loss\n");
    Schedule measured;
    rc = report_gather_measured(&r->p, &measured, err);
    if (!rc && r->out.trace_path && t->stage == 0 && t->replica == 0)
        rc = report_write_trace(&r->p.tt.sched, &measured, r->out.trace_path, err);
    ScheduleStats ms = schedule_stats(&measured);
    double ms_stage[SCHED_MAX_STAGES];
    for (int s = 0; s < measured.M; s++) ms_stage[s] = schedule_stage_bubbles(&measured, s).bubble_used;
    report_free_measured(&measured);
    if (!rc && r->out.params_path) rc = state_save_params(&r->p, r->out.params_path, err);
    return rc ? rc : fill_result(r, &ms, ms_stage, err);
}

// The stage's last writes can fail at close (a full disk): that fails the run too.
static int close_run(Run *r, int rc, FgError *err) {
    FgError close_err = {0};
    line_file_close(&r->loss_csv);
    if (pipeline_free(&r->p, rc ? &close_err : err) && !rc) rc = err->code ? err->code : FG_ERR_INPUT;
    fg_free(r->order);
    fg_free(r->step_times);
    free(r->busy);
    dataset_free(&r->train);
    dataset_free(&r->test);
    text_corpus_free(&r->text);
    return rc;
}

int train_run(const Config *cfg, const TrainEnv *env, const TrainInputs *in,
              const TrainOutputs *out, TrainResult *res, FgError *err) {
    if (!env->storage && ((in && (in->resume_path || in->init_from)) || (out && (out->checkpoint_every || out->log_path))))
        return fg_fail(err, FG_ERR_INPUT, "--resume, --checkpoint-every and --log need checkpoint "
                       "storage, which this build of fgpipe does not have");
    Run *r = calloc(1, sizeof *r);
    *r = (Run){.cfg = cfg, .env = env, .res = res, .loss_csv = {.fd = -1}};
    if (in) r->in = *in;
    if (out) r->out = *out;
    memset(res, 0, sizeof *res);
    r->reporter = env->tr->stage == env->tr->stages - 1 && env->tr->replica == 0;
    int rc = open_run(r, err);
    if (!rc) rc = run_steps(r, err);
    if (!rc) rc = finish_run(r, err);
    rc = close_run(r, rc, err);
    free(r);
    return rc;
}
