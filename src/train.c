#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data.h"
#include "model.h"
#include "pipeline.h"
#include "progress.h"

size_t peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;  // Linux reports KiB
}

static FILE *open_in_dir(const char *dir, const char *name, FgError *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) fg_fail(err, FG_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
    return f;
}

// loss.csv, started over; a resumed run keeps the rows of the steps before its first one, so a
// requeued job writing into the same directory continues the file.
static FILE *open_loss_csv(const char *dir, long first_step, FgError *err) {
    char path[1024], line[512], *kept = NULL;
    size_t kept_len = 0;
    snprintf(path, sizeof path, "%s/loss.csv", dir);
    FILE *old = first_step > 0 ? fopen(path, "r") : NULL;
    if (old) {
        FILE *mem = open_memstream(&kept, &kept_len);
        while (fgets(line, sizeof line, old)) {
            char *end;
            long step = strtol(line, &end, 10);
            if (end != line && *end == ',' && step < first_step) fputs(line, mem);
        }
        fclose(old);
        fclose(mem);
    }
    FILE *f = open_in_dir(dir, "loss.csv", err);
    if (f) {
        fprintf(f, "step,loss,lr,seconds,makespan,bubble,bubble_used_by_b\n");
        if (kept) fputs(kept, f);
    }
    free(kept);
    return f;
}

static void print_layout(const Model *m, const int *first, int M, const Pipeline *p) {
    if (p->tr->replicas > 1) fprintf(stderr, "fgpipe: %d data-parallel replicas of ", p->tr->replicas);
    else fprintf(stderr, "fgpipe: ");
    fprintf(stderr, "%d stage%s:", M, M > 1 ? "s" : "");
    for (int s = 0; s < M; s++)
        fprintf(stderr, " [%s..%s %zu params]", m->layers[first[s]].name,
                m->layers[first[s + 1] - 1].name, model_range_count(m, first[s], first[s + 1]));
    ScheduleStats st = schedule_stats(&p->sched);
    fprintf(stderr, "\nfgpipe: timetable %s, %d of %d micro-batches backpropagated, planned bubble %.1f%%",
            schedule_mode_name(p->sched.mode), p->n_sel, p->sched.N, 100 * st.bubble_fraction);
    if (p->sched.mode == SCHED_FG_BP)
        fprintf(stderr, ", %.1f%% of it used by B ops (lag %d)", 100 * st.bubble_used_by_b, p->sched.lag);
    fputc('\n', stderr);
}

// The last step as it ran: every stage contributes the times of its own ops, one sum gathers
// them, and every stage gets the timetable with measured times (free measured->ops).
static int gather_measured(Pipeline *p, Schedule *measured, FgError *err) {
    int n = p->sched.n_ops, s = p->tr->stage;
    int lo = p->sched.stage_first[s], hi = lo + p->sched.stage_count[s];
    double *times = calloc((size_t)2 * n, sizeof(double));
    memcpy(times + 2 * lo, p->measured + 2 * lo, (size_t)(hi - lo) * 2 * sizeof(double));
    int rc = p->tr->allreduce_sum(p->tr, times, 2 * n, err);
    *measured = p->sched;
    measured->ops = malloc((size_t)n * sizeof(ScheduledOp));
    memcpy(measured->ops, p->sched.ops, (size_t)n * sizeof(ScheduledOp));
    measured->makespan = 0;
    for (int i = 0; i < n; i++) {
        measured->ops[i].start = times[2 * i];
        measured->ops[i].end = times[2 * i + 1];
        measured->makespan = fmax(measured->makespan, times[2 * i + 1]);
    }
    // As run there is no separate fg timetable: the bubble is all time not spent in F or U.
    measured->fg_makespan = measured->makespan;
    free(times);
    return rc;
}

// Planned (pid 0) and measured (pid 1) timelines as Chrome trace JSON.
static int write_trace(const Schedule *planned, const Schedule *measured, const char *path,
                       FgError *err) {
    FILE *f = fopen(path, "w");
    if (!f) return fg_fail(err, FG_ERR_INPUT, "--trace %s: %s", path, strerror(errno));
    const Schedule *both[2] = {planned, measured};
    const char *labels[2] = {"planned", "measured"};
    int rc = schedule_write_chrome_traces(both, labels, 2, f, err);
    if (fclose(f) && !rc) rc = fg_fail(err, FG_ERR_INPUT, "--trace %s: write failed", path);
    return rc;
}

