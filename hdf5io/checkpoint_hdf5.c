// File layout (format version 1):
//   /<buffer>/<layer>/<tensor>   float32, [rows, cols] or [rows]; buffers: params, optimizer/...
//   attributes of /: format_version, step (the next step to run), seed, stages, layout
//                    (first layer of each stage, then n_layers), model, config (the resolved
//                    config text), cv_scale_sums (cv_scale = auto: the estimator's running sums)
#include "checkpoint_hdf5.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bf16.h"

typedef struct {
    MPI_Comm comm;
    int rank;
} Ctx;

static int set_attr_i64(hid_t obj, const char *name, long long v) {
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, H5T_NATIVE_LLONG, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_LLONG, &v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc < 0;
}

// A 1-D attribute of n values of `type` (H5T_NATIVE_INT, H5T_NATIVE_DOUBLE) at v.
static int set_attr_array(hid_t obj, const char *name, hid_t type, const void *v, int n) {
    hsize_t dim = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &dim, NULL);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, type, v);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc < 0;
}

static int set_attr_str(hid_t obj, const char *name, const char *s) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, strlen(s) + 1);
    hid_t sp = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, type, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = a < 0 ? -1 : H5Awrite(a, type, s);
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    H5Tclose(type);
    return rc < 0;
}

static int get_attr_i64(hid_t obj, const char *name, long long *v) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t rc = H5Aread(a, H5T_NATIVE_LLONG, v);
    H5Aclose(a);
    return rc < 0 ? -1 : 0;
}

// The n doubles of attribute `name`: 0, or -1 when it holds another number of values or the
// read fails; 1 when there is no such attribute (v untouched).
static int get_attr_doubles(hid_t obj, const char *name, double *v, int n) {
    if (H5Aexists(obj, name) <= 0) return 1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), sp = H5Aget_space(a);
    hssize_t have = H5Sget_simple_extent_npoints(sp);
    herr_t rc = have == n ? H5Aread(a, H5T_NATIVE_DOUBLE, v) : -1;
    H5Sclose(sp);
    H5Aclose(a);
    return rc < 0 ? -1 : 0;
}

// "<buffer>/<group>/<tensor>" from the tensor's name "<group>.<tensor>", split at its last
// dot: params/fc1/weight, params/h.0.attn.c_attn/bias, params/wpe/weight (docs/checkpoints.md).
static void dataset_name(const char *buffer, const TensorView *tv, char *out,
                         size_t size) {
    const char *dot = strrchr(tv->name, '.');
    int group = dot ? (int)(dot - tv->name) : (int)strlen(tv->name);
    snprintf(out, size, "%s/%.*s/%s", buffer, group, tv->name, dot ? dot + 1 : "value");
}

static const char *shape_str(int rank, const hsize_t *dims, char *buf, size_t size) {
    if (rank == 2) snprintf(buf, size, "[%llu, %llu]", (unsigned long long)dims[0], (unsigned long long)dims[1]);
    else if (rank == 1) snprintf(buf, size, "[%llu]", (unsigned long long)dims[0]);
    else snprintf(buf, size, "(rank %d)", rank);
    return buf;
}

const char *hdf5io_space_note(const char *path, char *buf, size_t size) {
    char *copy = strdup(path);
    struct statvfs fs;
    if (statvfs(dirname(copy), &fs) == 0)
        snprintf(buf, size, " (its file system has %.1f MiB free%s)",
                 (double)fs.f_bavail * (double)fs.f_frsize / 1048576.0,
                 fs.f_bavail * fs.f_frsize < (1u << 20) ? ": disk full" : "");
    else
        snprintf(buf, size, "%s", "");
    free(copy);
    return buf;
}

// BF16 as an HDF5 float type (sign bit 15, 8 exponent bits from bit 7, 7 mantissa bits, bias
// 127): h5dump prints its values; fgpipe reads its bits and widens them itself (exact, fast).
static hid_t bf16_type(void) {
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(t, 15, 7, 8, 0, 7);
    H5Tset_precision(t, 16);
    H5Tset_size(t, 2);
    H5Tset_ebias(t, 127);
    return t;
}

static int is_bf16(hid_t d) {
    hid_t type = H5Dget_type(d);
    size_t spos, epos, esize, mpos, msize;
    int yes = H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == 2 &&
              H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 && esize == 8 &&
              msize == 7 && H5Tget_ebias(type) == 127;
    H5Tclose(type);
    return yes;
}

