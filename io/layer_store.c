// Layer store: layout, version stamps and recovery (layer_store.h). The I/O itself is
// direct_io.c; HDF5 is only touched in create and open.
#include "layer_store.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "direct_io.h"
#include "layer_store_internal.h"

size_t store_stride(const LayerStore *s, int i) {
    return dio_round_up(s->layers[i].count * layer_store_slot_elem_bytes(s, i));
}
static size_t stride(const LayerStore *s, int i) { return store_stride(s, i); }
static int n_records(const LayerStore *s) { return 2 * s->n + 2; }
// A frozen layer keeps one copy (docs/out-of-core.md, "Consistency"): no step writes it, so
// there is no older version to keep while a newer one is written.
static int n_copies(const LayerStore *s, int i) { return s->layers[i].frozen ? 1 : 2; }
static int record_of(int kind, int index, int slot, int n) {
    return kind == KIND_AUX ? 2 * n + slot : 2 * index + slot;
}

int layer_store_n_layers(const LayerStore *s) { return s->n; }
const StoreLayer *layer_store_layer(const LayerStore *s, int i) { return &s->layers[i]; }
int layer_store_n_bufs(const LayerStore *s) { return s->n_bufs; }
size_t layer_store_aux_bytes(const LayerStore *s) { return s->aux_bytes; }
size_t layer_store_buf_stride(const LayerStore *s, int i) { return stride(s, i); }
int layer_store_layer_bufs(const LayerStore *s, int i) { return s->layers[i].frozen ? 1 : s->n_bufs; }
size_t layer_store_slot_bytes(const LayerStore *s, int i) { return (size_t)layer_store_layer_bufs(s, i) * stride(s, i); }
const char *layer_store_note(const LayerStore *s) { return s->f.note; }
int layer_store_discarded(const LayerStore *s) { return s->discarded; }

size_t layer_store_disk_bytes(const LayerStore *s, int i) {
    return (size_t)layer_store_layer_bufs(s, i) * store_disk_stride(s, i);
}

size_t layer_store_max_slot_bytes(const LayerStore *s) {
    size_t m = 0;
    for (int i = 0; i < s->n; i++) m = FG_MAX(m, layer_store_slot_bytes(s, i));
    return m;
}

int layer_store_find(const LayerStore *s, int layer) {
    for (int i = 0; i < s->n; i++)
        if (s->layers[i].layer == layer) return i;
    return -1;
}

long layer_store_layer_version(const LayerStore *s, int i) {
    return s->cur[i] < 0 ? -1 : s->ver[i][s->cur[i]];
}

// A frozen layer's version holds for every later one: the store's is its trained layers' (or,
// with none, its auxiliary record's, or its frozen layers').
long layer_store_version(const LayerStore *s) {
    long c = -1, frozen = -1;
    int trained = 0;
    for (int i = 0; i < s->n; i++) {
        long v = layer_store_layer_version(s, i);
        if (v < 0) return -1;
        if (s->layers[i].frozen) frozen = FG_MAX(frozen, v);
        else c = (trained++ == 0 || v < c) ? v : c;
    }
    if (trained) return c;
    return s->aux_bytes && s->aux_cur >= 0 ? s->aux_ver[s->aux_cur] : frozen;
}

int layer_store_layers_for_stage(const Model *m, int first, int last, int frozen, int skip,
                                 StoreLayer *out) {
    int n = 0;
    for (int l = first; l < last; l++) {
        if (!m->layers[l].param_count || l == skip || (frozen == STORE_FROZEN_SKIP && m->layers[l].frozen))
            continue;
        memset(&out[n], 0, sizeof out[n]);
        snprintf(out[n].name, sizeof out[n].name, "%s", m->layers[l].name);
        out[n].layer = l;
        out[n].count = m->layers[l].param_count;
        out[n].frozen = frozen == STORE_FROZEN_READ_ONLY && m->layers[l].frozen;
        out[n].bf16 = out[n].frozen && m->layers[l].stored_bf16;
        n++;
    }
    return n;
}