// The stage's share of a checkpoint: parameters, optimizer state, and the guide direction of
// the guided estimator; everything else follows from the config, the seed and the step. The
// tensors come from pipeline_visit_layers (out of core: one slot at a time).
typedef struct {
    Pipeline *p;
    CheckpointState st;
    const char *path;  // a load's
    long total;        // a load's: the run's steps
} StageCheckpoint;

static int stage_visit_layers(void *source, int writable, LayerVisitor visit, void *arg, FgError *err) {
    StageCheckpoint *sc = source;
    const Config *c = sc->p->cfg;
    // Checked before the state is overwritten (an out-of-core stage's store).
    if (writable && sc->st.seed != c->seed)
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s was written with seed %u, the config has seed %u",
                       sc->path, sc->st.seed, c->seed);
    if (writable && sc->st.step >= sc->total)
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s is at step %ld; the run has only %ld steps",
                       sc->path, sc->st.step, sc->total);
    return pipeline_visit_layers(sc->p, writable, sc->st.step, visit, arg, err);
}

static void checkpoint_state(StageCheckpoint *sc, Pipeline *p, const int *layout, const char *config_text) {
    const Config *c = p->cfg;
    *sc = (StageCheckpoint){.p = p};
    CheckpointState *st = &sc->st;
    *st = (CheckpointState){.model = p->model, .first = p->stage.first, .last = p->stage.last,
                            .visit_layers = stage_visit_layers, .source = sc, .seed = c->seed,
                            .config_text = config_text, .stages = p->tr->stages, .layout = layout};
    st->buffers[st->n_buffers++] = "params";
    if (c->optimizer == OPT_ADAM) {
        st->buffers[st->n_buffers++] = "optimizer/m";
        st->buffers[st->n_buffers++] = "optimizer/v";
    } else {
        st->buffers[st->n_buffers++] = "optimizer/velocity";
    }
    if (p->need.guide) st->buffers[st->n_buffers++] = "estimator/guide";
}

static int resume(Pipeline *p, const TrainOutputs *o, const int *layout, long total, long *first_step,
                  FgError *err) {
    StageCheckpoint sc;
    checkpoint_state(&sc, p, layout, NULL);
    sc.path = o->resume_path, sc.total = total;
    int rc = o->storage->load(o->storage, &sc.st, o->resume_path, err);
    if (rc) return rc;
    *first_step = p->first_step = sc.st.step;
    return FG_OK;
}

// Replicas hold the same weights: replica 0's pipeline writes, the others go on at once.
static int save_checkpoint(Pipeline *p, const Config *c, const TrainOutputs *o, const int *layout,
                           long next_step, FgError *err) {
    if (p->tr->replica != 0) return FG_OK;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_write(c, f);
    fclose(f);
    StageCheckpoint sc;
    checkpoint_state(&sc, p, layout, text);
    sc.st.step = next_step;
    double t0 = wall_seconds();
    int rc = o->storage->save(o->storage, &sc.st, o->checkpoint_path, err);
    double seconds = wall_seconds() - t0;
    free(text);
    double mib = (double)sc.st.n_buffers * (double)p->model->n_params * sizeof(float) / 1048576.0;
    if (!rc && p->tr->stage == 0)
        fprintf(stderr, "%sfgpipe: checkpoint at step %ld written to %s (%.1f MiB in %.3f s, %.0f MiB/s)\n",
                isatty(2) ? "\n" : "", next_step, o->checkpoint_path, mib, seconds, mib / seconds);
    return rc;
}

// FNV-1a over the parameters, layer after layer (one slot at a time out of core).
static int hash_layer(void *arg, const Layer *L, float *const *bufs, FgError *err) {
    (void)err;
    uint64_t *h = arg;
    const unsigned char *b = (const unsigned char *)bufs[0];
    for (size_t i = 0; i < L->param_count * sizeof(float); i++) *h = (*h ^ b[i]) * 1099511628211ull;
    return FG_OK;
}

