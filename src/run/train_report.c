// What a run reports: progress files (config.txt, loss.csv), the layout, the measured timeline
// and its Chrome trace, the summary JSON, peak memory.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "train_internal.h"

char *report_config_text(const Config *c) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    config_write(c, f);
    fclose(f);
    return text;
}

size_t peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (size_t)ru.ru_maxrss * 1024;  // Linux reports KiB
}

int report_write_config(const Config *c, const char *dir, FgError *err) {
    char path[4096 + 16];
    snprintf(path, sizeof path, "%s/config.txt", dir);
    OutFile o;
    FILE *f = out_file_open(&o, "--out", path, err);
    if (!f) return FG_ERR_INPUT;
    config_write(c, f);
    return out_file_commit(&o, err);
}

// loss.csv, started over; a resumed run keeps the rows of the steps before its first one, so a
// requeued job writing into the same directory continues the file. Replaced whole: a full disk
// leaves the old file.
int report_start_loss_csv(LineFile *lf, const char *dir, long first_step, FgError *err) {
    char path[4096 + 16], line[512], *kept = NULL;
    size_t kept_len = 0;
    snprintf(path, sizeof path, "%s/loss.csv", dir);
    FILE *old = first_step > 0 ? fopen(path, "r") : NULL;
    FILE *mem = open_memstream(&kept, &kept_len);
    fputs("step,loss,lr,seconds,makespan,bubble,bubble_used_by_b\n", mem);
    while (old && fgets(line, sizeof line, old)) {
        char *end;
        long step = strtol(line, &end, 10);
        size_t n = strlen(line);
        // Whole rows only (an older fgpipe may have left a cut one).
        if (end != line && *end == ',' && step < first_step && n && line[n - 1] == '\n') fputs(line, mem);
    }
    if (old) fclose(old);
    fclose(mem);
    int rc = line_file_start(lf, "loss.csv in --out", path, kept, err);
    free(kept);
    return rc;
}


// The seconds the timetable gives an F op of stage s.
static double planned_f(const Schedule *S, int s) {
    const ScheduledOp *ops;
    int n = schedule_stage_ops(S, 0, s, &ops);
    for (int i = 0; i < n; i++)
        if (ops[i].kind == OP_F) return ops[i].end - ops[i].start;
    return 0.0;
}

void report_print_layout(const Model *m, const TrainResult *res, int M, const Pipeline *p) {
    const int *first = res->layout;
    if (p->tr->replicas > 1) fprintf(stderr, "fgpipe: %d data-parallel replicas of ", p->tr->replicas);
    else fprintf(stderr, "fgpipe: ");
    fprintf(stderr, "%d stage%s:", M, M > 1 ? "s" : "");
    for (int s = 0; s < M; s++)
        fprintf(stderr, " [%s..%s %zu params]", m->layers[first[s]].name,
                m->layers[first[s + 1] - 1].name, model_range_count(m, first[s], first[s + 1]));
    if (M > 1) fprintf(stderr, "\nfgpipe: stages cut by %s", res->layout_by);
    if (M > 1 && res->layout_why[0]) fprintf(stderr, " (%s)", res->layout_why);
    if (M > 1 && res->per_stage.work[0] > 0) {
        fprintf(stderr, ", ms per step:");
        for (int s = 0; s < M; s++) fprintf(stderr, " %.2f", 1e3 * res->per_stage.work[s]);
    }
    const Schedule *S = &p->tt.sched;
    ScheduleStats st = schedule_stats(S);
    const char *off = pipeline_calibration_off(p);
    if (p->cfg->method.mode == MODE_FG_BP && M > 1) {
        if (!off)
            fprintf(stderr, "\nfgpipe: F ms per stage timed over %d calibration steps:",
                    p->cfg->timetable.calibrate_steps);
        else
            fprintf(stderr, "\nfgpipe: F ms per stage from the start-up costs (no calibration: %s):", off);
        for (int s = 0; s < M; s++) fprintf(stderr, " %.3g", 1e3 * planned_f(S, s));
    }
    fprintf(stderr, "\nfgpipe: timetable %s, planned bubble %.1f%%", schedule_mode_name(S->mode),
            100 * st.bubble_fraction);
    if (S->mode == SCHED_FG_BP) {
        fprintf(stderr, ", %.1f%% of it used by Bi/Bw ops, step %.3f x fg's\n"
                "fgpipe: corrections per step by stage (of %d micro-batches; max lag):",
                100 * st.bubble_used_by_b, S->makespan / S->fg_makespan, S->N);
        int total = 0;
        for (int s = 0; s < S->M; s++) {
            StageBubbles b = schedule_stage_bubbles(S, s);
            fprintf(stderr, " %g (lag %d)", (double)b.corrections / S->n_phases, b.max_lag);
            total += b.corrections;
        }
        // One stage has no bubbles: fg+bp with select = -1 then backprops nothing.
        if (!total)
            fprintf(stderr, "\nfgpipe: warning: no micro-batch is backpropagated (no bubble fits a "
                    "B op): this run is fg; select = N backprops N per step, and estimator = mix "
                    "with shrink = 0 lets select = -1 choose bp-zb's timetable");
    }
    if (p->tt.choice[0]) fprintf(stderr, "\nfgpipe: timetable chosen by %s", p->tt.choice);
    fputc('\n', stderr);
}