static void alloc_buffers(LayerStore *s) {
    for (int i = 0; i < MODEL_MAX_LAYERS; i++) s->pend_ver[i] = -1;
    s->rec = dio_alloc(HDR_BYTES);
    s->aux_buf = s->aux_bytes ? dio_alloc(s->aux_bytes) : NULL;
}

void layer_store_close(LayerStore *s) {
    if (!s) return;
    dio_close(&s->f);
    if (s->final_path[0]) unlink(s->path);  // never published: the old store stays the store
    fg_free(s->rec);
    fg_free(s->aux_buf);
    fg_free(s->scratch);
    free(s);
}

// ---- the layout: attributes and index datasets in NAME.h5 ----

static int attr_i64(hid_t obj, const char *name, long long *v, int write) {
    if (write) {
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(obj, name, H5T_NATIVE_LLONG, sp, H5P_DEFAULT, H5P_DEFAULT);
        herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_LLONG, v);
        if (a >= 0) H5Aclose(a);
        H5Sclose(sp);
        return rc < 0;
    }
    if (H5Aexists(obj, name) <= 0) return 1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    herr_t rc = H5Aread(a, H5T_NATIVE_LLONG, v);
    H5Aclose(a);
    return rc < 0;
}

static int dataset_io(hid_t f, const char *name, hid_t type, hsize_t n, void *data, int write) {
    hid_t d;
    if (write) {
        hid_t sp = H5Screate_simple(1, &n, NULL);
        d = H5Dcreate2(f, name, type, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Sclose(sp);
        if (d < 0) return 1;
        herr_t rc = H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
        H5Dclose(d);
        return rc < 0;
    }
    if (H5Lexists(f, name, H5P_DEFAULT) <= 0) return 1;
    d = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = H5Dget_space(d);
    hssize_t have = H5Sget_simple_extent_npoints(sp);
    H5Sclose(sp);
    herr_t rc = have == (hssize_t)n ? H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : -1;
    H5Dclose(d);
    return rc < 0;
}

// Writes (write = 1) or reads the layout: format version, n_bufs, aux bytes and the layers.
// "format" is always 0, this layout (1 was a raw format, dropped): kept so that stores keep
// opening in builds from before and after.
static int index_io(LayerStore *s, hid_t f, int write) {
    long long v[5] = {STORE_FORMAT_VERSION, 0, s->n_bufs, (long long)s->aux_bytes, s->n};
    const char *names[5] = {"store_format_version", "format", "n_bufs", "aux_bytes", "n_layers"};
    for (int i = 0; i < 5; i++)
        if (attr_i64(f, names[i], &v[i], write)) return 1;
    if (!write) {
        if (v[0] != STORE_FORMAT_VERSION || v[1] != 0 || v[2] < 1 || v[2] > STORE_MAX_BUFS ||
            v[3] < 0 || v[4] < 1 || v[4] > MODEL_MAX_LAYERS)
            return 1;
        s->n_bufs = (int)v[2], s->aux_bytes = (size_t)v[3], s->n = (int)v[4];
    }
    int layer[MODEL_MAX_LAYERS], frozen[MODEL_MAX_LAYERS] = {0}, bf16[MODEL_MAX_LAYERS] = {0};
    unsigned long long count[MODEL_MAX_LAYERS];
    char name[MODEL_MAX_LAYERS][16];
    for (int i = 0; write && i < s->n; i++) {
        layer[i] = s->layers[i].layer, count[i] = s->layers[i].count, frozen[i] = s->layers[i].frozen;
        bf16[i] = s->layers[i].bf16;
        memcpy(name[i], s->layers[i].name, 16);
    }
    // Stores from before frozen layers have no index_frozen: none of theirs is.
    if ((write || H5Lexists(f, "index_frozen", H5P_DEFAULT) > 0) &&
        dataset_io(f, "index_frozen", H5T_NATIVE_INT, (hsize_t)s->n, frozen, write))
        return 1;
    // index_bf16 only where a layer is kept in BF16: other stores open in older builds too.
    int any_bf16 = 0;
    for (int i = 0; write && i < s->n; i++) any_bf16 |= bf16[i];
    if ((write ? any_bf16 : H5Lexists(f, "index_bf16", H5P_DEFAULT) > 0) &&
        dataset_io(f, "index_bf16", H5T_NATIVE_INT, (hsize_t)s->n, bf16, write))
        return 1;
    // An older build's store kept two copies of a frozen layer, its newest in either slot.
    long long one = 1;
    int any_frozen = 0;
    for (int i = 0; i < s->n; i++) any_frozen |= frozen[i] != 0;
    if (any_frozen && (write ? attr_i64(f, "frozen_copies", &one, 1)
                             : attr_i64(f, "frozen_copies", &one, 0) || one != 1))
        return 2;
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, 16);
    int bad = dataset_io(f, "index_layer", H5T_NATIVE_INT, (hsize_t)s->n, layer, write) ||
              dataset_io(f, "index_count", H5T_NATIVE_ULLONG, (hsize_t)s->n, count, write) ||
              dataset_io(f, "index_name", str, (hsize_t)s->n, name, write);
    H5Tclose(str);
    if (bad || write) return bad;
    for (int i = 0; i < s->n; i++) {
        s->layers[i].layer = layer[i], s->layers[i].count = (size_t)count[i];
        s->layers[i].frozen = frozen[i] != 0;
        s->layers[i].bf16 = bf16[i] != 0 && frozen[i] != 0;
        memcpy(s->layers[i].name, name[i], 15);
        s->layers[i].name[15] = 0;
    }
    return 0;
}

