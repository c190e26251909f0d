// The step log as HDF5 (docs/log.md): one extendible, chunked 1-D dataset per quantity under
// /steps, per-stage op times under /stages, flushed every FLUSH_EVERY steps.
#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint_hdf5.h"

enum { FLUSH_EVERY = 10, N_QUANTITIES = 13, SCHEMA_VERSION = 1 };

static const char *const QUANTITIES[N_QUANTITIES] = {
    "step",         "loss",     "lr",     "estimate_norm",   "exact_norm", "cos_estimate_exact",
    "cos_fg_exact", "variance_reduction", "step_seconds", "makespan", "bubble", "bubble_used_by_b",
    "cv_beta_median"};

typedef struct {
    hid_t file, data[N_QUANTITIES], busy, bubble_used;
    hsize_t n;
    int stages;
    char *path;  // for messages
} LogCtx;

static hid_t extendible(hid_t parent, const char *name, hid_t type, int rank, const hsize_t *inner) {
    hsize_t dims[3] = {0}, maxdims[3] = {H5S_UNLIMITED}, chunk[3] = {256};
    for (int i = 1; i < rank; i++) dims[i] = maxdims[i] = chunk[i] = inner[i - 1];
    if (rank > 1) chunk[0] = 64;
    hid_t sp = H5Screate_simple(rank, dims, maxdims), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, rank, chunk);
    hid_t d = H5Dcreate2(parent, name, type, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return d;
}

