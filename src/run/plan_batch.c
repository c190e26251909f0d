// fgpipe plan --batches: which micro-batch a stage that streams its weights from flash should
// run, for bp-zb, fg and fg+bp. A streamed stage reads its parameters once per wave (bp and
// fg+bp: the F wave and the B wave; fg: the F wave, its update folded into the next read), its
// optimizer state in the wave that steps, and writes both once per step, whatever the
// micro-batch (slot_plan_step_bytes); its compute grows with the micro-batch and
// so do its activations. So a larger micro-batch needs less bandwidth and more memory: the
// choice is the smallest one whose step is compute-bound on this disk within mem_budget, or, if
// none is, the largest that fits (flash-bound). The R replicas of a stage on one node share one
// store: the node moves the same bytes per step whatever R, and R times the samples.
#include "plan_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "layer_source.h"
#include "slot_plan.h"
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

// One mode on one disk: its cost set, its timetable's figures at the config's micro-batch, and
// how many weight stores the node's flash serves: 1 (the R replicas of a stage on one node
// share one: the node's I/O rank reads, updates and writes each layer once), or R (a store
// each, as before the sharing: printed to show what it saves).
typedef struct {
    const CostSet *cs;
    const Figures *fig;
    const Model *m;
    double budget, read_bw, write_bw;
    int stores;
} Sweep;

// One mode's figures at micro-batch `batch`, the worst stage's; read, write and io are the
// node's (every store's), tokens_per_s the node's (every replica's samples).
typedef struct {
    double memory, activations, read, write, step, io, tokens_per_s;
} BatchRow;

enum { BATCH_LIMIT = 1 << 20 };  // the largest micro-batch the searches below consider

static BatchRow batch_row(const Sweep *w, int batch) {
    const Config *c = &w->cs->cfg;
    const Model *m = w->m;
    const int M = c->layout.stages, B0 = c->training.micro_batch;
    const double scale = (double)batch / B0;
    // Compute grows with the batch (linear: see docs); it is one replica's, timed with the
    // config's replicas (fg's U regenerates the tangents of all R x N micro-batches).
    BatchRow r = {.step = w->fig->step * scale};
    for (int s = 0; s < M; s++) {
        size_t largest = 0;
        for (int l = w->cs->layout[s]; l < w->cs->layout[s + 1]; l++)
            largest = FG_MAX(largest, m->layers[l].param_count);
        double read, write;
        slot_plan_step_bytes(c, m, w->cs->layout[s], w->cs->layout[s + 1], &read, &write);
        double slots = layer_source_streamed_floor(c, m, w->cs->layout[s], w->cs->layout[s + 1]);
        double layer_work = (double)largest * sizeof(float) * (1 + c->method.tangents);
        const double runtime = w->cs->resident[s][MEM_RUNTIME];  // the process's (plan.c)
        // The timetable's activations (stashes, kept inputs, lanes, messages) grow with the
        // micro-batch.
        double act = w->fig->activations[s] * scale;
        r.activations = FG_MAX(r.activations, act);
        r.memory = FG_MAX(r.memory, act + slots + layer_work + runtime);
        r.read = FG_MAX(r.read, read * w->stores);
        r.write = FG_MAX(r.write, write * w->stores);
    }
    r.io = r.read / w->read_bw + r.write / w->write_bw;
    double tokens = (double)c->training.micro_batches * batch * c->layout.replicas * m->tokens;
    r.tokens_per_s = tokens / FG_MAX(r.step, r.io);
    return r;
}

static int is_compute_bound(const BatchRow *r, const Sweep *w) { (void)w; return r->io <= r->step; }
static int is_over_budget(const BatchRow *r, const Sweep *w) { return r->memory > w->budget; }

// The smallest micro-batch in [1, BATCH_LIMIT] where holds() is true, for a test that stays
// true at every larger one (compute grows with the batch and the bytes do not; memory grows);
// 0 if it holds nowhere up to BATCH_LIMIT. Doubling, then bisection.
static int first_batch(const Sweep *w, int (*holds)(const BatchRow *, const Sweep *)) {
    int hi = 1;
    for (BatchRow r = batch_row(w, hi); !holds(&r, w); r = batch_row(w, hi))
        if ((hi *= 2) > BATCH_LIMIT) return 0;
    int lo = hi / 2;  // 0, or a batch where it does not hold
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        const BatchRow r = batch_row(w, mid);
        if (holds(&r, w)) hi = mid;
        else lo = mid;
    }
    return hi;
}