static int tensor_rank(const TensorView *tv, hsize_t dims[2]) {
    dims[0] = (hsize_t)tv->rows;
    dims[1] = (hsize_t)tv->cols;
    return tv->cols == 1 ? 1 : 2;
}

// The open datasets of a stage's tensors, [buffer][tensor] (-1: another stage's), and the
// transfer of one layer's tensors between them and the layer's buffers.
typedef struct {
    const CheckpointState *st;
    const char *path;
    int load;
    hid_t *dsets;
} Tensors;

// Rows [row, row + rows) of a tensor between its dataset d and data: the whole dataset, or a
// hyperslab of it (a row block of a token table), so a layer in blocks is written and read a
// block at a time into the same file as a whole one.
// A BF16 dataset is read as its own bits into data's first half, then widened in place; written
// from its bits, narrowed in place (exact: a BF16 base's values are BF16's) and widened back after:
// HDF5's own float-to-BF16 conversion ran at about 7 M values a second (19 minutes for an 8B base).
static herr_t transfer_rows(hid_t d, const TensorView *tv, int load, size_t row, size_t rows, float *data) {
    int bf16 = is_bf16(d);
    const size_t n = rows * (size_t)tv->cols;
    hid_t type = bf16 ? bf16_type() : H5T_NATIVE_FLOAT;
    hsize_t dims[2], start[2] = {row, 0}, count[2] = {rows, (hsize_t)tv->cols};
    int whole = row == 0 && rows == (size_t)tv->rows;
    hid_t file = whole ? H5S_ALL : H5Dget_space(d);
    hid_t mem = whole ? H5S_ALL : H5Screate_simple(tensor_rank(tv, dims), count, NULL);
    herr_t h = whole ? 0 : H5Sselect_hyperslab(file, H5S_SELECT_SET, start, NULL, count, NULL);
    if (!load && bf16) bf16_narrow(data, (uint16_t *)data, n);  // ascending: reads stay ahead
    if (h >= 0)
        h = load ? H5Dread(d, type, mem, file, H5P_DEFAULT, data) : H5Dwrite(d, type, mem, file, H5P_DEFAULT, data);
    if (bf16 && (h >= 0 || !load)) bf16_widen_in_place(data, n);
    if (!whole) H5Sclose(mem), H5Sclose(file);
    if (bf16) H5Tclose(type);
    return h;
}

// Floats [first, first + count) of layer L (LayerVisitor): the rows of each of its tensors that
// the range covers, whole rows (a row block starts and ends at rows of every tensor it holds).
static int transfer_layer(void *arg, const Layer *L, size_t first, size_t count, float *const *bufs,
                          FgError *err) {
    Tensors *ts = arg;
    const Model *m = ts->st->model;
    for (int b = 0; b < ts->st->n_buffers; b++)
        for (int t = 0; t < m->n_tensors; t++) {
            const TensorView *tv = &m->tensors[t];
            hid_t d = ts->dsets[b * m->n_tensors + t];
            if (tv->layer != L->index || d < 0) continue;  // d < 0: an adapter the checkpoint lacks
            size_t at = tv->offset - L->param_offset, cols = (size_t)tv->cols;
            size_t lo = FG_MAX(at, first), hi = FG_MIN(at + (size_t)tv->rows * cols, first + count);
            if (lo >= hi) continue;
            if ((lo - at) % cols || (hi - lo) % cols)
                return fg_fail(err, FG_ERR_INTERNAL, "checkpoint %s: floats [%zu, %zu) of layer %s "
                               "cut a row of %s", ts->path, first, first + count, L->name, tv->name);
            float *data = bufs[b] + (lo - first);
            if (transfer_rows(d, tv, ts->load, (lo - at) / cols, (hi - lo) / cols, data) >= 0) continue;
            char name[256], note[96];
            dataset_name(ts->st->buffers[b], tv, name, sizeof name);
            return fg_fail(err, FG_ERR_INPUT, "checkpoint %s: %s %s failed%s", ts->path,
                           ts->load ? "reading" : "writing", name,
                           ts->load ? " (truncated file?)" : hdf5io_space_note(ts->path, note, sizeof note));
        }
    return FG_OK;
}