// One contiguous, early-allocated, 1 MiB-aligned dataset per region; create = 1 makes them,
// otherwise opens them; either way the offsets come from H5Dget_offset.
static int h5_region(hid_t f, const char *name, hid_t type, int rank, const hsize_t *dims,
                     int create, uint64_t *off) {
    hid_t d;
    if (create) {
        hid_t sp = H5Screate_simple(rank, dims, NULL);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE), lcpl = H5Pcreate(H5P_LINK_CREATE);
        H5Pset_layout(dcpl, H5D_CONTIGUOUS);
        H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);  // the address exists before any write
        H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);    // no pass of fill values over GBs
        H5Pset_create_intermediate_group(lcpl, 1);
        d = H5Dcreate2(f, name, type, sp, lcpl, dcpl, H5P_DEFAULT);
        H5Pclose(dcpl), H5Pclose(lcpl), H5Sclose(sp);
    } else {
        d = H5Lexists(f, name, H5P_DEFAULT) > 0 ? H5Dopen2(f, name, H5P_DEFAULT) : -1;
    }
    if (d < 0) return 1;
    haddr_t a = H5Dget_offset(d);
    H5Dclose(d);
    if (a == HADDR_UNDEF || a % DIO_ALIGN) return 1;
    *off = (uint64_t)a;
    return 0;
}

static int h5_regions(LayerStore *s, hid_t f, int create) {
    hsize_t hdr = (hsize_t)n_records(s) * HDR_BYTES, aux = dio_round_up(s->aux_bytes);
    if (h5_region(f, "headers", H5T_NATIVE_UCHAR, 1, &hdr, create, &s->hdr_off)) return 1;
    for (int k = 0; k < 2 && s->aux_bytes; k++) {
        char name[32];
        snprintf(name, sizeof name, "aux%d", k);
        if (h5_region(f, name, H5T_NATIVE_UCHAR, 1, &aux, create, &s->aux_off[k])) return 1;
    }
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < n_copies(s, i); k++) {
            char name[64];
            // The index makes it unique: names are cut to 15 characters.
            snprintf(name, sizeof name, "slot%d/%d.%s", k, s->layers[i].layer, s->layers[i].name);
            hsize_t dims[2] = {(hsize_t)layer_store_layer_bufs(s, i), store_disk_stride(s, i) / store_elem_bytes(s, i)};
            hid_t type = s->layers[i].bf16 ? H5T_STD_U16LE : H5T_NATIVE_FLOAT;
            if (h5_region(f, name, type, 2, dims, create, &s->slot_off[i][k])) return 1;
        }
    return 0;
}

