// fgpipe plan --batches: which micro-batch a stage that streams its weights from flash should
// run, for bp-zb, fg and fg+bp. A streamed stage reads its weight store once per wave (bp and
// fg+bp: the F wave and the B wave; fg: the F wave, its update folded into the next read) and
// writes it once per step, whatever the micro-batch; its compute grows with the micro-batch and
// so do its activations. So a larger micro-batch needs less bandwidth and more memory: the
// choice is the smallest one whose step is compute-bound on this disk within mem_budget, or, if
// none is, the largest that fits (flash-bound).
#include "plan_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "layer_source.h"
#include "progress.h"

enum { PROBE_BYTES = 256 << 20, PROBE_CHUNK = 4 << 20 };

// The flash's sequential bandwidth, as the layer stores use it (direct I/O, 4 MiB requests):
// PROBE_BYTES written and read back in dir. Where O_DIRECT is refused (tmpfs) the figures are
// the page cache's, and note says so.
static int measure_disk(const char *dir, double *read_bw, double *write_bw, char *note, size_t size,
                        FgError *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/fgpipe-plan-probe.%d", dir, (int)getpid());
    int direct = 1, fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT, 0600);
    if (fd < 0 && errno == EINVAL) direct = 0, fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0)
        return fg_fail(err, FG_ERR_INPUT, "plan --batches: cannot create a probe file in weights_dir "
                       "%s: %s (or pass --disk-bw GB/s)", dir, strerror(errno));
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, PROBE_CHUNK)) buf = NULL;
    int bad = !buf;
    if (buf) memset(buf, 0x5a, PROBE_CHUNK);
    double t0 = wall_seconds();
    for (size_t at = 0; !bad && at < PROBE_BYTES; at += PROBE_CHUNK) bad = write(fd, buf, PROBE_CHUNK) != PROBE_CHUNK;
    bad = bad || fsync(fd) != 0;
    double t1 = wall_seconds();
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    for (size_t at = 0; !bad && at < PROBE_BYTES; at += PROBE_CHUNK) bad = pread(fd, buf, PROBE_CHUNK, (off_t)at) != PROBE_CHUNK;
    double t2 = wall_seconds();
    close(fd);
    unlink(path);
    free(buf);
    if (bad) return fg_fail(err, FG_ERR_INPUT, "plan --batches: the probe of %s failed (disk full?)", dir);
    *write_bw = PROBE_BYTES / (t1 - t0), *read_bw = PROBE_BYTES / (t2 - t1);
    snprintf(note, size, "measured in %s%s", dir, direct ? "" : " without O_DIRECT (the page cache may answer)");
    return FG_OK;
}

// One mode's figures at micro-batch `batch`, the worst stage's.
typedef struct {
    double memory, activations, read, write, step, io, tokens_per_s;
} BatchRow;

static BatchRow batch_row(const CostSet *cs, const Figures *fig, const Model *m, int batch,
                          double read_bw, double write_bw) {
    const Config *c = &cs->cfg;
    const int M = c->layout.stages, B0 = c->training.micro_batch;
    const LayerNeeds need = layer_needs(c);
    const int store_bufs = 1 + need.opt_buffers + need.ref, step_bufs = need.keep_grad + need.prev;
    const int waves = c->method.mode == MODE_FG ? 1 : 2;
    const double scale = (double)batch / B0;
    BatchRow r = {.step = fig->step * scale};  // compute grows with the batch (linear: see docs)
    for (int s = 0; s < M; s++) {
        size_t largest = 0;
        for (int l = cs->layout[s]; l < cs->layout[s + 1]; l++) largest = FG_MAX(largest, m->layers[l].param_count);
        double store = (double)model_range_count(m, cs->layout[s], cs->layout[s + 1]) * store_bufs * sizeof(float);
        double slots = 2.0 * largest * (store_bufs + step_bufs) * sizeof(float);
        double layer_work = (double)largest * sizeof(float) * (1 + c->method.tangents);
        // The timetable's stashes and kept inputs, and the lanes every op computes in: a
        // layer's input and output, with their tangents.
        double lanes = 2.0 * batch * m->max_width * (1 + c->method.tangents) * sizeof(float);
        double act = fig->activations[s] * scale + lanes;
        r.activations = FG_MAX(r.activations, act);
        r.memory = FG_MAX(r.memory, act + slots + layer_work);
        r.read = FG_MAX(r.read, waves * store);
        r.write = FG_MAX(r.write, store);
    }
    r.io = r.read / read_bw + r.write / write_bw;
    double tokens = (double)c->training.micro_batches * batch * c->layout.replicas * m->tokens;
    r.tokens_per_s = tokens / FG_MAX(r.step, r.io);
    return r;
}