void report_memory_of_stage(const MemAccount *a, double data, int s, StageFigures *out) {
    out->activation_peak[s] = a->activation_peak;
    for (int o = 0; o < N_MEM_OWNERS; o++) out->memory[o][s] = a->peak[o];
    out->memory[MEM_DATA][s] += data;
    // The runtime was measured with the data loaded: shown apart, each once.
    out->memory[MEM_RUNTIME][s] = FG_MAX(out->memory[MEM_RUNTIME][s] - data, 0.0);
}

static void print_mib(FILE *out, const double *v, int n) {
    for (int i = 0; i < n; i++) fprintf(out, " %.2f", v[i] / 1048576.0);
}

int report_activations_after_first_step(Pipeline *p, int reporter, FgError *err) {
    double peak[SCHED_MAX_STAGES] = {0};
    const int M = p->tr->stages;
    peak[p->tr->stage] = p->mem.activation_peak;
    int rc = p->tr->allreduce_sum(p->tr, peak, M, err);
    if (rc || !reporter) return rc;
    fprintf(stderr, "fgpipe: activations held after the first step (peak MiB by stage):");
    print_mib(stderr, peak, M);
    fputc('\n', stderr);
    return FG_OK;
}

void train_print_memory(const TrainResult *r, FILE *out) {
    const int M = r->stages;
    fprintf(out, "memory: activation peak MiB by stage");
    print_mib(out, r->per_stage.activation_peak, M);
    fprintf(out, "; MiB by owner (the stages' sum):");
    for (int o = 0; o < N_MEM_OWNERS; o++) {
        double sum = 0.0;
        for (int s = 0; s < M; s++) sum += r->per_stage.memory[o][s];
        if (sum > 0) fprintf(out, " %s %.2f", mem_owner_keys[o], sum / 1048576.0);
    }
    fprintf(out, "; peak RSS MiB by stage");
    print_mib(out, r->per_stage.peak_rss, M);
    fputc('\n', out);
}

void report_local_measured(const Pipeline *p, double *times) {
    const Schedule *S = &p->tt.sched;
    int s = p->tr->stage, M = S->M, phase = (int)(p->tt.plan - p->tt.plans);
    int lo = S->stage_first[phase * M + s], hi = lo + S->stage_count[phase * M + s];
    memset(times, 0, (size_t)2 * S->n_ops * sizeof(double));
    memcpy(times + 2 * lo, p->tt.measured + 2 * lo, (size_t)(hi - lo) * 2 * sizeof(double));
}

// The last step as it ran: every stage contributes the times of its own ops, one sum gathers
// them, and every stage gets the timetable with measured times (free measured->ops).
int report_gather_measured(Pipeline *p, Schedule *measured, FgError *err) {
    double *times = calloc((size_t)2 * p->tt.sched.n_ops, sizeof(double));
    report_local_measured(p, times);
    int rc = p->tr->allreduce_sum(p->tr, times, 2 * p->tt.sched.n_ops, err);
    report_measured_schedule(p, (int)(p->tt.plan - p->tt.plans), times, measured);
    free(times);
    return rc;
}

void report_measured_schedule(const Pipeline *p, int phase, const double *times, Schedule *measured) {
    const Schedule *S = &p->tt.sched;
    int M = S->M, first = S->stage_first[phase * M], count = 0;
    for (int t = 0; t < M; t++) count += S->stage_count[phase * M + t];
    *measured = *S;
    measured->n_phases = 1, measured->n_ops = count;
    measured->ops = malloc((size_t)count * sizeof(ScheduledOp));
    measured->stage_first = malloc((size_t)M * sizeof(int));
    measured->stage_count = malloc((size_t)M * sizeof(int));
    memcpy(measured->ops, S->ops + first, (size_t)count * sizeof(ScheduledOp));
    measured->makespan = measured->last_f = 0;
    for (int t = 0; t < M; t++) {
        measured->stage_first[t] = S->stage_first[phase * M + t] - first;
        measured->stage_count[t] = S->stage_count[phase * M + t];
    }
    for (int i = 0; i < count; i++) {
        ScheduledOp *o = &measured->ops[i];
        o->start = times[2 * (first + i)], o->end = times[2 * (first + i) + 1];
        measured->makespan = fmax(measured->makespan, o->end);
        if (o->kind == OP_F) measured->last_f = fmax(measured->last_f, o->end);
    }
    // As run there is no separate fg timetable: the bubble is all time not spent in F or U.
    measured->fg_makespan = measured->makespan;
}

