// Timetables as Chrome trace JSON (Perfetto, chrome://tracing).
#include "schedule_internal.h"

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
                fg_write_json_string(f, label);
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
        fg_write_json_string(f, label);
        fputs("}}", f);
        for (int s = 0; s < S->M; s++)
            fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                       "\"args\":{\"name\":\"stage %d\"}}", t, s, s);
        write_ops(f, S, t, label);
    }
    const Schedule *S = scheds[0];
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"label\":", f);
    fg_write_json_string(f, labels && labels[0] ? labels[0] : schedule_mode_name(S->mode));
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