static uint64_t regions_end(const LayerStore *s) {
    uint64_t end = s->hdr_off + (uint64_t)n_records(s) * HDR_BYTES;
    for (int k = 0; k < 2 && s->aux_bytes; k++) end = FG_MAX(end, s->aux_off[k] + dio_round_up(s->aux_bytes));
    for (int i = 0; i < s->n; i++)
        for (int k = 0; k < n_copies(s, i); k++) end = FG_MAX(end, s->slot_off[i][k] + layer_store_disk_bytes(s, i));
    return end;
}

// The HDF5 part of creation: the layout and every region's dataset, then closed for good.
static int write_layout(LayerStore *s, FgError *err) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_alignment(fapl, DIO_ALIGN, ALIGN_SLOT);
    hid_t f = H5Fcreate(s->path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0)
        return fg_fail(err, FG_ERR_INPUT, "cannot create %s: %s", s->path,
                       errno ? strerror(errno) : "HDF5 error");
    int bad = index_io(s, f, 1) || h5_regions(s, f, 1);
    if (H5Fclose(f) < 0) bad = 1;
    if (bad)
        return fg_fail(err, FG_ERR_INPUT, "writing the store layout to %s failed: %s", s->path,
                       errno ? strerror(errno) : "HDF5 error");
    return FG_OK;
}

// The HDF5 part of opening: the layout and every region's offset, then closed for good.
static int read_layout(LayerStore *s, FgError *err) {
    int rc = FG_OK;
    hid_t f = H5Fopen(s->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0)
        rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: not an HDF5 file, or truncated", s->path);
    else if ((rc = index_io(s, f, 0)) == 2)
        rc = fg_fail(err, FG_ERR_INPUT, "layer store %s keeps two copies of its frozen layers (an "
                     "older build's): start the run again, without --resume-weights", s->path);
    else if (rc || h5_regions(s, f, 0))
        rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: missing or bad layout (not a store of "
                     "format version %d?)", s->path, STORE_FORMAT_VERSION);
    if (f >= 0) H5Fclose(f);
    return rc;
}

static void stamp_encode(unsigned char *rec, int kind, int index, int slot, const LayerStore *s,
                         long version) {
    Stamp st;
    memset(&st, 0, sizeof st);
    memcpy(st.magic, "FGSTORE1", 8);
    st.kind = (uint32_t)kind, st.index = (uint32_t)index, st.slot = (uint32_t)slot;
    st.n_bufs = (uint32_t)(kind == KIND_LAYER ? layer_store_layer_bufs(s, index) : s->n_bufs);
    st.count = kind == KIND_LAYER ? s->layers[index].count : s->aux_bytes;
    st.version = version;
    st.crc = (uint32_t)crc32(0L, (const Bytef *)&st, offsetof(Stamp, crc));
    memset(rec, 0, HDR_BYTES);
    memcpy(rec, &st, sizeof st);
}

// The version a record vouches for, or -1 if it is empty, torn or not this slot's.
static long stamp_decode(const unsigned char *rec, int kind, int index, int slot, const LayerStore *s) {
    Stamp st;
    memcpy(&st, rec, sizeof st);
    if (memcmp(st.magic, "FGSTORE1", 8) || st.crc != (uint32_t)crc32(0L, (const Bytef *)&st, offsetof(Stamp, crc)))
        return -1;
    uint64_t count = kind == KIND_LAYER ? s->layers[index].count : s->aux_bytes;
    if (st.kind != (uint32_t)kind || st.index != (uint32_t)index || st.slot != (uint32_t)slot ||
        st.n_bufs != (uint32_t)(kind == KIND_LAYER ? layer_store_layer_bufs(s, index) : s->n_bufs) ||
        st.count != count || st.version < 0)
        return -1;
    return (long)st.version;
}