void report_free_measured(Schedule *m) {
    free(m->ops);
    free(m->stage_first);
    free(m->stage_count);
}

// Planned (pid 0) and measured (pid 1) timelines as Chrome trace JSON.
int report_write_trace(const Schedule *planned, const Schedule *measured, const char *path,
                       FgError *err) {
    OutFile o;
    FILE *f = out_file_open(&o, "--trace", path, err);
    if (!f) return FG_ERR_INPUT;
    const Schedule *both[2] = {planned, measured};
    const char *labels[2] = {"planned", "measured"};
    int rc = schedule_write_chrome_traces(both, labels, 2, f, err);
    if (rc) out_file_abort(&o);
    return rc ? rc : out_file_commit(&o, err);
}

// , "name": [v0, v1, ...]: whole numbers whole, others with 4 decimals.
static void json_array(FILE *f, const char *name, const double *v, int n) {
    fprintf(f, ", \"%s\": [", name);
    for (int i = 0; i < n; i++) fprintf(f, v[i] == floor(v[i]) ? "%s%.0f" : "%s%.4f", i ? ", " : "", v[i]);
    fputc(']', f);
}

// , "op_costs": {...}: the seconds per op and stage the timetable was planned with, in full
// precision (fgpipe plan --costs rebuilds the run's timetable from them), its spec, and
// "measured": the same as the ops ran (their means over the run).
static void write_op_costs(FILE *f, const Config *c, const TrainResult *r) {
    char schedule[CONFIG_NAME_MAX];
    fprintf(f, ", \"op_costs\": {\"schedule\": \"%s\", \"lag\": %d, \"select\": %d",
            config_choice_name("schedule", c->timetable.schedule, schedule),
            config_timetable_lag(c), c->timetable.select);
    for (int measured = 0; measured < 2; measured++) {
        const double *costs = measured ? r->measured_costs : r->op_costs;
        if (measured) fputs(", \"measured\": {", f);
        for (int k = 0; k < N_OP_COSTS; k++) {
            fprintf(f, "%s\"%s\": ", measured && !k ? "" : ", ", op_cost_keys[k]);
            fg_write_json_doubles(f, costs + k * r->stages, r->stages);
        }
    }
    fputs("}}", f);
}

// A number as JSON: null where it is not finite (the test loss of an evaluation a signal stopped).
// The test loss and accuracy go at full precision: runs compare them bit for bit.
static const char *json_number(char *out, size_t size, const char *format, double v) {
    if (isfinite(v)) snprintf(out, size, format, v);
    else snprintf(out, size, "null");
    return out;
}