// Replicas apply the same summed gradient and so hold bit-identical weights; one that drifted
// (a sum that gave replicas different bits, a replica that missed a step) is an error, not a
// silent fork. Every rank contributes 52 bits of its stage's hash (exact in a double); one sum
// over the grid gathers them.
static int check_replicas_agree(Pipeline *p, FgError *err) {
    Transport *t = p->tr;
    int M = t->stages, R = t->replicas;
    if (R == 1) return FG_OK;
    uint64_t hash = 1469598103934665603ull;
    int rc = pipeline_visit_layers(p, 0, 0, hash_layer, &hash, err);
    if (rc) return rc;
    double *h = calloc((size_t)M * R, sizeof(double));
    h[t->replica * M + t->stage] = (double)(hash >> 12);
    rc = t->allreduce_sum_world(t, h, M * R, err);
    for (int r = 1; r < R && !rc; r++)
        for (int s = 0; s < M && !rc; s++)
            if (h[r * M + s] != h[s])
                rc = fg_fail(err, FG_ERR_INTERNAL,
                             "the weights of stage %d differ between replica 0 and replica %d", s, r);
    free(h);
    return rc;
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    int fd;
    const char *path;
} ParamsFile;

static int write_layer_params(void *arg, const Layer *L, float *const *bufs, FgError *err) {
    ParamsFile *f = arg;
    size_t bytes = L->param_count * sizeof(float);
    if (pwrite(f->fd, bufs[0], bytes, (off_t)(L->param_offset * sizeof(float))) != (ssize_t)bytes)
        return fg_fail(err, FG_ERR_INPUT, "writing %s: %s", f->path, strerror(errno));
    return FG_OK;
}

