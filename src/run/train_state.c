// A stage's saved state: HDF5 checkpoints through Storage, --save-params, and the check that
// replicas hold the same weights. All of it goes through pipeline_visit_layers, so a stage
// that streams its layers passes each through memory once.
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "progress.h"
#include "train_internal.h"

// The stage's share of a checkpoint: parameters, optimizer state, the estimator's reference
// (fg+bp's last exact gradient, cv and guided) and its scale's sums (cv_scale.h); everything
// else follows from the config, the seed and the step. The tensors come from
// pipeline_visit_layers (out of core: one slot at a time).
typedef struct {
    Pipeline *p;       // NULL: a check before the run touches anything (state_check_input)
    const Config *cfg;
    CheckpointState st;
    const char *path;  // a load's
    long total;        // a load's: the run's steps
    int weights_only;  // a load of the parameters alone (--init-from): no seed or step checks
} StageCheckpoint;

static int stage_visit_layers(void *source, int writable, LayerVisitor visit, void *arg, FgError *err) {
    StageCheckpoint *sc = source;
    const Config *c = sc->cfg;
    if (sc->weights_only) return sc->p ? pipeline_visit_layers(sc->p, writable, 0, visit, arg, err) : FG_OK;
    // Checked before the state is overwritten (an out-of-core stage's store).
    if (writable && sc->st.seed != c->training.seed)
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s was written with seed %u, the config has seed %u",
                       sc->path, sc->st.seed, c->training.seed);
    if (writable && sc->st.step >= sc->total)
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s is at step %ld; the run has only %ld steps",
                       sc->path, sc->st.step, sc->total);
    return sc->p ? pipeline_visit_layers(sc->p, writable, sc->st.step, visit, arg, err) : FG_OK;
}

// What a user of the weights needs besides them (docs/checkpoints.md).
static ModelCard model_card(const Config *c, const Model *m) {
    ModelCard card = {.orientation = "linear weights are [out, in]: y = x W^T + b"};
    int gpt = config_is_language(c);
    card.model_kind = gpt ? c->net.model : "mlp";  // gpt or llama
    // vocab: the token ids; padded_vocab: the rows of wte and the head (the rest are padding).
    const char *names[] = {"vocab", "padded_vocab", "ctx", "n_layer", "n_embd", "n_head"};
    double gpt_values[] = {m->classes, m->logit_stride, c->net.ctx, c->net.n_layer, c->net.n_embd,
                           c->net.n_head};
    const char *mlp_names[] = {"input_features", "classes", "input_mean", "input_std"};
    double mlp_values[] = {m->in_features, m->classes, DATA_PIXEL_MEAN, DATA_PIXEL_STD};
    int n = gpt ? 6 : 4;
    for (int i = 0; i < n; i++) {
        card.number_names[i] = gpt ? names[i] : mlp_names[i];
        card.numbers[i] = gpt ? gpt_values[i] : mlp_values[i];
    }
    card.n_numbers = n;
    return card;
}

// The stage's layers [first, last) of model m; p NULL: a check, which reads no tensor and no
// estimator sums.
static void checkpoint_state(StageCheckpoint *sc, Pipeline *p, const Config *c, const Model *m,
                             int first, int last, int stages, const int *layout,
                             const char *config_text) {
    *sc = (StageCheckpoint){.p = p, .cfg = c};
    CheckpointState *st = &sc->st;
    *st = (CheckpointState){.model = m, .first = first, .last = last,
                            .visit_layers = stage_visit_layers, .source = sc, .seed = c->training.seed,
                            .config_text = config_text, .stages = stages, .layout = layout,
                            .card = model_card(c, m)};
    st->buffers[st->n_buffers++] = "params";
    if (c->optim.optimizer == OPT_ADAM) {
        st->buffers[st->n_buffers++] = "optimizer/m";
        st->buffers[st->n_buffers++] = "optimizer/v";
    } else {
        st->buffers[st->n_buffers++] = "optimizer/velocity";
    }
    if (layer_needs(c).ref) st->buffers[st->n_buffers++] = "estimator/reference";
    if (p) st->cv_sums = p->upd.cv.sums, st->n_cv_sums = 2 * p->upd.cv.n_layers;
}