int train_write_summary(const Config *c, const TrainResult *r, const char *path, FgError *err) {
    char mode[CONFIG_NAME_MAX], perturb[CONFIG_NAME_MAX], est[CONFIG_NAME_MAX], loss[32], acc[32], bits[32];
    OutFile file;
    FILE *f = out_file_open(&file, "--summary-json", path, err);
    if (!f) return FG_ERR_INPUT;
    fprintf(f, "{\"mode\": \"%s\", \"perturb\": \"%s\", \"estimator\": \"%s\", \"shrink\": %g, "
            "\"tangents\": %d, \"timetable\": \"%s\", \"stages\": %d, \"layout_by\": \"%s\", \"layout\": [",
            config_choice_name("mode", c->method.mode, mode),
            c->method.mode == MODE_BP ? "none" : config_choice_name("perturb", c->method.perturb, perturb),
            c->method.mode == MODE_FG_BP ? config_choice_name("estimator", config_estimator(c), est) : "none",
            c->method.shrink, run_plan(c, 1).tangents, r->timetable ? r->timetable : "none", r->stages,
            r->layout_by ? r->layout_by : "boundaries");
    for (int s = 0; s <= r->stages; s++) fprintf(f, "%s%d", s ? ", " : "", r->layout[s]);
    fprintf(f,
            "], \"steps\": %ld, \"micro_batch\": %d, \"micro_batches\": %d, \"makespan_vs_fg\": %.4f, "
            "\"replicas\": %d, \"params\": %zu, \"first_loss\": %.6f, \"final_loss\": %.6f, \"test_loss\": %s, "
            "\"test_acc\": %s, \"samples_per_s\": %.1f, \"step_seconds\": %.6f, "
            "\"train_seconds\": %.3f, \"bubble_planned\": %.4f, \"bubble_used_by_b\": %.4f, "
            "\"bubble_measured\": %.4f, \"bubble_used_measured\": %.4f, \"peak_rss_bytes\": %zu, "
            "\"seed\": %u",
            r->steps, c->training.micro_batch, c->training.micro_batches, r->makespan_vs_fg,
            c->layout.replicas, r->n_params, r->first_loss,
            r->final_loss, json_number(loss, sizeof loss, "%.17g", r->test_loss),
            json_number(acc, sizeof acc, "%.17g", r->test_acc), r->samples_per_s, r->step_seconds,
            r->train_seconds, r->bubble_planned, r->bubble_used_by_b, r->bubble_measured,
            r->bubble_used_measured, r->peak_rss_bytes, c->training.seed);
    if (config_is_language(c))  // the validation split's loss per token, and tokens per second
        fprintf(f, ", \"val_loss\": %s, \"tokens_per_s\": %.1f", loss,
                r->samples_per_s * c->net.ctx);
    if (c->input.data == DATA_TEXT)  // tokens are bytes
        fprintf(f, ", \"val_bits_per_byte\": %s", json_number(bits, sizeof bits, "%.6f", r->test_loss / M_LN2));
    double work_ms[SCHED_MAX_STAGES];
    for (int s = 0; s < r->stages; s++) work_ms[s] = 1e3 * r->per_stage.work[s];
    json_array(f, "work_ms_stage", work_ms, r->stages);
    json_array(f, "peak_rss_stage", r->per_stage.peak_rss, r->stages);
    json_array(f, "stash_bytes_stage", r->per_stage.stash_bytes, r->stages);
    json_array(f, "activation_peak_bytes", r->per_stage.activation_peak, r->stages);
    fputs(", \"memory_bytes\": {", f);  // each owner's peak bytes by stage (mem_account.h)
    for (int o = 0; o < N_MEM_OWNERS; o++) {
        fprintf(f, "%s\"%s\": ", o ? ", " : "", mem_owner_keys[o]);
        fg_write_json_doubles(f, r->per_stage.memory[o], r->stages);
    }
    fputc('}', f);
    json_array(f, "n_corr_stage", r->per_stage.corrections, r->stages);
    json_array(f, "lag_stage", r->per_stage.lag, r->stages);
    json_array(f, "bubble_used_by_b_stage", r->per_stage.bubble_used, r->stages);
    json_array(f, "bubble_used_by_b_stage_measured", r->per_stage.bubble_used_measured, r->stages);
    write_op_costs(f, c, r);
    fputs("}\n", f);
    return out_file_commit(&file, err);
}

void report_io_bound(const Config *c, const Transport *t, const LayerSource *src, const IoBound *b,
                     int steps) {
    char rows[64] = "";
    if (config_is_language(c)) snprintf(rows, sizeof rows, " x ctx %d", c->net.ctx);
    fprintf(stderr, "fgpipe: stage %d out of core: %.2f GB on flash, %.3f GB in memory besides the "
            "slots (activations at micro_batch %d%s); over %d steps a step read %.6f GB and wrote "
            "%.6f GB; compute %.3f s per step needs %.2f GB/s, the flash gave %.2f GB/s read and "
            "%.2f GB/s write (I/O %.3f s per step): %s-bound\n", t->stage, src->flash_bytes / 1e9,
            src->work_bytes / 1e9, c->training.micro_batch, rows, steps, b->read_bytes / 1e9,
            b->write_bytes / 1e9, b->compute_seconds, b->needed_bandwidth / 1e9,
            b->read_bandwidth / 1e9, b->write_bandwidth / 1e9, b->io_seconds,
            b->flash_bound ? "flash" : "compute");
}

void report_io_step(const Transport *t, long step, double seconds, double waves_bound, const IoBound *b) {
    double bound = FG_MAX(b->io_seconds, b->compute_seconds);
    fprintf(stderr, "fgpipe: stage %d step %ld I/O: read %.3f GB, wrote %.3f GB, I/O %.2f s, compute "
            "%.2f s, bound %.2f s (%s), step %.2f s, bound / step %.2f; the waves' bound %.2f s, "
            "/ step %.2f\n", t->stage, step, b->read_bytes / 1e9, b->write_bytes / 1e9, b->io_seconds,
            b->compute_seconds, bound, b->flash_bound ? "flash" : "compute", seconds,
            seconds > 0 ? bound / seconds : 0.0, waves_bound, seconds > 0 ? waves_bound / seconds : 0.0);
}