// Layer by layer, so an out-of-core stage writes from its slots.
static int save_params(Pipeline *p, const char *path, FgError *err) {
    int rc = FG_OK;
    ParamsFile f = {open(path, O_WRONLY | O_CREAT, 0644), path};
    if (f.fd < 0) return fg_fail(err, FG_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
    // Every stage sets the same final size, so no old tail survives and no write is cut.
    if (ftruncate(f.fd, (off_t)(p->model->n_params * sizeof(float))))
        rc = fg_fail(err, FG_ERR_INPUT, "writing %s: %s", path, strerror(errno));
    if (!rc) rc = pipeline_visit_layers(p, 0, 0, write_layer_params, &f, err);
    if (close(f.fd) && !rc) rc = fg_fail(err, FG_ERR_INPUT, "writing %s: %s", path, strerror(errno));
    return rc;
}

int train_run(const Config *c, const Backend *be, Transport *t, const TrainOutputs *outputs, TrainResult *res,
              FgError *err) {
    const char *out_dir = outputs ? outputs->out_dir : NULL;
    const char *trace_path = outputs ? outputs->trace_path : NULL;
    memset(res, 0, sizeof *res);
    // Replica 0's last stage reports and writes the outputs; replica 0 evaluates.
    int M = t->stages, R = t->replicas, reporter = t->stage == M - 1 && t->replica == 0, rc;
    Model m;
    Dataset train = {0}, test = {0};
    Pipeline p = {0};
    FILE *loss_csv = NULL;
    double *step_times = NULL;
    if ((rc = model_build_mlp(&m, c->model, c->activation, err))) return rc;
    if ((rc = partition_layers(&m, M, c->boundaries, res->layout, err))) return rc;
    // Only stage 0 reads the inputs; the others need the labels and the sizes.
    int (*load)(Dataset *, const char *, const char *, FgError *) =
        t->stage == 0 ? dataset_load_split : dataset_load_split_labels;
    if ((rc = load(&train, c->data_dir, "train", err))) goto done;
    if ((rc = load(&test, c->data_dir, "t10k", err))) goto done;
    if (train.features != m.in_features || train.classes > m.classes ||
        test.features != m.in_features || test.classes > m.classes) {
        rc = fg_fail(err, FG_ERR_INPUT,
                     "model: '%s' takes %d features and %d classes, but the data in %s has %d "
                     "features and %d classes (test set: %d and %d)",
                     c->model, m.in_features, m.classes, c->data_dir, train.features, train.classes,
                     test.features, test.classes);
        goto done;
    }
    // A step takes `batch` samples of the epoch's order; replica r the r-th run of `shard`.
    size_t shard = (size_t)c->micro_batch * c->micro_batches, batch = shard * R;
    if (batch > train.count) {
        rc = fg_fail(err, FG_ERR_INPUT,
                     "micro_batch x micro_batches x replicas = %zu is more than the %zu training samples",
                     batch, train.count);
        goto done;
    }
    const LayerStreams *streams = outputs ? outputs->streams : NULL;
    int want_stats = outputs && outputs->log_path && outputs->storage;
    if ((rc = pipeline_init(&p, be, c, &m, res->layout, t, &train, streams, want_stats, err))) goto done;
    int out_of_core = 0;
    if ((rc = pipeline_streamed_stages(&p, &out_of_core, err))) goto done;
    if (streams && streams->resume && out_of_core < M) {
        rc = fg_fail(err, FG_ERR_INPUT, "--resume-weights: %d of the %d stages fit mem_budget and "
                     "have no layer store to resume from (resume them from a checkpoint)",
                     M - out_of_core, M);
        goto done;
    }
    if (t->stage == 0 && t->replica == 0) print_layout(&m, res->layout, M, &p);
    if (out_dir && reporter) {
        if (mkdir(out_dir, 0755) && errno != EEXIST) {
            rc = fg_fail(err, FG_ERR_INPUT, "--out %s: %s", out_dir, strerror(errno));
            goto done;
        }
        FILE *cf = open_in_dir(out_dir, "config.txt", err);
        if (!cf) {
            rc = FG_ERR_INPUT;
            goto done;
        }
        config_write(c, cf);
        fclose(cf);
    }

    long per_epoch = (long)(train.count / batch);
    long total = c->steps ? c->steps : (long)c->epochs * per_epoch;
    size_t *order = fg_alloc_bytes(train.count * sizeof(size_t));
    enum { TIMES = 4096 };  // the median step time is taken over the last TIMES steps
    step_times = fg_alloc_bytes(TIMES * sizeof(double));
    OptimizerConfig oc = config_optimizer(c);
    Progress prog;
    progress_init(&prog, stderr, total, c->print_every);
    enum { WINDOW = 20 };
    double recent[WINDOW], train_time = 0.0;
    long first_step = 0;
    const TrainOutputs none = {0}, *o = outputs ? outputs : &none;
    int checkpoints = o->storage && o->checkpoint_path;
    if (o->resume_path && (rc = resume(&p, o, res->layout, total, &first_step, err))) {
        fg_free(order);
        goto done;
    }
    if (streams && streams->resume) first_step = p.first_step;
    if (first_step >= total) {
        rc = fg_fail(err, FG_ERR_INPUT, "the layer stores in %s are at step %ld; the run has only "
                     "%ld steps", c->weights_dir, first_step, total);
        fg_free(order);
        goto done;
    }
    res->first_step = first_step;
    if (out_dir && reporter && !(loss_csv = open_loss_csv(out_dir, first_step, err))) {
        rc = FG_ERR_INPUT;
        fg_free(order);
        goto done;
    }
    if (o->resume_path && t->stage == 0 && t->replica == 0)
        fprintf(stderr, "fgpipe: resumed from %s at step %ld\n", o->resume_path, first_step);
    if (streams && streams->resume && t->stage == 0)
        fprintf(stderr, "fgpipe: resumed from the layer stores in %s at step %ld\n", c->weights_dir,
                first_step);
    StepLog log = {0};
    double *busy = calloc((size_t)3 * M, sizeof(double));
    if (o->log_path) {
        if (!o->storage) rc = fg_fail(err, FG_ERR_INPUT, "--log needs a build with HDF5 storage");
        static const char *const modes[] = {"bp", "fg", "fg+bp"};
        const char *est = c->mode == MODE_BP ? "bp" : c->mode == MODE_FG ? "fg"
                        : c->estimator == ESTIMATOR_GUIDED ? "guided" : c->estimator == ESTIMATOR_FG ? "fg" : "cv";
        LogInfo info = {modes[c->mode], est, NULL, M, c->micro_batches, p.K};
        char *text = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&text, &len);
        config_write(c, mf);
        fclose(mf);
        info.config_text = text;
        if (reporter && !rc) rc = o->storage->open_log(o->storage, o->log_path, &info, &log, err);
        free(text);
    }
    for (long step = first_step; step < total && !rc; step++) {
        if (step % per_epoch == 0 || step == first_step)
            dataset_shuffle(order, train.count, c->seed, (uint32_t)(step / per_epoch));
        StepResult sr;
        size_t sample0 = (size_t)(step % per_epoch) * batch + (size_t)t->replica * shard;
        rc = pipeline_step(&p, step, total, order, sample0, &sr, err);
        if (rc) break;
        train_time += sr.seconds;
        step_times[(step - first_step) % TIMES] = sr.seconds;
        recent[step % WINDOW] = sr.loss;
        long done_steps = step + 1 - first_step;
        if (done_steps == FG_MIN(total - first_step, WINDOW))
            for (long i = 0; i < done_steps; i++) res->first_loss += recent[(first_step + i) % WINDOW] / (double)done_steps;
        if (!isfinite(sr.loss)) {
            rc = fg_fail(err, FG_ERR_INPUT, "loss is %f at step %ld: lower lr (now %g)", sr.loss, step, c->lr);
            break;
        }
        double lr = lr_at(&oc, step, total);
        if (out_dir || o->log_path) {  // every stage takes part in gathering the measured timeline
            Schedule measured;
            rc = gather_measured(&p, &measured, err);
            ScheduleStats ms = schedule_stats(&measured);
            memset(busy, 0, (size_t)3 * M * sizeof(double));
            for (int i = 0; i < measured.n_ops; i++) {
                const ScheduledOp *op = &measured.ops[i];
                busy[3 * op->stage + (op->kind == OP_F ? 0 : op->kind == OP_B ? 1 : 2)] += op->end - op->start;
            }
            free(measured.ops);
            if (rc) break;
            if (loss_csv)
                fprintf(loss_csv, "%ld,%.6f,%.6g,%.6f,%.6f,%.4f,%.4f\n", step, sr.loss, lr, sr.seconds,
                        ms.makespan, ms.bubble_fraction, ms.bubble_used_by_b);
            StepRecord rec = {step, sr.loss, lr, sr.estimate_norm, sr.exact_norm, sr.cos_estimate_exact,
                              sr.cos_fg_exact, sr.variance_reduction, sr.seconds, ms.makespan,
                              ms.bubble_fraction, ms.bubble_used_by_b, busy};
            if (log.ctx && (rc = log.append(&log, &rec, err))) break;
        }
        if (reporter) progress_step(&prog, step, sr.loss, lr, (long)((step + 1) * batch));
        if (o->stop_requested) {  // a signal may reach only some ranks: stop when any saw one
            double stop = *o->stop_requested ? 1.0 : 0.0;
            if ((rc = t->allreduce_sum_world(t, &stop, 1, err))) break;
            // In the last step a stop is just the end: the run is complete, not stopped.
            if (stop > 0 && step + 1 < total) {
                if (checkpoints && (rc = save_checkpoint(&p, c, o, res->layout, step + 1, err))) break;
                if (reporter) fprintf(stderr, "fgpipe: stopped by a signal after step %ld\n", step + 1);
                res->stopped = 1;
                total = step + 1;
                break;
            }
        }
        if (checkpoints && o->checkpoint_every && (step + 1) % o->checkpoint_every == 0 &&
            step + 1 < total && (rc = save_checkpoint(&p, c, o, res->layout, step + 1, err)))
            break;
        if (c->eval_every && (step + 1) % c->eval_every == 0 && step + 1 < total && t->replica == 0) {
            double tl, ta;
            if ((rc = pipeline_evaluate(&p, &test, &tl, &ta, err))) break;
            if (reporter)
                fprintf(stderr, "%seval step %ld: test loss %.4f  test accuracy %.4f\n",
                        prog.is_tty ? "\n" : "", step + 1, tl, ta);
        }
    }
    fg_free(order);
    free(busy);
    if (log.ctx) {
        int rc2 = log.close(&log, err);
        if (!rc) rc = rc2;
    }
    if (reporter) progress_finish(&prog);
    // Streaming stages: the last step's update goes into the stores now, so they hold the
    // finished run whatever is done with it next.
    if (!rc) rc = pipeline_apply_pending(&p, err);
    if (rc) goto done;
    if (checkpoints && !res->stopped && (rc = save_checkpoint(&p, c, o, res->layout, total, err))) goto done;
    long window = FG_MIN(total - first_step, WINDOW);
    for (long i = 0; i < window; i++) res->final_loss += recent[(total - 1 - i) % WINDOW] / window;
    if ((rc = check_replicas_agree(&p, err))) goto done;
    if (t->replica == 0 && (rc = pipeline_evaluate(&p, &test, &res->test_loss, &res->test_acc, err)))
        goto done;
    Schedule measured;
    rc = gather_measured(&p, &measured, err);
    if (!rc && trace_path && t->stage == 0 && t->replica == 0) rc = write_trace(&p.sched, &measured, trace_path, err);
    ScheduleStats ms = schedule_stats(&measured);
    free(measured.ops);
    if (rc) goto done;
    if (outputs && outputs->params_path && t->replica == 0 &&
        (rc = save_params(&p, outputs->params_path, err)))
        goto done;
    res->peak_rss_stage[t->stage] = (double)peak_rss_bytes();
    res->stash_bytes_stage[t->stage] = pipeline_stash_bytes(&p);
    if ((rc = t->allreduce_sum(t, res->peak_rss_stage, M, err))) goto done;
    if ((rc = t->allreduce_sum(t, res->stash_bytes_stage, M, err))) goto done;
    res->bubble_measured = ms.bubble_fraction;
    res->bubble_used_measured = ms.bubble_used_by_b;
    size_t n_times = (size_t)FG_MIN(total - first_step, (long)TIMES);
    qsort(step_times, n_times, sizeof(double), compare_doubles);
    ScheduleStats st = schedule_stats(&p.sched);
    res->steps = total;
    res->train_seconds = train_time;
    res->samples_per_s = train_time > 0 ? (double)(total - first_step) * batch / train_time : 0.0;
    res->step_seconds = step_times[n_times / 2];
    res->n_params = m.n_params;
    res->stages = M;
    res->n_sel = p.n_sel;
    res->bubble_planned = st.bubble_fraction;
    res->bubble_used_by_b = st.bubble_used_by_b;
    res->peak_rss_bytes = peak_rss_bytes();
done:
    fg_free(step_times);
    if (loss_csv) fclose(loss_csv);
    FgError close_err = {0};
    // The stores' last writes can fail at close (a full disk): that fails the run too.
    if (pipeline_free(&p, rc ? &close_err : err) && !rc) rc = err->code ? err->code : FG_ERR_INPUT;
    dataset_free(&train);
    dataset_free(&test);
    return rc;
}