// Appends one row (count values of `type` at buf) to a dataset of the given rank.
static int append_row(hid_t d, hsize_t n, int rank, const hsize_t *inner, hid_t type, const void *buf) {
    hsize_t size[3] = {n + 1}, start[3] = {n}, count[3] = {1};
    for (int i = 1; i < rank; i++) size[i] = count[i] = inner[i - 1], start[i] = 0;
    if (H5Dset_extent(d, size) < 0) return -1;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(rank, count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    herr_t rc = H5Dwrite(d, type, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0;
}

static int log_append(StepLog *log, const StepRecord *r, FgError *err) {
    LogCtx *c = log->ctx;
    double v[N_QUANTITIES] = {0, r->loss, r->lr, r->estimate_norm, r->exact_norm,
                              r->cos_estimate_exact, r->cos_fg_exact, r->variance_reduction,
                              r->step_seconds, r->makespan, r->bubble, r->bubble_used_by_b,
                              r->cv_beta_median};
    long long step = r->step;
    int bad = append_row(c->data[0], c->n, 1, NULL, H5T_NATIVE_LLONG, &step);
    for (int i = 1; i < N_QUANTITIES; i++) bad |= append_row(c->data[i], c->n, 1, NULL, H5T_NATIVE_DOUBLE, &v[i]);
    hsize_t inner[2] = {(hsize_t)c->stages, 3};
    bad |= append_row(c->busy, c->n, 3, inner, H5T_NATIVE_DOUBLE, r->busy_seconds);
    bad |= append_row(c->bubble_used, c->n, 2, inner, H5T_NATIVE_DOUBLE, r->bubble_used_stage);
    c->n++;
    if (!bad && c->n % FLUSH_EVERY == 0) bad = H5Fflush(c->file, H5F_SCOPE_GLOBAL) < 0;
    char note[96];
    return bad ? fg_fail(err, FG_ERR_INPUT, "writing step %ld to the log %s failed%s", r->step,
                         c->path, hdf5io_space_note(c->path, note, sizeof note))
               : FG_OK;
}

static int log_flush(StepLog *log, FgError *err) {
    LogCtx *c = log->ctx;
    if (c && H5Fflush(c->file, H5F_SCOPE_GLOBAL) < 0)
        return fg_fail(err, FG_ERR_INPUT, "flushing the log %s after step %lld failed", c->path,
                       (long long)c->n);
    return FG_OK;
}

static int log_close(StepLog *log, FgError *err) {
    LogCtx *c = log->ctx;
    if (!c) return FG_OK;
    for (int i = 0; i < N_QUANTITIES; i++) H5Dclose(c->data[i]);
    H5Dclose(c->busy);
    H5Dclose(c->bubble_used);
    char note[96];
    int rc = H5Fclose(c->file) < 0 ? fg_fail(err, FG_ERR_INPUT, "closing the log %s failed%s", c->path,
                                             hdf5io_space_note(c->path, note, sizeof note))
                                   : FG_OK;
    free(c->path);
    free(c);
    log->ctx = NULL;
    return rc;
}

static void attr_i64(hid_t obj, const char *name, long long v) {
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, H5T_NATIVE_LLONG, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

static void attr_f64(hid_t obj, const char *name, double v) {
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    H5Sclose(sp);
}

// A fixed 1-D dataset of n values; 1 on failure.
static int fixed(hid_t parent, const char *name, hid_t type, hsize_t n, const void *buf) {
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(parent, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int bad = d < 0 || H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    return bad;
}

// The run's plan per stage, in /stages.
static int write_plan(hid_t stages, const LogInfo *info) {
    hsize_t M = (hsize_t)info->stages;
    long long *layout = malloc((M + 1) * sizeof *layout);
    for (hsize_t s = 0; s <= M; s++) layout[s] = info->layout[s];
    int bad = fixed(stages, "layout", H5T_NATIVE_LLONG, M + 1, layout) ||
              fixed(stages, "work_ms", H5T_NATIVE_DOUBLE, M, info->work_ms) ||
              fixed(stages, "n_corr", H5T_NATIVE_DOUBLE, M, info->n_corr) ||
              fixed(stages, "lag", H5T_NATIVE_DOUBLE, M, info->lag) ||
              fixed(stages, "bubble_used_by_b_planned", H5T_NATIVE_DOUBLE, M, info->bubble_used_planned);
    free(layout);
    return bad;
}

static void attr_str(hid_t obj, const char *name, const char *s) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(s) + 1);
    hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, type, s);
    H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(type);
}

int log_hdf5_open(Storage *io, const char *path, const LogInfo *info, StepLog *out, FgError *err) {
    (void)io;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return fg_fail(err, FG_ERR_INPUT, "--log %s: cannot create the file", path);
    LogCtx *c = calloc(1, sizeof *c);
    c->file = f;
    c->stages = info->stages;
    c->path = strdup(path);
    attr_i64(f, "schema_version", SCHEMA_VERSION);
    attr_str(f, "mode", info->mode);
    attr_str(f, "estimator", info->estimator);
    attr_i64(f, "stages", info->stages);
    attr_i64(f, "micro_batches", info->micro_batches);
    attr_i64(f, "tangents", info->tangents);
    attr_str(f, "config", info->config_text ? info->config_text : "");
    attr_str(f, "layout_by", info->layout_by ? info->layout_by : "boundaries");
    attr_f64(f, "makespan_vs_fg", info->makespan_vs_fg);
    hid_t steps = H5Gcreate2(f, "steps", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t stages = H5Gcreate2(f, "stages", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int bad = steps < 0 || stages < 0;
    for (int i = 0; i < N_QUANTITIES && !bad; i++)
        bad = (c->data[i] = extendible(steps, QUANTITIES[i], i ? H5T_NATIVE_DOUBLE : H5T_NATIVE_LLONG, 1, NULL)) < 0;
    hsize_t inner[2] = {(hsize_t)info->stages, 3};
    if (!bad) bad = (c->busy = extendible(stages, "busy_seconds", H5T_NATIVE_DOUBLE, 3, inner)) < 0;
    if (!bad) bad = (c->bubble_used = extendible(stages, "bubble_used_by_b", H5T_NATIVE_DOUBLE, 2, inner)) < 0;
    if (!bad) bad = write_plan(stages, info);
    H5Gclose(steps);
    H5Gclose(stages);
    StepLog log = {c, log_append, log_flush, log_close};
    *out = log;
    if (bad) {
        H5Fclose(f);
        free(c);
        out->ctx = NULL;
        return fg_fail(err, FG_ERR_INPUT, "--log %s: creating the datasets failed", path);
    }
    return FG_OK;
}
