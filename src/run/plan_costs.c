// Reading the op costs a run planned its timetable with from its summary.json (train_report.c
// writes them: "op_costs"), with the few other fields that say which pipeline they are of.
// Not a JSON parser: the summary is fgpipe's own, flat but for the op_costs object.
#include "plan_internal.h"

#include <stdlib.h>
#include <string.h>

// The text after `"key":` within [text, end), or NULL.
static const char *value_of(const char *text, const char *end, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *v = strstr(text, pattern);
    if (!v || v >= end) return NULL;
    for (v += strlen(pattern); *v == ' '; v++) {}
    return v;
}

static int number_of(const char *text, const char *end, const char *key, double *out,
                     const char *path, FgError *err) {
    const char *v = value_of(text, end, key);
    char *stop;
    if (v) *out = strtod(v, &stop);
    if (!v || stop == v)
        return fg_fail(err, FG_ERR_INPUT, "--costs %s: no number \"%s\" (a summary.json of "
                       "fgpipe train)", path, key);
    return FG_OK;
}

// An array of exactly n numbers.
static int array_of(const char *text, const char *end, const char *key, double *out, int n,
                    const char *path, FgError *err) {
    const char *v = value_of(text, end, key);
    if (!v || *v != '[')
        return fg_fail(err, FG_ERR_INPUT, "--costs %s: no array \"%s\"", path, key);
    v++;
    for (int i = 0; i < n; i++) {
        char *stop;
        out[i] = strtod(v, &stop);
        if (stop == v)
            return fg_fail(err, FG_ERR_INPUT, "--costs %s: \"%s\" has %d values, the pipeline %d",
                           path, key, i, n);
        v = stop;
        while (*v == ' ' || *v == ',') v++;
    }
    if (*v != ']')
        return fg_fail(err, FG_ERR_INPUT, "--costs %s: \"%s\" has more than %d values", path, key, n);
    return FG_OK;
}

// The run's mode (MODE_*), read by the config's own table of mode names; -1 if none.
static int mode_of(const Config *cfg, const char *quoted) {
    char name[CONFIG_NAME_MAX];
    const char *close = quoted && *quoted == '"' ? strchr(quoted + 1, '"') : NULL;
    if (!close || close - quoted - 1 >= (long)sizeof name) return -1;
    snprintf(name, sizeof name, "%.*s", (int)(close - quoted - 1), quoted + 1);
    Config scratch = *cfg;
    FgError ignored = {0};
    return config_set(&scratch, "mode", name, &ignored) ? -1 : (int)scratch.method.mode;
}

int plan_read_costs(const Config *cfg, const char *path, int measured, int *mode_out, int *layout,
                    double *costs_out, FgError *err) {
    size_t n;
    char *text = fg_read_file("--costs", path, NULL, &n, err);
    if (!text) return err->code;
    const char *end = text + strlen(text), *costs = value_of(text, end, "op_costs");
    const char *mode = value_of(text, end, "mode");
    static const char *const keys[3] = {"stages", "micro_batches", "replicas"};
    const int want[3] = {cfg->layout.stages, cfg->training.micro_batches, cfg->layout.replicas};
    int rc = costs ? FG_OK
                   : fg_fail(err, FG_ERR_INPUT, "--costs %s: no \"op_costs\" (a summary.json of "
                             "fgpipe train, from this version on)", path);
    for (int i = 0; i < 3 && !rc; i++) {
        double v = 0.0;
        if (!(rc = number_of(text, costs, keys[i], &v, path, err)) && (int)v != want[i])
            rc = fg_fail(err, FG_ERR_INPUT, "--costs %s: the run had %s = %d, the config %d",
                         path, keys[i], (int)v, want[i]);
    }
    const int M = cfg->layout.stages;
    *mode_out = mode_of(cfg, mode);
    if (!rc && *mode_out < 0) rc = fg_fail(err, FG_ERR_INPUT, "--costs %s: no known \"mode\"", path);
    double first[SCHED_MAX_STAGES + 1];
    if (!rc) rc = array_of(text, costs, "layout", first, M + 1, path, err);
    for (int s = 0; s <= M && !rc; s++) layout[s] = (int)first[s];
    const char *from = measured && !rc ? value_of(costs, end, "measured") : costs;
    if (!rc && !from) rc = fg_fail(err, FG_ERR_INPUT, "--costs %s: no \"measured\" op costs", path);
    for (int k = 0; k < N_OP_COSTS && !rc; k++)
        rc = array_of(from, end, op_cost_keys[k], costs_out + k * M, M, path, err);
    fg_free(text);
    return rc;
}