// HDF5 would convert any numeric type on read: an int32 or float64 tensor is someone else's
// file, refused by name rather than silently rounded.
static int check_float32(hid_t d, const char *path, const char *name, FgError *err) {
    hid_t type = H5Dget_type(d);
    int ok = (H5Tget_class(type) == H5T_FLOAT && H5Tget_size(type) == sizeof(float)) || is_bf16(d);
    const char *kind = H5Tget_class(type) == H5T_INTEGER ? "integers" :
                       H5Tget_class(type) == H5T_FLOAT ? "floats" : "another type";
    size_t bytes = H5Tget_size(type);
    H5Tclose(type);
    if (ok) return FG_OK;
    return fg_fail(err, FG_ERR_INPUT, "checkpoint %s: %s holds %zu-byte %s; fgpipe stores float32 "
                   "(and bfloat16, a frozen base's)",
                   path, name, bytes, kind);
}

static Tensors tensors_new(const CheckpointState *st, const char *path, int load) {
    size_t n = (size_t)st->n_buffers * st->model->n_tensors;
    Tensors ts = {st, path, load, malloc(n * sizeof(hid_t))};
    for (size_t i = 0; i < n; i++) ts.dsets[i] = -1;
    return ts;
}

static int write_card(hid_t f, const ModelCard *card) {
    int bad = 0;
    if (card->model_kind) bad |= set_attr_str(f, "model_kind", card->model_kind);
    if (card->orientation) bad |= set_attr_str(f, "weight_orientation", card->orientation);
    for (int i = 0; i < card->n_numbers; i++) {
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, card->number_names[i], H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT);
        bad |= a < 0 || H5Awrite(a, H5T_NATIVE_DOUBLE, &card->numbers[i]) < 0;
        if (a >= 0) H5Aclose(a);
        H5Sclose(sp);
    }
    return bad;
}

static void tensors_close(Tensors *ts) {
    size_t n = (size_t)ts->st->n_buffers * ts->st->model->n_tensors;
    for (size_t i = 0; i < n; i++)
        if (ts->dsets[i] >= 0) H5Dclose(ts->dsets[i]);
    free(ts->dsets);
}

static int own_tensor(const CheckpointState *st, const TensorView *tv) {
    return tv->layer >= st->first && tv->layer < st->last;
}

// Every rank creates every dataset (HDF5 metadata operations are collective), then writes the
// tensors of its own layers as the stage hands them over (independent I/O).
static int write_file(const CheckpointState *st, const char *path, hid_t f, FgError *err) {
    const Model *m = st->model;
    if (set_attr_i64(f, "format_version", CHECKPOINT_FORMAT_VERSION) ||
        set_attr_i64(f, "step", st->step) || set_attr_i64(f, "seed", st->seed) ||
        set_attr_i64(f, "stages", st->stages) ||
        set_attr_array(f, "layout", H5T_NATIVE_INT, st->layout, st->stages + 1) ||
        set_attr_str(f, "config", st->config_text ? st->config_text : "") || write_card(f, &st->card) ||
        (st->n_cv_sums > 0 && set_attr_array(f, "cv_scale_sums", H5T_NATIVE_DOUBLE, st->cv_sums, st->n_cv_sums)))
        return fg_fail(err, FG_ERR_INPUT, "writing the checkpoint's attributes failed");
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    // Parallel HDF5 allocates datasets at creation and would write fill values into them
    // first: every byte is written by us anyway, so that would double the bytes written.
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    Tensors ts = tensors_new(st, path, 0);
    int rc = FG_OK;
    // Every rank makes every collective call, failed or not: a rank that stopped early would
    // leave the others waiting in a collective for ever (a full disk hung the job that way).
    for (int b = 0; b < st->n_buffers; b++)
        for (int t = 0; t < m->n_tensors; t++) {
            const TensorView *tv = &m->tensors[t];
            if (b > 0 && m->layers[tv->layer].frozen) continue;  // parameters alone (below)
            char name[256];
            dataset_name(st->buffers[b], tv, name, sizeof name);
            hsize_t dims[2];
            hid_t sp = H5Screate_simple(tensor_rank(tv, dims), dims, NULL);
            // A frozen base imported in BF16 stays BF16 (its values are BF16's: HDF5's
            // conversion on write is exact).
            int bf16 = b == 0 && m->layers[tv->layer].stored_bf16;
            hid_t type = bf16 ? bf16_type() : H5T_NATIVE_FLOAT;
            hid_t d = H5Dcreate2(f, name, type, sp, lcpl, dcpl, H5P_DEFAULT);
            if (bf16) H5Tclose(type);
            H5Sclose(sp);
            char note[96];
            if (d < 0 && !rc)
                rc = fg_fail(err, FG_ERR_INPUT, "creating dataset %s failed%s", name,
                             hdf5io_space_note(path, note, sizeof note));
            else if (own_tensor(st, tv)) ts.dsets[b * m->n_tensors + t] = d;
            else H5Dclose(d);
        }
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    if (!rc) rc = st->visit_layers(st->source, 0, transfer_layer, &ts, err);
    tensors_close(&ts);
    return rc;
}

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