static void pipeline_checkpoint(StageCheckpoint *sc, Pipeline *p, const int *layout, const char *text) {
    checkpoint_state(sc, p, p->cfg, p->model, p->stage.first, p->stage.last, p->tr->stages, layout, text);
}

// A checkpoint of another model is refused by the key that differs, before any tensor is read:
// shapes alone miss some (an MLP's activation), and a run must never go on silently changed.
static int check_same_model(const Config *now, Storage *io, const char *path, FgError *err) {
    char *text = NULL, stored_value[512], now_value[512];
    int rc = io->load_config(io, path, &text, err);
    Config stored;
    config_defaults(&stored);
    if (!rc) rc = config_load_text(&stored, text, path, err);
    free(text);
    const char *key = rc ? NULL : config_model_mismatch(&stored, now, stored_value, now_value,
                                                        sizeof stored_value);
    if (key && strcmp(key, "lora_rank") == 0 && now->net.lora_rank == 0)
        rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s holds LoRA adapters (lora_rank = %d, "
                     "lora_alpha = %g, lora_targets = %s) that this run, without lora_rank, would "
                     "drop: set those keys to go on with them, or merge them into the base first "
                     "(tools/fgpipe-convert export)", path, stored.net.lora_rank,
                     stored.net.lora_alpha, stored.net.lora_targets);
    else if (key)
        rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s is of another model: it has %s = %s, the "
                     "config %s = %s", path, key, stored_value, key, now_value);
    return rc;
}

int state_load_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout, long total,
                          FgError *err) {
    int rc = check_same_model(p->cfg, io, path, err);
    if (rc) return rc;
    StageCheckpoint sc;
    pipeline_checkpoint(&sc, p, layout, NULL);
    sc.path = path, sc.total = total;
    return io->load(io, &sc.st, path, err);
}

// --init-from: the parameters alone, at any seed; a base model's checkpoint under new LoRA
// adapters leaves them at their initial values.
static void weights_only(StageCheckpoint *sc) {
    sc->weights_only = 1, sc->st.n_buffers = 1;  // "params"
    sc->st.n_cv_sums = 0;  // the weights alone: the estimator starts without history
    sc->st.adapters_optional = 1;
}

int state_load_weights(Pipeline *p, Storage *io, const char *path, const int *layout, FgError *err) {
    int rc = check_same_model(p->cfg, io, path, err);
    if (rc) return rc;
    StageCheckpoint sc;
    pipeline_checkpoint(&sc, p, layout, NULL);
    sc.path = path;
    weights_only(&sc);
    return io->load(io, &sc.st, path, err);
}

int state_check_input(const Config *c, const Model *m, Storage *io, const char *path, int resume,
                      const int *layout, int stage, int stages, long total, FgError *err) {
    int rc = check_same_model(c, io, path, err);
    if (rc) return rc;
    StageCheckpoint sc;
    checkpoint_state(&sc, NULL, c, m, layout[stage], layout[stage + 1], stages, layout, NULL);
    sc.path = path, sc.total = total;
    if (!resume) weights_only(&sc);
    return io->load(io, &sc.st, path, err);
}

// Replicas hold the same weights: replica 0's pipeline writes, the others go on at once.
// Counts the non-finite values of a layer's parameters and optimizer state.
typedef struct {
    int n_buffers;
    double count;
} NonFinite;

static int count_non_finite(void *arg, const Layer *L, size_t first, size_t count, float *const *bufs,
                            FgError *err) {
    (void)first, (void)err;
    NonFinite *nf = arg;
    for (int b = 0; b < (L->frozen ? 1 : nf->n_buffers); b++)  // a frozen layer: parameters alone
        for (size_t i = 0; i < count; i++) nf->count += !isfinite(bufs[b][i]);
    return FG_OK;
}

