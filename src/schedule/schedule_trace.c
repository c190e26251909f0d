// Timetables as Chrome trace JSON (Perfetto, chrome://tracing), and what a stage gets from
// fg+bp's chains.
#include "schedule_internal.h"

#include <stdlib.h>

static void write_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

static void write_ops(FILE *f, const Schedule *S, int t, const char *label) {
    for (int p = 0; p < S->n_phases; p++)
        for (int s = 0; s < S->M; s++) {
            const ScheduledOp *ops;
            const int n = schedule_stage_ops(S, p, s, &ops);
            for (int i = 0; i < n; i++) {
                const ScheduledOp *o = &ops[i];
                char name[32];
                if (o->kind == OP_U) snprintf(name, sizeof name, "U");
                else snprintf(name, sizeof name, "%s%d%.*s", op_kind_name(o->kind), o->microbatch,
                              o->lag, "''''");
                fprintf(f, ",\n{\"name\":\"%s\",\"cat\":", name);
                write_json_string(f, label);
                fprintf(f, ",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                           "\"args\":{\"stage\":%d,\"microbatch\":%d,\"lag\":%d,\"phase\":%d}}",
                        t, o->stage, (o->start + p * S->makespan) * 1e6, (o->end - o->start) * 1e6,
                        o->stage, o->microbatch, o->lag, p);
            }
        }
}

int schedule_write_chrome_traces(const Schedule *const *scheds, const char *const *labels, int n,
                                 FILE *f, FgError *err) {
    if (!scheds || !f || n < 1) return fg_fail(err, FG_ERR_INPUT, "schedule trace: nothing to write");
    fputs("{\"traceEvents\":[", f);
    for (int t = 0; t < n; t++) {
        const Schedule *S = scheds[t];
        const char *label = labels && labels[t] ? labels[t] : schedule_mode_name(S->mode);
        // Metadata events name the process (one per timeline) and its tracks (one per stage).
        fprintf(f, "%s\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":",
                t ? "," : "", t);
        write_json_string(f, label);
        fputs("}}", f);
        for (int s = 0; s < S->M; s++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"stage %d\"}}", t, s, s);
        write_ops(f, S, t, label);
    }
    const Schedule *S = scheds[0];
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"label\":", f);
    write_json_string(f, labels && labels[0] ? labels[0] : schedule_mode_name(S->mode));
    fprintf(f, ",\"mode\":\"%s\",\"stages\":%d,\"microbatches\":%d,\"phases\":%d,\"chains\":%d,"
               "\"select\":%d,\"lag\":%d}}\n",
            schedule_mode_name(S->mode), S->M, S->N, S->n_phases, S->n_chains, S->select, S->lag);
    if (ferror(f)) return fg_fail(err, FG_ERR_INTERNAL, "schedule trace: write failed");
    return FG_OK;
}

int schedule_write_chrome_trace(const Schedule *S, FILE *f, const char *label, FgError *err) {
    if (!S) return fg_fail(err, FG_ERR_INPUT, "schedule trace: schedule or file is NULL");
    return schedule_write_chrome_traces(&S, &label, 1, f, err);
}

// ---------------------------------------------------------------------------------------------
// Per stage

// Most of the intervals [lo, hi) (repeating every `period`) that hold at once.
static int most_at_once(const double *lo, const double *hi, int n, double period) {
    int most = 0;
    for (int i = 0; i < n; i++) {
        int count = 0;
        for (int j = 0; j < n; j++)
            for (int k = -4; k <= 4; k++)  // a lifetime spans at most lag + 1 <= 3 steps
                count += lo[j] + k * period <= lo[i] && lo[i] < hi[j] + k * period;
        most = FG_MAX(most, count);
    }
    return most;
}

StageBubbles schedule_stage_bubbles(const Schedule *S, int s) {
    StageBubbles r = {0};
    if (S->mode == SCHED_FG) return r;
    const double T = S->makespan, period = S->n_phases * T;
    const int cap = S->n_phases * S->N;
    double *stash_lo = malloc(sizeof(double) * (size_t)cap), *stash_hi = malloc(sizeof(double) * (size_t)cap);
    double *kept_lo = malloc(sizeof(double) * (size_t)cap), *kept_hi = malloc(sizeof(double) * (size_t)cap);
    int n = 0;
    for (int p = 0; p < S->n_phases; p++) {
        const ScheduledOp *ops, *f_ops;
        const int count = schedule_stage_ops(S, p, s, &ops);
        for (int i = 0; i < count; i++) {
            if (ops[i].kind != OP_BW && ops[i].kind != OP_B) continue;
            const ScheduledOp *bw = &ops[i];  // the stash's last use
            const int source = schedule_source_phase(S, p, bw->lag);
            const int n_f = schedule_stage_ops(S, source, s, &f_ops);
            double f_start = 0.0;
            for (int j = 0; j < n_f; j++)
                if (f_ops[j].kind == OP_F && f_ops[j].microbatch == bw->microbatch) f_start = f_ops[j].start;
            const ScheduledOp *bi = schedule_chain_op(S, OP_BI, source, bw->microbatch, s);
            const double bi_end = bi ? source * T + bi->lag * T + bi->end : 0.0;  // B: no Bi
            // Unrolled time, the source step starting at source * T.
            stash_lo[n] = source * T + f_start, stash_hi[n] = source * T + bw->lag * T + bw->end;
            kept_lo[n] = bw->kind == OP_B ? stash_hi[n] : bi_end, kept_hi[n] = stash_hi[n];
            r.corrections++;
            r.max_lag = FG_MAX(r.max_lag, bw->lag);
            n++;
        }
        for (int i = 0; i < count; i++)
            if (ops[i].kind == OP_BI) r.max_lag = FG_MAX(r.max_lag, ops[i].lag);
    }
    r.stashes = most_at_once(stash_lo, stash_hi, n, period);
    r.kept = most_at_once(kept_lo, kept_hi, n, period);
    free(stash_lo), free(stash_hi), free(kept_lo), free(kept_hi);
    double used, idle;
    timetable_stage_fill(S, s, &used, &idle);
    r.bubble_used = S->mode == SCHED_FG_BP && idle > 0.0 ? used / idle : 0.0;
    return r;
}