static int h5_save(Storage *io, const CheckpointState *st, const char *path, FgError *err) {
    Ctx *c = io->ctx;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, c->comm, MPI_INFO_NULL);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int rc = f < 0 ? fg_fail(err, FG_ERR_INPUT, "cannot create checkpoint %s: %s", tmp,
                             errno ? strerror(errno) : "HDF5 error")
                   : write_file(st, path, f, err);
    if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = fg_fail(err, FG_ERR_INPUT, "closing %s failed", tmp);
    // All ranks agree on the outcome before rank 0 publishes the file.
    int bad = rc != FG_OK, any_bad = 0;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, c->comm);
    if (any_bad) {
        if (c->rank == 0) unlink(tmp);
        return rc ? rc : fg_fail(err, FG_ERR_INPUT, "checkpoint %s: another stage failed to write", path);
    }
    if (c->rank == 0) {
        // Data on disk first, then the name: a crash at any point leaves the old file whole.
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", path);
        if (fsync_path(tmp) || rename(tmp, path) || fsync_path(dirname(dir))) {
            rc = fg_fail(err, FG_ERR_INPUT, "publishing checkpoint %s: %s", path, strerror(errno));
            unlink(tmp);  // the old file, if any, is whole; the new one never became it
        }
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, c->comm);
    if (rc && c->rank != 0) fg_fail(err, rc, "checkpoint %s: rank 0 could not publish it", path);
    return rc;
}

// A checkpoint opened for reading; < 0 with err naming the cause (missing, a directory, not
// HDF5 or cut short).
static hid_t open_checkpoint(const char *path, FgError *err) {
    struct stat sb;
    if (stat(path, &sb) || access(path, R_OK))
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s: %s", path, strerror(errno)), -1;
    if (S_ISDIR(sb.st_mode)) {
        char inside[4096 + 16];
        snprintf(inside, sizeof inside, "%s/checkpoint.h5", path);
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s is a directory, not a checkpoint file%s%s",
                       path, access(inside, F_OK) ? "" : ": did you mean ", access(inside, F_OK) ? "" : inside), -1;
    }
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        fg_fail(err, FG_ERR_INPUT, "checkpoint %s: not an HDF5 file, or truncated (%lld bytes)",
                path, (long long)sb.st_size);
    return f;
}