// The two curves' ends for the node's R replicas: the micro-batch from which the step is
// compute-bound (below it the flash binds), and the largest within mem_budget; and, for R > 1,
// where a store per replica (R times the bytes) would turn compute-bound.
static void print_node(const Sweep *shared, FILE *out) {
    const int R = shared->cs->cfg.layout.replicas;
    const int crossover = first_batch(shared, is_compute_bound), over = first_batch(shared, is_over_budget);
    fprintf(out, "        R = %d replica%s, one store on the node: ", R, R > 1 ? "s" : "");
    if (crossover)
        fprintf(out, "compute-bound from micro_batch %d (%.0f tokens/s)", crossover,
                batch_row(shared, crossover).tokens_per_s);
    else
        fprintf(out, "flash-bound up to micro_batch %d", BATCH_LIMIT);
    if (over == 1) fprintf(out, ", none within mem_budget\n");
    else fprintf(out, ", within mem_budget up to micro_batch %d\n", over ? over - 1 : BATCH_LIMIT);
    if (R == 1) return;
    Sweep each = *shared;
    each.stores = R;
    const int each_crossover = first_batch(&each, is_compute_bound);
    const BatchRow any = batch_row(&each, 1);  // the bytes do not depend on the batch
    fprintf(out, "        (a store per replica would move %.3f GB per step: ", (any.read + any.write) / 1e9);
    if (each_crossover) fprintf(out, "compute-bound from micro_batch %d)\n", each_crossover);
    else fprintf(out, "flash-bound up to micro_batch %d)\n", BATCH_LIMIT);
}

static void print_mode(const char *name, const Sweep *w, FILE *out) {
    int chosen = 0, largest_fit = 0;
    for (int b = 1; b <= 1024; b *= 2) {
        BatchRow r = batch_row(w, b);
        int fits = !is_over_budget(&r, w), flash_bound = !is_compute_bound(&r, w);
        fprintf(out, "%-7s %5d %10.3f %9.3f %8.3f %8.3f %8.3f %8.2f %9.0f  %s%s\n", name, b,
                r.activations / 1e9, r.memory / 1e9, (r.read + r.write) / 1e9, r.step, r.io,
                (r.read + r.write) / r.step / 1e9, r.tokens_per_s, flash_bound ? "flash" : "compute",
                fits ? "" : ", over mem_budget");
        if (fits) largest_fit = b;
        if (fits && !flash_bound && !chosen) chosen = b;
        if ((!fits && r.activations > 4 * w->budget) || (chosen && b >= 4 * chosen)) break;
    }
    if (chosen)
        fprintf(out, "        -> micro_batch %d: the smallest compute-bound one within mem_budget\n", chosen);
    else if (largest_fit)
        fprintf(out, "        -> micro_batch %d: the largest within mem_budget; flash-bound at every size "
                "that fits\n", largest_fit);
    else  // the smallest budget that would take micro_batch 1
        fprintf(out, "        -> none fits mem_budget: micro_batch 1 needs %.3f GB per stage (a "
                "budget that large, more stages, or recompute = stage)\n", batch_row(w, 1).memory / 1e9);
    print_node(w, out);
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
    fprintf(out, "R = %d replica%s per stage on one node, sharing one store: bytes moved per step are "
            "the node's and do not grow with R; tokens/s are the node's (R x %d micro-batches a step); "
            "the step is one replica's compute or the node's I/O, the larger\n", c->layout.replicas,
            c->layout.replicas > 1 ? "s" : "", c->training.micro_batches);
    fprintf(out, "%-7s %5s %10s %9s %8s %8s %8s %8s %9s  %s\n", "mode", "batch", "activ. GB",
            "memory GB", "moved GB", "step s", "I/O s", "need GB/s", "tokens/s", "bound");
    const CostSet *sets[3] = {bp, fg, fg_bp};
    const Figures *figs[3] = {bp_fig, fg_fig, fg_bp_fig};
    static const char *const names[3] = {"bp-zb", "fg", "fg+bp"};
    for (int i = 0; i < 3; i++) {
        const Sweep w = {.cs = sets[i], .fig = figs[i], .m = m, .budget = c->layout.mem_budget,
                         .read_bw = read_bw, .write_bw = write_bw, .stores = 1};
        print_mode(names[i], &w, out);
    }
    return FG_OK;
}
