#include "train.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "data.h"
#include "estimator.h"
#include "model.h"
#include "optimizer.h"
#include "progress.h"
#include "stage.h"

size_t peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;  // Linux reports KiB
}

typedef struct {
    Model model;
    Stage stage;
    Dataset train, test;
    float *params, *grad, *opt_state;
    float *x, *dz, *stash, *d, *coeff;  // one micro-batch's input, loss adjoint, stash; fg scalars
    uint8_t *labels;
    size_t *order;
} Trainer;

static void trainer_free(Trainer *t) {
    stage_free(&t->stage);
    dataset_free(&t->train);
    dataset_free(&t->test);
    void *bufs[] = {t->params, t->grad, t->opt_state, t->x,     t->dz,
                    t->stash,  t->d,    t->coeff,     t->labels, t->order};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) fg_free(bufs[i]);
}

static int trainer_init(Trainer *t, const Config *c, FgError *err) {
    memset(t, 0, sizeof *t);
    int rc;
    if ((rc = model_build_mlp(&t->model, c->model, c->activation, err))) return rc;
    if ((rc = dataset_load_split(&t->train, c->data_dir, "train", err))) return rc;
    if ((rc = dataset_load_split(&t->test, c->data_dir, "t10k", err))) return rc;
    const Model *m = &t->model;
    if (t->train.features != m->in_features || t->train.classes > m->classes)
        return fg_fail(err, FG_ERR_INPUT,
                       "model: '%s' takes %d features and %d classes, but the data in %s has %d "
                       "features and %d classes",
                       c->model, m->in_features, m->classes, c->data_dir, t->train.features,
                       t->train.classes);
    size_t batch = (size_t)c->micro_batch * c->micro_batches;
    if (batch > t->train.count)
        return fg_fail(err, FG_ERR_INPUT,
                       "micro_batch x micro_batches = %zu is more than the %zu training samples",
                       batch, t->train.count);
    int K = c->mode == MODE_FG ? c->tangents : 0;
    if ((rc = stage_init(&t->stage, m, 0, m->n_layers, c->micro_batch, K, err))) return rc;
    t->params = fg_alloc_floats(m->n_params);
    t->grad = fg_alloc_floats(m->n_params);
    t->opt_state = fg_alloc_floats(m->n_params * optimizer_state_buffers(c->optimizer));
    t->x = fg_alloc_floats((size_t)c->micro_batch * m->in_features);
    t->labels = fg_alloc_bytes((size_t)c->micro_batch);
    t->dz = fg_alloc_floats((size_t)c->micro_batch * m->classes);
    if (c->mode == MODE_BP) t->stash = fg_alloc_floats(stage_stash_floats(&t->stage, c->micro_batch));
    t->d = fg_alloc_floats((size_t)c->micro_batches * FG_MAX(K, 1));
    t->coeff = fg_alloc_floats((size_t)c->micro_batches * FG_MAX(K, 1));
    t->order = fg_alloc_bytes(t->train.count * sizeof(size_t));
    model_init_params(m, t->params, c->seed);
    return FG_OK;
}

// Mean loss and accuracy over the test set, in micro-batch-sized chunks.
static void evaluate(Trainer *t, double *loss, double *acc) {
    const Dataset *ds = &t->test;
    int rows = t->stage.max_rows, C = t->model.classes;
    double total = 0.0;
    long hits = 0;
    for (size_t first = 0; first < ds->count; first += rows) {
        int n = (int)FG_MIN((size_t)rows, ds->count - first);
        const float *logits;
        stage_forward(&t->stage, t->params, NULL, ds->x + first * ds->features, NULL, n, NULL,
                      &logits, NULL);
        int correct;
        total += (double)loss_forward(logits, ds->labels + first, n, C, &correct) * n;
        hits += correct;
    }
    *loss = total / (double)ds->count;
    *acc = (double)hits / (double)ds->count;
}

// One optimizer step's gradient, left in t->grad; returns the mean micro-batch loss.
static double step_gradient(Trainer *t, const Config *c, long step, size_t sample0) {
    const Model *m = &t->model;
    int B = c->micro_batch, N = c->micro_batches, K = t->stage.tangents, C = m->classes;
    double loss = 0.0;
    memset(t->grad, 0, m->n_params * sizeof(float));
    TangentKey key = {.seed = c->seed, .stream = STREAM_TANGENT, .step = (uint32_t)step};
    for (int b = 0; b < N; b++) {
        dataset_gather(&t->train, t->order, sample0 + (size_t)b * B, B, t->x, t->labels);
        const float *logits, *ldot;
        if (c->mode == MODE_FG) {
            key.microbatch = (uint32_t)b;
            stage_forward(&t->stage, t->params, &key, t->x, NULL, B, NULL, &logits, &ldot);
            loss += loss_jvp(logits, ldot, t->labels, B, C, K, t->d + b * K);
        } else {
            stage_forward(&t->stage, t->params, NULL, t->x, NULL, B, t->stash, &logits, NULL);
            loss += loss_backward(logits, t->labels, B, C, t->dz);
            for (int i = 0; i < B * C; i++) t->dz[i] /= (float)N;  // mean over micro-batches
            stage_backward(&t->stage, t->params, t->stash, t->dz, NULL, t->grad, B);
        }
    }
    if (c->mode == MODE_FG) {
        Estimator est = {EST_FG, N, K};
        float base;
        estimator_coefficients(&est, t->d, NULL, t->coeff, &base);
        key.microbatch = 0;
        stage_add_tangents(&t->stage, key, N, t->coeff, t->grad);
    }
    return loss / N;
}