int layer_store_create(LayerStore **out, const char *dir, const char *name, int n_layers,
                       const StoreLayer *layers, const StoreOptions *opt, FgError *err) {
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);  // errors are reported by us, with context
    if (n_layers < 1 || n_layers > MODEL_MAX_LAYERS || !opt || opt->n_bufs < 1 || opt->n_bufs > STORE_MAX_BUFS)
        return fg_fail(err, FG_ERR_INPUT, "layer store %s/%s: %d layers and %d buffers per layer "
                       "(1..%d and 1..%d)", dir, name, n_layers, opt ? opt->n_bufs : 0,
                       MODEL_MAX_LAYERS, STORE_MAX_BUFS);
    struct stat sb;
    if (stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return fg_fail(err, FG_ERR_INPUT, "weights dir %s: %s", dir, errno ? strerror(errno) : "not a directory");
    if (access(dir, W_OK | X_OK))
        return fg_fail(err, FG_ERR_INPUT, "weights dir %s is not writable: %s", dir, strerror(errno));
    LayerStore *s = calloc(1, sizeof *s);
    s->n = n_layers, s->n_bufs = opt->n_bufs, s->aux_bytes = opt->aux_bytes;
    memcpy(s->layers, layers, (size_t)n_layers * sizeof *layers);
    s->f.fd = -1;
    for (int i = 0; i < n_layers; i++) {
        s->cur[i] = -1, s->ver[i][0] = s->ver[i][1] = -1;
        s->layers[i].bf16 = s->layers[i].bf16 && s->layers[i].frozen;  // a trained layer: FP32
    }
    s->aux_cur = -1, s->aux_ver[0] = s->aux_ver[1] = -1;
    snprintf(s->path, sizeof s->path, "%s/%s.h5", dir, name);
    if (opt->staged) {
        memcpy(s->final_path, s->path, sizeof s->path);
        snprintf(s->path, sizeof s->path, "%s/%s.new.h5", dir, name);
    }
    alloc_buffers(s);
    unlink(s->path);  // a new store: never reuse the blocks (or stamps) of an old one
    int rc = write_layout(s, err);
    if (!rc) rc = dio_open(&s->f, s->path, O_CREAT, err);
    if (!rc) {
        s->file_bytes = regions_end(s);
        // Blocks reserved now: a disk too small fails here, with the size, not mid-run.
        int e = opt->preallocate ? posix_fallocate(s->f.fd, 0, (off_t)s->file_bytes)
                                 : ftruncate(s->f.fd, (off_t)s->file_bytes) ? errno : 0;
        if (e)
            rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: reserving %.3f GB failed: %s",
                         s->path, (double)s->file_bytes / 1e9, strerror(e));
    }
    if (!rc) {  // no stamp yet: every slot empty
        unsigned char *zero = dio_alloc((size_t)n_records(s) * HDR_BYTES);
        rc = dio_write(&s->f, zero, (size_t)n_records(s) * HDR_BYTES, s->hdr_off, err);
        fg_free(zero);
        if (!rc) rc = dio_sync(&s->f, err);
    }
    if (rc) {  // no half-made store left behind to be mistaken for one
        unlink(s->path);
        layer_store_close(s);
        return rc;
    }
    *out = s;
    return FG_OK;
}