int train_write_summary(const Config *c, const TrainResult *r, const char *path, FgError *err) {
    static const char *const modes[] = {"bp", "fg", "fg+bp"};
    FILE *f = fopen(path, "w");
    if (!f) return fg_fail(err, FG_ERR_INPUT, "--summary-json %s: %s", path, strerror(errno));
    fprintf(f, "{\"mode\": \"%s\", \"tangents\": %d, \"stages\": %d, \"layout\": [", modes[c->mode],
            c->mode == MODE_BP ? 0 : c->tangents, r->stages);
    for (int s = 0; s <= r->stages; s++) fprintf(f, "%s%d", s ? ", " : "", r->layout[s]);
    fprintf(f,
            "], \"steps\": %ld, \"micro_batch\": %d, \"micro_batches\": %d, \"n_sel\": %d, "
            "\"replicas\": %d, \"params\": %zu, \"first_loss\": %.6f, \"final_loss\": %.6f, \"test_loss\": %.6f, "
            "\"test_acc\": %.4f, \"samples_per_s\": %.1f, \"step_seconds\": %.6f, "
            "\"train_seconds\": %.3f, \"bubble_planned\": %.4f, \"bubble_used_by_b\": %.4f, "
            "\"bubble_measured\": %.4f, \"bubble_used_measured\": %.4f, \"peak_rss_bytes\": %zu, "
            "\"seed\": %u, \"peak_rss_stage\": [",
            r->steps, c->micro_batch, c->micro_batches, r->n_sel, c->replicas, r->n_params, r->first_loss,
            r->final_loss, r->test_loss, r->test_acc, r->samples_per_s, r->step_seconds,
            r->train_seconds, r->bubble_planned, r->bubble_used_by_b, r->bubble_measured,
            r->bubble_used_measured, r->peak_rss_bytes, c->seed);
    for (int s = 0; s < r->stages; s++) fprintf(f, "%s%.0f", s ? ", " : "", r->peak_rss_stage[s]);
    fprintf(f, "], \"stash_bytes_stage\": [");
    for (int s = 0; s < r->stages; s++) fprintf(f, "%s%.0f", s ? ", " : "", r->stash_bytes_stage[s]);
    fprintf(f, "]}\n");
    if (fclose(f)) return fg_fail(err, FG_ERR_INPUT, "--summary-json %s: write failed", path);
    return FG_OK;
}