static void print_mode(const char *name, const CostSet *cs, const Figures *fig, const Model *m,
                       double budget, double read_bw, double write_bw, FILE *out) {
    int chosen = 0, largest_fit = 0;
    for (int b = 1; b <= 1024; b *= 2) {
        BatchRow r = batch_row(cs, fig, m, b, read_bw, write_bw);
        int fits = r.memory <= budget, flash_bound = r.io > r.step;
        fprintf(out, "%-7s %5d %10.3f %9.3f %8.3f %8.3f %8.3f %8.2f %9.0f  %s%s\n", name, b,
                r.activations / 1e9, r.memory / 1e9, (r.read + r.write) / 1e9, r.step, r.io,
                (r.read + r.write) / r.step / 1e9, r.tokens_per_s, flash_bound ? "flash" : "compute",
                fits ? "" : ", over mem_budget");
        if (fits) largest_fit = b;
        if (fits && !flash_bound && !chosen) chosen = b;
        if ((!fits && r.activations > 4 * budget) || (chosen && b >= 4 * chosen)) break;
    }
    if (chosen)
        fprintf(out, "        -> micro_batch %d: the smallest compute-bound one within mem_budget\n", chosen);
    else if (largest_fit)
        fprintf(out, "        -> micro_batch %d: the largest within mem_budget; flash-bound at every size "
                "that fits\n", largest_fit);
    else
        fprintf(out, "        -> none fits mem_budget: use more stages or a larger budget\n");
}

int plan_print_batches(const CostSet *bp, const Figures *bp_fig, const CostSet *fg,
                       const Figures *fg_fig, const CostSet *fg_bp, const Figures *fg_bp_fig,
                       const Model *m, const PlanArgs *a, FILE *out, FgError *err) {
    const Config *c = &bp->cfg;
    if (c->layout.mem_budget <= 0)
        return fg_fail(err, FG_ERR_INPUT, "plan --batches needs mem_budget (--mem-budget BYTES)");
    double read_bw = a->disk_bandwidth, write_bw = a->disk_bandwidth;
    char note[4300] = "given by --disk-bw";
    if (read_bw <= 0) {
        if (!c->layout.weights_dir[0])
            return fg_fail(err, FG_ERR_INPUT, "plan --batches: name the flash (--weights-dir DIR) or "
                           "its bandwidth (--disk-bw GB/s)");
        int rc = measure_disk(c->layout.weights_dir, &read_bw, &write_bw, note, sizeof note, err);
        if (rc) return rc;
    }
    fprintf(out, "\nmicro-batch sweep for mem_budget %.3f GB per stage, flash %.2f GB/s read and "
            "%.2f GB/s write (%s); step times scale linearly from micro_batch %d's above "
            "(optimistic for smaller batches, whose GEMMs run slower per sample)\n",
            c->layout.mem_budget / 1e9, read_bw / 1e9, write_bw / 1e9, note, c->training.micro_batch);
    fprintf(out, "%-7s %5s %10s %9s %8s %8s %8s %8s %9s  %s\n", "mode", "batch", "activ. GB",
            "memory GB", "moved GB", "step s", "I/O s", "need GB/s", "tokens/s", "bound");
    print_mode("bp-zb", bp, bp_fig, m, c->layout.mem_budget, read_bw, write_bw, out);
    print_mode("fg", fg, fg_fig, m, c->layout.mem_budget, read_bw, write_bw, out);
    print_mode("fg+bp", fg_bp, fg_bp_fig, m, c->layout.mem_budget, read_bw, write_bw, out);
    return FG_OK;
}