int layer_store_publish(LayerStore *s, FgError *err) {
    if (!s->final_path[0]) return FG_OK;
    if (rename(s->path, s->final_path))
        return fg_fail(err, FG_ERR_INPUT, "layer store %s: renaming it %s failed: %s", s->path,
                       s->final_path, strerror(errno));
    memcpy(s->path, s->final_path, sizeof s->path);
    s->final_path[0] = 0;
    char dir[sizeof s->path];
    memcpy(dir, s->path, sizeof dir);
    *strrchr(dir, '/') = 0;  // the path is DIR/NAME.h5
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) fsync(fd), close(fd);
    return FG_OK;
}

int layer_store_open(LayerStore **out, const char *dir, const char *name, FgError *err) {
    return layer_store_open_at(out, dir, name, -1, err);
}

// A frozen layer's slot at version c: its one copy, if that is of version c or older (-1: not).
static int frozen_slot(const LayerStore *s, int i, long c) {
    return s->ver[i][0] >= 0 && s->ver[i][0] <= c ? 0 : -1;
}

// Every layer's (and the auxiliary record's) current slot at the store's version c; the other
// slots are forgotten (older, or newer ones from an unfinished step).
static int use_version(LayerStore *s, long c, FgError *err) {
    int rc = FG_OK;
    for (int i = 0; i < s->n && !rc; i++) {
        s->cur[i] = s->layers[i].frozen ? frozen_slot(s, i, c)
                                        : s->ver[i][0] == c ? 0 : s->ver[i][1] == c ? 1 : -1;
        if (s->cur[i] < 0 && s->layers[i].frozen)
            rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: frozen layer %s holds version %ld, "
                         "newer than the store's consistent version %ld: a load did not finish, and "
                         "a frozen layer keeps no older copy (start the run again)", s->path,
                         s->layers[i].name, s->ver[i][0], c);
        else if (s->cur[i] < 0)
            rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: layer %s has versions %ld and %ld, "
                         "not the store's consistent version %ld (corrupt store)", s->path,
                         s->layers[i].name, s->ver[i][0], s->ver[i][1], c);
        else {
            s->discarded += s->ver[i][1 - s->cur[i]] > c;
            s->ver[i][1 - s->cur[i]] = -1;  // older, or a newer one from an unfinished step
        }
    }
    if (!rc && s->aux_bytes) {
        s->aux_cur = s->aux_ver[0] == c ? 0 : s->aux_ver[1] == c ? 1 : -1;
        if (s->aux_cur < 0)
            rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: no auxiliary record of version %ld "
                         "(corrupt store)", s->path, c);
        else s->aux_ver[1 - s->aux_cur] = -1;
    }
    return rc;
}