static FILE *open_in_dir(const char *dir, const char *name, FgError *err) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) fg_fail(err, FG_ERR_INPUT, "cannot write %s: %s", path, strerror(errno));
    return f;
}

int train_run(const Config *c, const char *out_dir, TrainResult *res, FgError *err) {
    memset(res, 0, sizeof *res);
    FILE *loss_csv = NULL;
    if (out_dir) {
        if (mkdir(out_dir, 0755) && errno != EEXIST)
            return fg_fail(err, FG_ERR_INPUT, "--out %s: %s", out_dir, strerror(errno));
        FILE *cf = open_in_dir(out_dir, "config.txt", err);
        if (!cf) return FG_ERR_INPUT;
        config_write(c, cf);
        fclose(cf);
        if (!(loss_csv = open_in_dir(out_dir, "loss.csv", err))) return FG_ERR_INPUT;
        fprintf(loss_csv, "step,loss,lr\n");
    }
    Trainer t;
    int rc = trainer_init(&t, c, err);
    if (rc) {
        trainer_free(&t);
        if (loss_csv) fclose(loss_csv);
        return rc;
    }
    size_t batch = (size_t)c->micro_batch * c->micro_batches;
    long per_epoch = (long)(t.train.count / batch);
    long total = c->steps ? c->steps : (long)c->epochs * per_epoch;
    OptimizerConfig oc = config_optimizer(c);
    Progress prog;
    progress_init(&prog, stderr, total, c->print_every);
    enum { WINDOW = 20 };
    double recent[WINDOW], train_time = 0.0;
    for (long step = 0; step < total; step++) {
        double t0 = wall_seconds();
        long epoch = step / per_epoch;
        if (step % per_epoch == 0) dataset_shuffle(t.order, t.train.count, c->seed, (uint32_t)epoch);
        size_t sample0 = (size_t)(step % per_epoch) * batch;
        double loss = step_gradient(&t, c, step, sample0);
        double lr = lr_at(&oc, step, total);
        float clip = optimizer_clip_scale(&oc, oc.clip_norm > 0 ? squared_norm(t.grad, t.model.n_params) : 0.0);
        optimizer_step(&oc, step, lr, t.params, t.grad, clip, t.opt_state, t.model.n_params);
        train_time += wall_seconds() - t0;

        recent[step % WINDOW] = loss;
        if (step + 1 == FG_MIN(total, WINDOW)) {
            for (int i = 0; i <= step; i++) res->first_loss += recent[i] / (double)(step + 1);
        }
        if (loss_csv) fprintf(loss_csv, "%ld,%.6f,%.6g\n", step, loss, lr);
        progress_step(&prog, step, loss, lr, (long)((step + 1) * batch));
        if (!isfinite(loss)) {
            progress_finish(&prog);
            trainer_free(&t);
            if (loss_csv) fclose(loss_csv);
            return fg_fail(err, FG_ERR_INPUT, "loss is %f at step %ld: lower lr (now %g)", loss,
                           step, c->lr);
        }
        if (c->eval_every && (step + 1) % c->eval_every == 0 && step + 1 < total) {
            double tl, ta;
            evaluate(&t, &tl, &ta);
            fprintf(stderr, "%seval step %ld: test loss %.4f  test accuracy %.4f\n",
                    prog.is_tty ? "\n" : "", step + 1, tl, ta);
        }
    }
    progress_finish(&prog);
    long window = FG_MIN(total, WINDOW);
    for (long i = 0; i < window; i++) res->final_loss += recent[(total - 1 - i) % WINDOW] / window;
    evaluate(&t, &res->test_loss, &res->test_acc);
    res->steps = total;
    res->train_seconds = train_time;
    res->samples_per_s = train_time > 0 ? (double)total * batch / train_time : 0.0;
    res->n_params = t.model.n_params;
    res->peak_rss_bytes = peak_rss_bytes();
    trainer_free(&t);
    if (loss_csv) fclose(loss_csv);
    return FG_OK;
}

int train_write_summary(const Config *c, const TrainResult *r, const char *path, FgError *err) {
    FILE *f = fopen(path, "w");
    if (!f) return fg_fail(err, FG_ERR_INPUT, "--summary-json %s: %s", path, strerror(errno));
    fprintf(f,
            "{\"mode\": \"%s\", \"tangents\": %d, \"steps\": %ld, \"micro_batch\": %d, "
            "\"micro_batches\": %d, \"params\": %zu, \"first_loss\": %.6f, \"final_loss\": %.6f, "
            "\"test_loss\": %.6f, \"test_acc\": %.4f, \"samples_per_s\": %.1f, "
            "\"train_seconds\": %.3f, \"peak_rss_bytes\": %zu, \"seed\": %u}\n",
            c->mode == MODE_FG ? "fg" : "bp", c->mode == MODE_FG ? c->tangents : 0, r->steps,
            c->micro_batch, c->micro_batches, r->n_params, r->first_loss, r->final_loss,
            r->test_loss, r->test_acc, r->samples_per_s, r->train_seconds, r->peak_rss_bytes,
            c->seed);
    if (fclose(f)) return fg_fail(err, FG_ERR_INPUT, "--summary-json %s: write failed", path);
    return FG_OK;
}
