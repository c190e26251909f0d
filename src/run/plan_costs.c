// Reading the op costs a run planned its timetable with from its summary.json (train_report.c
// writes them: "op_costs"), with the few other fields that say which pipeline they are of.
// Not a JSON parser: the summary is fgpipe's own, flat but for the op_costs object.
#include "plan_internal.h"

#include <errno.h>
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

static char *read_text(const char *path, FgError *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fg_fail(err, FG_ERR_INPUT, "--costs %s: %s", path, strerror(errno));
        return NULL;
    }
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) text = realloc(text, cap = 2 * cap + 4096 + 1);
        size_t got = fread(text + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    fclose(f);
    text[n] = 0;
    return text;
}

// Checks the file is of cfg's pipeline (stages, micro-batches, replicas), then fills the cost
// set of its mode: its layout and costs (planned, or measured). *mode_out: the file's mode.
int plan_read_costs(const Config *cfg, const char *path, int measured, int *mode_out, CostSet *out,
                    FgError *err) {
    char *text = read_text(path, err);
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
    *mode_out = !mode ? -1 : strncmp(mode, "\"bp\"", 4) == 0 ? MODE_BP
              : strncmp(mode, "\"fg\"", 4) == 0 ? MODE_FG : strncmp(mode, "\"fg+bp\"", 7) == 0 ? MODE_FG_BP : -1;
    if (!rc && *mode_out < 0) rc = fg_fail(err, FG_ERR_INPUT, "--costs %s: no known \"mode\"", path);
    double layout[SCHED_MAX_STAGES + 1];
    if (!rc) rc = array_of(text, costs, "layout", layout, M + 1, path, err);
    for (int s = 0; s <= M && !rc; s++) out->layout[s] = (int)layout[s];
    static const char *const names[N_OP_COSTS] = {"f", "bi", "bw", "u", "zero"};
    const char *from = measured && !rc ? value_of(costs, end, "measured") : costs;
    if (!rc && !from) rc = fg_fail(err, FG_ERR_INPUT, "--costs %s: no \"measured\" op costs", path);
    for (int k = 0; k < N_OP_COSTS && !rc; k++)
        rc = array_of(from, end, names[k], out->costs + k * M, M, path, err);
    free(text);
    return rc;
}