int layer_store_open_at(LayerStore **out, const char *dir, const char *name, long version,
                        FgError *err) {
    *out = NULL;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    LayerStore *s = calloc(1, sizeof *s);
    s->f.fd = -1;
    snprintf(s->path, sizeof s->path, "%s/%s.h5", dir, name);
    if (access(s->path, F_OK)) {
        int e = errno;
        free(s);
        return fg_fail(err, FG_ERR_INPUT, "no layer store %s/%s.h5: %s", dir, name, strerror(e));
    }
    int rc = read_layout(s, err);
    if (rc) {
        free(s);
        return rc;
    }
    alloc_buffers(s);
    rc = dio_open(&s->f, s->path, 0, err);
    struct stat sb;
    s->file_bytes = regions_end(s);
    if (!rc && (fstat(s->f.fd, &sb) || (uint64_t)sb.st_size < s->file_bytes))
        rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: %lld bytes, the layout needs %llu (truncated?)",
                     s->path, (long long)sb.st_size, (unsigned long long)s->file_bytes);
    size_t hdr_bytes = (size_t)n_records(s) * HDR_BYTES;
    unsigned char *hdr = dio_alloc(hdr_bytes);
    if (!rc) rc = dio_read(&s->f, hdr, hdr_bytes, s->hdr_off, err);
    // Recovery: C = the oldest trained layer's newest version; every trained layer must hold C
    // in some slot (the write rule guarantees it), a frozen one C or an older version; slots
    // newer than C belong to an unfinished step (or load).
    long c = -1, frozen = -1;
    int trained = 0;
    for (int i = 0; i < s->n && !rc; i++) {
        long newest = -1;
        for (int k = 0; k < 2; k++) {
            s->ver[i][k] = stamp_decode(hdr + (size_t)record_of(KIND_LAYER, i, k, s->n) * HDR_BYTES, KIND_LAYER, i, k, s);
            newest = FG_MAX(newest, s->ver[i][k]);
        }
        if (newest < 0)
            rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: %slayer %s has no complete version "
                         "(%s)", s->path, s->layers[i].frozen ? "frozen " : "", s->layers[i].name,
                         s->layers[i].frozen ? "creation or a load was cut short while writing its "
                         "only copy: start the run again" : "creation interrupted?");
        if (s->layers[i].frozen) frozen = FG_MAX(frozen, newest);
        else c = (trained++ == 0 || newest < c) ? newest : c;
    }
    for (int k = 0; k < 2 && s->aux_bytes && !rc; k++)
        s->aux_ver[k] = stamp_decode(hdr + (size_t)record_of(KIND_AUX, 0, k, s->n) * HDR_BYTES, KIND_AUX, 0, k, s);
    if (!trained) c = s->aux_bytes ? FG_MAX(s->aux_ver[0], s->aux_ver[1]) : frozen;
    // An older version is still whole in the other slots right after the store moved on (a
    // pipeline whose stages crashed one version apart goes back to the version they share).
    if (!rc && version >= 0 && version != c) {
        if (version > c)
            rc = fg_fail(err, FG_ERR_INPUT, "layer store %s: asked for version %ld, but it only "
                         "holds up to version %ld", s->path, version, c);
        c = version;
    }
    fg_free(hdr);
    if (!rc) rc = use_version(s, c, err);
    if (rc) {
        layer_store_close(s);
        return rc;
    }
    *out = s;
    return FG_OK;
}

int layer_store_read(LayerStore *s, int i, void *buf, FgError *err) {
    if (s->cur[i] < 0)
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: layer %s has no version yet",
                       s->path, s->layers[i].name);
    if (s->layers[i].bf16) return store_read_values(s, i, buf, s->layers[i].count, s->slot_off[i][s->cur[i]], err);
    return dio_read(&s->f, buf, layer_store_slot_bytes(s, i), s->slot_off[i][s->cur[i]], err);
}

int layer_store_read_aux(LayerStore *s, void *data, FgError *err) {
    if (!s->aux_bytes || s->aux_cur < 0)
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: no auxiliary record", s->path);
    int rc = dio_read(&s->f, s->aux_buf, dio_round_up(s->aux_bytes), s->aux_off[s->aux_cur], err);
    if (!rc) memcpy(data, s->aux_buf, s->aux_bytes);
    return rc;
}

// The write rule of the header comment; on success *slot is the slot to overwrite.
int store_check_write(LayerStore *s, int kind, int i, long version, FgError *err) {
    long have = kind == KIND_AUX ? (s->aux_cur < 0 ? -1 : s->aux_ver[s->aux_cur]) : layer_store_layer_version(s, i);
    const char *what = kind == KIND_AUX ? "the auxiliary record" : s->layers[i].name;
    int frozen = kind == KIND_LAYER && s->layers[i].frozen;  // written by loads only: any later version
    if (frozen ? version <= have : version != have + 1)
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: writing version %ld of %s, which "
                       "has version %ld", s->path, version, what, have);
    for (int j = 0; j < s->n && version > 0; j++)
        if (!s->layers[j].frozen && layer_store_layer_version(s, j) < version - 1)
            return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: writing version %ld of %s before "
                           "layer %s has version %ld", s->path, version, what,
                           s->layers[j].name, version - 1);
    if (kind == KIND_LAYER && s->aux_bytes && (s->aux_cur < 0 || s->aux_ver[s->aux_cur] < version))
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: writing version %ld of %s before "
                       "the auxiliary record of that version", s->path, version, what);
    return FG_OK;
}

