// The token table's row blocks chosen by the budget (table_rows.h).
#include "table_rows.h"

#include <stdlib.h>
#include <string.h>

#include "mem_account.h"
#include "pipeline.h"
#include "slot_plan.h"

typedef struct {
    const Backend *be;
    const Config *c;
    Model *m;
    const int *layout;
    int stage, spill;
} Ask;

typedef struct {
    double in_memory;  // the stage in memory
    double work;       // streamed, besides its slots (the tied copies' gradients where they cannot spill)
    double floor;      // streamed with its slots' floor
    double two;        // streamed with two slots of its largest layer (slot_plan_needs)
} Needs;

// What the stage needs besides the runtime with its tables in blocks of `rows` (0: whole).
static int need_at(const Ask *a, int rows, Needs *n, FgError *err) {
    const Config *c = a->c;
    int first = a->layout[a->stage], last = a->layout[a->stage + 1];
    model_set_row_blocks(a->m, rows);
    int rc = pipeline_stage_needs(a->be, c, a->m, a->layout, a->stage, c->layout.stages,
                                  c->layout.replicas, &n->in_memory, &n->work, err);
    SlotNeeds s = slot_plan_needs(c, a->m, first, last);
    double tied = a->spill ? 0.0 : s.tied;
    n->floor = n->work + tied + s.floor, n->two = n->work + tied + s.two;
    return rc;
}

// Rows of a block when the table's `table` rows go in n blocks: as few rows as make n blocks,
// rounded up to the unit.
static int rows_of(int table, int n, int unit) {
    int rows = (table + n - 1) / n;
    return (rows + unit - 1) / unit * unit;
}

// The fewest blocks (so the most rows) whose need (two slots, or the floor) with `runtime`
// fits the budget, *rows 0 where none does. The need falls as the blocks shrink: bisection.
static int fewest_blocks(const Ask *a, int table, int unit, int two, double runtime, int *rows,
                         FgError *err) {
    int lo = 2, hi = (table + unit - 1) / unit, rc;
    Needs n;
    *rows = 0;
    if ((rc = need_at(a, rows_of(table, hi, unit), &n, err))) return rc;
    if (runtime + (two ? n.two : n.floor) > a->c->layout.mem_budget) return FG_OK;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if ((rc = need_at(a, rows_of(table, mid, unit), &n, err))) return rc;
        if (runtime + (two ? n.two : n.floor) <= a->c->layout.mem_budget) hi = mid;
        else lo = mid + 1;
    }
    *rows = rows_of(table, hi, unit);
    return FG_OK;
}

// The streamed floor's refusal with the table whole (slot_plan_make's message), and what row
// blocks would need: the smallest budget with the smallest blocks, or why the run takes none.
static int refuse(const Ask *a, double work, double runtime, const char *forbids, const char *why,
                  double in_blocks, FgError *err) {
    const Config *c = a->c;
    SlotPlan sp;
    FgError whole = {0};
    model_set_row_blocks(a->m, 0);
    slot_plan_make(a->be, c, a->m, a->layout[a->stage], a->layout[a->stage + 1], a->stage, work,
                   runtime, a->spill, &sp, &whole);
    if (forbids)
        return fg_fail(err, FG_ERR_INPUT, "%s; the token table in row blocks would take at least "
                       "%.0f bytes, but %s forbids them: %s", whole.msg, in_blocks, forbids, why);
    return fg_fail(err, FG_ERR_INPUT, "%s; with the token table in row blocks (chosen by the "
                   "budget), at least %.0f bytes (blocks of %d rows)", whole.msg, in_blocks,
                   config_table_block_unit(c));
}

