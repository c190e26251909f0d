// The spill file: regions of floats, each starting at a DIO_ALIGN boundary. Requests pass
// through one aligned bounce buffer, so callers' buffers need no alignment and pieces may end
// anywhere (a piece that ends inside a block reads the block first).
#include "layer_spill.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <fcntl.h>
#include <time.h>

#include "direct_io.h"

enum { SPILL_REGIONS = 4, BOUNCE_FLOATS = 1 << 20 };

typedef struct {
    DioFile file;
    int n_regions;
    size_t floats[SPILL_REGIONS];
    uint64_t offset[SPILL_REGIONS];
    float *bounce;
    LayerStreamStats stats;
} Spill;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// A request's bytes and seconds into the stats.
static void count(Spill *sp, int write, size_t n, double t0) {
    double dt = now() - t0;
    LayerStreamStats *s = &sp->stats;
    if (write) s->write_bytes += (double)n * sizeof(float), s->write_seconds += dt;
    else s->read_bytes += (double)n * sizeof(float), s->read_seconds += dt;
    s->busy_seconds += dt, s->wait_seconds += dt;
}

static int check(const Spill *sp, int region, size_t first, size_t n, FgError *err) {
    if (region < 0 || region >= sp->n_regions || first + n > sp->floats[region] ||
        first % SPILL_ALIGN_FLOATS)
        return fg_fail(err, FG_ERR_INTERNAL, "%s: spill piece of %zu floats at %zu of region %d "
                       "is outside it or not aligned", sp->file.path, n, first, region);
    return FG_OK;
}

static int spill_write(LayerSpill *s, int region, size_t first, const float *buf, size_t n,
                       FgError *err) {
    Spill *sp = s->ctx;
    int rc = check(sp, region, first, n, err);
    double t0 = now();
    for (size_t done = 0; !rc && done < n; done += BOUNCE_FLOATS) {
        size_t k = FG_MIN((size_t)BOUNCE_FLOATS, n - done), bytes = dio_round_up(k * sizeof(float));
        uint64_t off = sp->offset[region] + (first + done) * sizeof(float);
        // A piece that ends inside an aligned block keeps the rest of the block.
        if (bytes != k * sizeof(float)) rc = dio_read(&sp->file, sp->bounce, bytes, off, err);
        if (rc) break;
        memcpy(sp->bounce, buf + done, k * sizeof(float));
        rc = dio_write(&sp->file, sp->bounce, bytes, off, err);
    }
    count(sp, 1, n, t0);
    return rc;
}

static int spill_read(LayerSpill *s, int region, size_t first, float *buf, size_t n, FgError *err) {
    Spill *sp = s->ctx;
    int rc = check(sp, region, first, n, err);
    double t0 = now();
    for (size_t done = 0; !rc && done < n; done += BOUNCE_FLOATS) {
        size_t k = FG_MIN((size_t)BOUNCE_FLOATS, n - done);
        rc = dio_read(&sp->file, sp->bounce, dio_round_up(k * sizeof(float)),
                      sp->offset[region] + (first + done) * sizeof(float), err);
        if (!rc) memcpy(buf + done, sp->bounce, k * sizeof(float));
    }
    count(sp, 0, n, t0);
    return rc;
}

static void spill_stats(LayerSpill *s, LayerStreamStats *out) { *out = ((Spill *)s->ctx)->stats; }

static void spill_close(LayerSpill *s) {
    Spill *sp = s->ctx;
    if (!sp) return;
    dio_close(&sp->file);
    unlink(sp->file.path);
    free(sp->bounce);
    free(sp);
    s->ctx = NULL;
}

int layer_spill_open(const char *dir, const char *name, int n_regions, const size_t *floats,
                     LayerSpill *out, FgError *err) {
    if (n_regions < 1 || n_regions > SPILL_REGIONS)
        return fg_fail(err, FG_ERR_INTERNAL, "a spill file of %d regions (1 to %d)", n_regions, SPILL_REGIONS);
    Spill *sp = calloc(1, sizeof *sp);
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.spill", dir, name);
    int rc = dio_open(&sp->file, path, O_CREAT | O_TRUNC, err);
    uint64_t end = 0;
    sp->n_regions = n_regions;
    for (int i = 0; i < n_regions; i++) {
        sp->floats[i] = floats[i], sp->offset[i] = end;
        end += dio_round_up(floats[i] * sizeof(float));
    }
    // Its whole size now, reserved (a full disk fails here, by name, not in the middle of a
    // step); a region's last piece reads up to the next DIO_ALIGN boundary.
    int e = rc || !end ? 0 : posix_fallocate(sp->file.fd, 0, (off_t)end);
    if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(sp->file.fd, (off_t)end) ? errno : 0;
    if (e) rc = fg_fail(err, FG_ERR_INPUT, "cannot reserve %llu bytes for %s: %s",
                        (unsigned long long)end, path, strerror(e));
    if (rc) {
        if (sp->file.fd > 0) dio_close(&sp->file), unlink(path);
        free(sp);
        return rc;
    }
    sp->bounce = dio_alloc((size_t)BOUNCE_FLOATS * sizeof(float));
    *out = (LayerSpill){.ctx = sp, .write = spill_write, .read = spill_read, .stats = spill_stats,
                        .close = spill_close};
    return FG_OK;
}