// Data, fdatasync, stamp, fdatasync: the stamp never vouches for data not yet on the device,
// and the next write (which may overwrite the other slot of some layer) starts only once this
// stamp is durable.
int store_seal_slot(LayerStore *s, int kind, int i, int slot, long version, FgError *err) {
    int rc = dio_sync(&s->f, err);
    if (!rc) {
        stamp_encode(s->rec, kind, i, slot, s, version);
        uint64_t at = s->hdr_off + (uint64_t)record_of(kind, i, slot, s->n) * HDR_BYTES;
        rc = dio_write(&s->f, s->rec, HDR_BYTES, at, err);
    }
    if (!rc) rc = dio_sync(&s->f, err);
    return rc;
}

static int write_slot(LayerStore *s, int kind, int i, int slot, long version, const void *buf,
                      size_t bytes, uint64_t off, FgError *err) {
    int rc = kind == KIND_LAYER && s->layers[i].bf16
                 ? store_write_values(s, i, buf, s->layers[i].count, off, err)
                 : dio_write(&s->f, buf, bytes, off, err);
    return rc ? rc : store_seal_slot(s, kind, i, slot, version, err);
}

int store_begin_layer_write(LayerStore *s, int i, long version, int *slot, FgError *err) {
    int rc = store_check_write(s, KIND_LAYER, i, version, err);
    if (rc) return rc;
    *slot = s->cur[i] < 0 || n_copies(s, i) == 1 ? 0 : 1 - s->cur[i];
    // The only copy's stamp goes before its data: a write cut short leaves the layer with no
    // version, never a stamp over torn data.
    if (n_copies(s, i) == 1 && s->cur[i] >= 0) {
        s->rewritten[i] = 1;  // before cur goes: a reader on the stream's other thread sees it
        atomic_thread_fence(memory_order_release);
        s->cur[i] = -1;
        memset(s->rec, 0, HDR_BYTES);
        uint64_t at = s->hdr_off + (uint64_t)record_of(KIND_LAYER, i, *slot, s->n) * HDR_BYTES;
        rc = dio_write(&s->f, s->rec, HDR_BYTES, at, err);
        if (!rc) rc = dio_sync(&s->f, err);
    }
    s->ver[i][*slot] = -1;  // its old contents are gone from here on, whatever happens
    return rc;
}

int layer_store_write(LayerStore *s, int i, long version, const void *buf, FgError *err) {
    int slot, rc = store_begin_layer_write(s, i, version, &slot, err);
    if (!rc) rc = write_slot(s, KIND_LAYER, i, slot, version, buf, layer_store_slot_bytes(s, i),
                             s->slot_off[i][slot], err);
    if (rc) return rc;
    s->ver[i][slot] = version;
    s->cur[i] = slot;
    return FG_OK;
}

int layer_store_write_aux(LayerStore *s, long version, const void *data, FgError *err) {
    if (!s->aux_bytes)
        return fg_fail(err, FG_ERR_INTERNAL, "layer store %s: created without an auxiliary record", s->path);
    int rc = store_check_write(s, KIND_AUX, 0, version, err);
    if (rc) return rc;
    int slot = s->aux_cur < 0 ? 0 : 1 - s->aux_cur;
    s->aux_ver[slot] = -1;
    memset(s->aux_buf, 0, dio_round_up(s->aux_bytes));
    memcpy(s->aux_buf, data, s->aux_bytes);
    rc = write_slot(s, KIND_AUX, 0, slot, version, s->aux_buf, dio_round_up(s->aux_bytes),
                    s->aux_off[slot], err);
    if (rc) return rc;
    s->aux_ver[slot] = version;
    s->aux_cur = slot;
    return FG_OK;
}