int table_rows_plan(const Backend *be, const Config *c, Model *m, const int *layout, int stage,
                    double runtime, int spill, int *rows, FgError *err) {
    const Ask a = {be, c, m, layout, stage, spill};
    const double budget = c->layout.mem_budget, margin = runtime + mem_runtime_margin(c);
    const int table = model_table_rows(m, layout[stage], layout[stage + 1]);
    const int unit = config_table_block_unit(c);
    *rows = 0;
    if (c->layout.table_block_rows || budget <= 0 || table <= unit) return FG_OK;
    Needs whole, blocks;
    int rc = need_at(&a, 0, &whole, err);
    if (rc || (!c->layout.stream && whole.in_memory + runtime <= budget)) return rc;  // resident
    SlotPlan sp;
    FgError fits = {0};
    char why[320], option[CONFIG_OPTION_MAX];
    const int forbidden = config_table_blocks_forbidden(c, option, why, sizeof why);
    if (!slot_plan_make(be, c, m, layout[stage], layout[stage + 1], stage, whole.work, runtime,
                        spill, &sp, &fits)) {
        // The table whole fits, as the run's slot plan counts it. Where one slot of it does and
        // two do not, nothing overlaps its read (a wave starts or ends waiting for the whole
        // table): row blocks that give two slots are taken instead.
        if (forbidden || whole.two + margin <= budget) return FG_OK;
        rc = fewest_blocks(&a, table, unit, 1, margin, rows, err);
        model_set_row_blocks(m, 0);
        return rc;
    }
    // With the runtime's margin (a measured runtime varies between processes by some 100 KB):
    // two slots, then the floor; at the floor without the margin only where nothing else fits.
    if (!forbidden) rc = fewest_blocks(&a, table, unit, 1, margin, rows, err);
    if (!forbidden && !rc && !*rows) rc = fewest_blocks(&a, table, unit, 0, margin, rows, err);
    if (!forbidden && !rc && !*rows) rc = fewest_blocks(&a, table, unit, 0, runtime, rows, err);
    if (!rc && !*rows) rc = need_at(&a, unit, &blocks, err);
    model_set_row_blocks(m, 0);
    if (rc || *rows || blocks.floor >= whole.floor) return rc;  // no help from blocks: the run says why
    return refuse(&a, whole.work, runtime, forbidden ? option : NULL, why, margin + blocks.floor, err);
}

int table_rows_choose(const Backend *be, const Config *c, Model *m, const int *layout, Transport *t,
                      double runtime, int spill, FgError *err) {
    if (c->layout.table_block_rows) {
        model_set_row_blocks(m, c->layout.table_block_rows);
        return FG_OK;
    }
    int mine, n = t->stages * t->replicas, rows = 0;
    int rc = table_rows_plan(be, c, m, layout, t->stage, runtime, spill, &mine, err);
    if (rc) return rc;
    // Every rank learns every choice (one sum over the grid): the copies of a tied table on two
    // stages, and the replicas sharing a store, take the same blocks.
    double *all = calloc((size_t)n, sizeof(double));
    all[t->stage * t->replicas + t->replica] = mine;
    rc = t->allreduce_sum_world(t, all, n, err);
    for (int i = 0; i < n && !rc; i++)
        if (all[i] > 0 && (!rows || (int)all[i] < rows)) rows = (int)all[i];
    free(all);
    if (rc) return rc;
    model_set_row_blocks(m, rows);
    if (rows && t->stage == 0 && t->replica == 0) table_rows_say(c, m, rows, stderr);
    return FG_OK;
}

// 256M, 4G, 1536K or bytes, as --mem-budget takes them.
static void budget_text(double bytes, char *out, size_t size) {
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        double unit = (double)(1ull << (10 * (3 - i)));
        if (bytes >= unit && bytes / unit == (double)(long long)(bytes / unit)) {
            snprintf(out, size, "%lld%c", (long long)(bytes / unit), units[i]);
            return;
        }
    }
    snprintf(out, size, "%.0f-byte", bytes);
}

void table_rows_say(const Config *c, const Model *m, int rows, FILE *out) {
    int blocks = 0;
    for (int l = 0; l < m->n_layers; l++) blocks = FG_MAX(blocks, layer_blocks(&m->layers[l]));
    char budget[32];
    budget_text(c->layout.mem_budget, budget, sizeof budget);
    fprintf(out, "fgpipe: the token table streams in row blocks of %d rows (%d blocks) to fit the "
            "%s budget; table_block_rows overrides\n", rows, blocks, budget);
}