static int h5_load(Storage *io, CheckpointState *st, const char *path, FgError *err) {
    (void)io;
    const Model *m = st->model;
    hid_t f = open_checkpoint(path, err);
    if (f < 0) return FG_ERR_INPUT;
    long long version = -1, step = -1, seed = -1;
    int rc = FG_OK;
    if (get_attr_i64(f, "format_version", &version) || version != CHECKPOINT_FORMAT_VERSION)
        rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s: format version %lld, this fgpipe reads %d",
                     path, version, CHECKPOINT_FORMAT_VERSION);
    else if (get_attr_i64(f, "step", &step) || get_attr_i64(f, "seed", &seed) || step < 0)
        rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s: missing or bad step/seed attributes", path);
    else if (st->n_cv_sums > 0 && get_attr_doubles(f, "cv_scale_sums", st->cv_sums, st->n_cv_sums) < 0)
        rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s: attribute cv_scale_sums does not hold %d "
                     "doubles", path, st->n_cv_sums);
    // Every tensor is found and shaped right before the stage's state is touched.
    Tensors ts = tensors_new(st, path, 1);
    for (int b = 0; b < st->n_buffers && !rc; b++)
        for (int t = 0; t < m->n_tensors && !rc; t++) {
            const TensorView *tv = &m->tensors[t];
            // A frozen layer (a LoRA base) has parameters alone: no optimizer state to save or
            // load (an older checkpoint's zeros are left unread).
            if (!own_tensor(st, tv) || (b > 0 && m->layers[tv->layer].frozen)) continue;
            char name[256];
            dataset_name(st->buffers[b], tv, name, sizeof name);
            if (H5Lexists(f, st->buffers[b], H5P_DEFAULT) <= 0 || H5Oexists_by_name(f, name, H5P_DEFAULT) <= 0) {
                if (st->adapters_optional && m->layers[tv->layer].kind == LAYER_LORA) continue;
                rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s has no %s (this model has layer %s)",
                             path, name, m->layers[tv->layer].name);
                break;
            }
            hid_t d = ts.dsets[b * m->n_tensors + t] = H5Dopen2(f, name, H5P_DEFAULT);
            if ((rc = check_float32(d, path, name, err))) break;
            hid_t sp = H5Dget_space(d);
            hsize_t want[2], have[2] = {0, 0};
            int want_rank = tensor_rank(tv, want), have_rank = H5Sget_simple_extent_dims(sp, have, NULL);
            if (have_rank != want_rank || have[0] != want[0] || (want_rank == 2 && have[1] != want[1])) {
                char hs[64], ws[64];
                rc = fg_fail(err, FG_ERR_INPUT, "checkpoint %s: %s has shape %s, the model wants %s",
                             path, name, shape_str(have_rank, have, hs, sizeof hs),
                             shape_str(want_rank, want, ws, sizeof ws));
            }
            H5Sclose(sp);
        }
    if (!rc) {
        st->step = step, st->seed = (uint32_t)seed;
        rc = st->visit_layers(st->source, 1, transfer_layer, &ts, err);
    }
    tensors_close(&ts);
    H5Fclose(f);
    return rc;
}

// Layer.stored_bf16 of every frozen layer whose parameters the checkpoint holds in BF16 (a
// tensor it lacks or holds otherwise: that layer stays FP32; load names any mismatch).
static int h5_mark_bf16(Storage *io, const char *path, Model *m, FgError *err) {
    (void)io;
    hid_t f = open_checkpoint(path, err);
    if (f < 0) return FG_ERR_INPUT;
    int all[MODEL_MAX_LAYERS];
    for (int l = 0; l < m->n_layers; l++) all[l] = m->layers[l].frozen && m->layers[l].param_count;
    for (int t = 0; t < m->n_tensors; t++) {
        const TensorView *tv = &m->tensors[t];
        char name[256];
        dataset_name("params", tv, name, sizeof name);
        hid_t d = H5Lexists(f, "params", H5P_DEFAULT) > 0 && H5Oexists_by_name(f, name, H5P_DEFAULT) > 0
                      ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
        all[tv->layer] &= d >= 0 && is_bf16(d);
        if (d >= 0) H5Dclose(d);
    }
    for (int l = 0; l < m->n_layers; l++) m->layers[l].stored_bf16 = all[l];
    H5Fclose(f);
    return FG_OK;
}

// The "config" attribute (a fixed-length string), allocated; NULL when missing or unreadable.
static char *get_attr_str(hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT), type = H5Aget_type(a);
    size_t size = H5Tget_size(type);
    char *s = H5Tis_variable_str(type) == 0 && size > 0 ? calloc(size + 1, 1) : NULL;
    if (s && H5Aread(a, type, s) < 0) free(s), s = NULL;
    H5Tclose(type);
    H5Aclose(a);
    return s;
}

static int h5_load_config(Storage *io, const char *path, char **text, FgError *err) {
    (void)io;
    *text = NULL;
    hid_t f = open_checkpoint(path, err);
    if (f < 0) return FG_ERR_INPUT;
    *text = get_attr_str(f, "config");
    H5Fclose(f);
    if (!*text)
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s: no stored configuration (attribute "
                       "'config'): not an fgpipe checkpoint?", path);
    return FG_OK;
}

Storage checkpoint_hdf5(MPI_Comm comm) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // errors are reported by us, with context
    Ctx *c = calloc(1, sizeof *c);
    c->comm = comm;
    MPI_Comm_rank(comm, &c->rank);
    Storage io = {.ctx = c, .save = h5_save, .load = h5_load, .load_config = h5_load_config,
                  .mark_bf16 = h5_mark_bf16,
                  .open_log = log_hdf5_open};
    return io;
}

void checkpoint_hdf5_free(Storage *io) {
    free(io->ctx);
    io->ctx = NULL;
}