// A checkpoint full of NaN or Inf must never replace the last good one (a run that diverged
// after its last finite loss): every stage counts, all agree, and none writes.
static int check_finite_state(Pipeline *p, const char *path, long next_step, FgError *err) {
    NonFinite nf = {1 + optimizer_state_buffers((OptimizerKind)p->cfg->optim.optimizer), 0.0};
    int rc = pipeline_visit_layers(p, 0, 0, count_non_finite, &nf, err);
    if (!rc) rc = p->tr->allreduce_sum(p->tr, &nf.count, 1, err);
    if (!rc && nf.count > 0)
        rc = fg_fail(err, FG_ERR_INPUT, "after step %ld, %.0f parameters or optimizer values are "
                     "NaN or Inf (the run diverged: lower lr, or set clip_norm): checkpoint %s "
                     "not written, the last one saved there is kept", next_step, nf.count, path);
    return rc;
}

static int save_params(Pipeline *p, const char *path, FgError *err);

static int save_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout,
                           long next_step, FgError *err) {
    int rc = check_finite_state(p, path, next_step, err);
    if (rc) return rc;
    char *text = report_config_text(p->cfg);
    StageCheckpoint sc;
    pipeline_checkpoint(&sc, p, layout, text);
    sc.st.step = next_step;
    double t0 = wall_seconds();
    rc = io->save(io, &sc.st, path, err);
    double seconds = wall_seconds() - t0;
    free(text);
    struct stat file;  // the file's own size: frozen layers keep no state, a BF16 base 2 bytes a value
    double mib = stat(path, &file) ? 0.0 : (double)file.st_size / 1048576.0;
    if (!rc && p->tr->stage == 0)
        fprintf(stderr, "%sfgpipe: checkpoint at step %ld written to %s (%.1f MiB in %.3f s, %.0f MiB/s)\n",
                isatty(2) ? "\n" : "", next_step, path, mib, seconds, mib / seconds);
    return rc;
}

int state_save_checkpoint(Pipeline *p, Storage *io, const char *path, const int *layout, long next_step,
                          FgError *err) {
    int rc = pipeline_solo(p, 1, err);
    if (!rc && p->tr->replica == 0) rc = save_checkpoint(p, io, path, layout, next_step, err);
    int rc2 = pipeline_solo(p, 0, rc ? &(FgError){0} : err);
    return rc ? rc : rc2;
}

int state_save_params(Pipeline *p, const char *path, FgError *err) {
    int rc = pipeline_solo(p, 1, err);
    if (!rc && p->tr->replica == 0) rc = save_params(p, path, err);
    int rc2 = pipeline_solo(p, 0, rc ? &(FgError){0} : err);
    return rc ? rc : rc2;
}

// FNV-1a over the parameters, layer after layer (one slot at a time out of core); the ranges
// come in order, so a layer in row blocks hashes as it would whole.
static int hash_layer(void *arg, const Layer *L, size_t first, size_t count, float *const *bufs,
                      FgError *err) {
    (void)L, (void)first, (void)err;
    uint64_t *h = arg;
    const unsigned char *b = (const unsigned char *)bufs[0];
    for (size_t i = 0; i < count * sizeof(float); i++) *h = (*h ^ b[i]) * 1099511628211ull;
    return FG_OK;
}

// Replicas apply the same summed gradient and so hold bit-identical weights; one that drifted
// (a sum that gave replicas different bits, a replica that missed a step) is an error, not a
// silent fork. Every rank contributes 52 bits of its stage's hash (exact in a double); one sum
// over the grid gathers them.
int state_check_replicas_agree(Pipeline *p, FgError *err) {
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

typedef struct {
    int fd;
    const char *path;
} ParamsFile;

static int write_layer_params(void *arg, const Layer *L, size_t first, size_t count, float *const *bufs,
                              FgError *err) {
    ParamsFile *f = arg;
    size_t bytes = count * sizeof(float);
    if (pwrite(f->fd, bufs[0], bytes, (off_t)((L->param_offset + first) * sizeof(float))) != (ssize_t)bytes)
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

