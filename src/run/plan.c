// fgpipe plan (plan.h): three cost sets (bp's plain F, fg's and fg+bp's F with tangents), five
// timetables built from them exactly as a run builds its own, and their figures.
#include "plan_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec_plan.h"
#include "plan_node.h"
#include "op_timing.h"
#include "pipeline.h"
#include "progress.h"
#include "run_plan.h"
#include "table_rows.h"
#include "train_internal.h"

enum { SET_BP, SET_FG, SET_FG_BP, N_SETS };
static const char *const set_mode_names[N_SETS] = {"bp", "fg", "fg+bp"};
static const int set_modes[N_SETS] = {MODE_BP, MODE_FG, MODE_FG_BP};

typedef struct {
    int set;
    const char *schedule;  // bp's schedule key, or NULL
} Planned;
static const Planned planned[] = {{SET_BP, "gpipe"}, {SET_BP, "1f1b"}, {SET_BP, "zb"},
                                  {SET_FG, NULL}, {SET_FG_BP, NULL}};
enum { N_PLANNED = sizeof planned / sizeof planned[0] };

// The cost set's stages one at a time: their sizes, and unless the costs came from a file,
// their op costs as the run's start-up times them.
static int fill_stages(CostSet *cs, const Backend *be, const Model *m, int timed, FgError *err) {
    const Config *c = &cs->cfg;
    const int M = c->layout.stages, B = c->training.micro_batch;
    const RunPlan run = run_plan(c, c->layout.replicas);
    int rc = FG_OK;
    for (int s = 0; s < M && !rc; s++) {
        Stage st;
        if ((rc = pipeline_stage_init(&st, be, c, m, cs->layout[s], cs->layout[s + 1], err))) break;
        double cost[N_OP_COSTS];
        if (timed && !(rc = pipeline_time_ops(be, c, m, cs->layout, s, M, 0, c->layout.replicas,
                                              cost, err)))
            for (int k = 0; k < N_OP_COSTS; k++) cs->costs[k * M + s] = cost[k];
        cs->act[s] = activation_sizes(c, &st, s == 0, s == M - 1);
        memset(cs->resident[s], 0, sizeof cs->resident[s]);
        mem_resident_bytes(c, m, cs->layout[s], cs->layout[s + 1], cs->resident[s]);
        // In the type of the layer at each cut (BF16 in a bf16 run), as the run sends them.
        const size_t acts = (size_t)B * m->layers[cs->layout[s + 1] - 1].out;
        cs->forward_msg[s] = (double)stage_message_bytes(&st, cs->layout[s + 1], acts,
                                                         run.sends_tangents ? run.tangents : 0);
        const size_t adjoints = (size_t)B * m->layers[cs->layout[s]].in;
        cs->adjoint_msg[s] = (double)stage_message_bytes(&st, cs->layout[s], adjoints, 0);
        stage_free(&st);
    }
    return rc;
}

// A plan times every op of every stage here, for three cost sets, five rounds each, one rank on
// the CPU: GPT-2 124M's shape at ctx 1024 took minutes (at ctx 64 on 4 stages, counted 626
// GFLOP below, 301 s at a load of 8), Llama 8B's cannot fit. A set is not timed (its rows say
// why) where its GEMM work passes PLAN_FLOP_BUDGET, where the buffers its largest stage times
// with pass 3/4 of the memory, or once the sets before it took PLAN_SECONDS.
#define PLAN_FLOP_BUDGET 2e11
enum { PLAN_SECONDS = 60 };
enum { TIMING_COPIES = 7 };  // the stage's weights; w, Bi's lagged w, g, the reference, 2 states

static int too_big_to_time(const Config *c, const Model *m, const int *layout, char *why, size_t size) {
    const int M = c->layout.stages, timed_cut = layout_is_timed(c, M);
    if (c->layout.device != DEVICE_CPU) return 0;  // bounds of this CPU and its memory (a GPU: 60 s)
    const double rows = (double)c->training.micro_batch * m->tokens;
    const double memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    size_t biggest = 0;
    int big = 0;
    for (int s = 0; s < M; s++) {
        size_t n = model_range_count(m, layout[s], layout[s + 1]);
        if (n > biggest) biggest = n, big = s;
    }
    // F, Bi, Bw: 2 flops per parameter and row each, five rounds, the stages (and the layers
    // one by one, for a timed cut).
    double flops = 6.0 * rows * (double)m->n_params * 5 * (timed_cut ? 2 : 1);
    double bytes = (double)biggest * sizeof(float) * TIMING_COPIES;
    if (bytes > 0.75 * memory)
        snprintf(why, size, "stage %d's %zu parameters need about %.1f GiB to time, this machine has "
                 "%.1f GiB: more stages", big, biggest, bytes / 1073741824.0, memory / 1073741824.0);
    else if (flops > PLAN_FLOP_BUDGET)
        snprintf(why, size, "timing its ops is about %.0f GFLOP (%zu parameters x %.0f rows, 3 ops, 5 "
                 "rounds), over the plan's %.0f: a smaller ctx or micro_batch", flops / 1e9,
                 m->n_params, rows, PLAN_FLOP_BUDGET / 1e9);
    else
        return 0;
    return 1;
}

// Cut as the run cuts (by the work of its layers timed here, where it times them), then timed;
// not timed where that passes the plan's bounds (cut by parameters, cs->untimed says why).
static int time_cost_set(CostSet *cs, const Backend *be, const Model *m, FgError *err) {
    const Config *c = &cs->cfg;
    const int M = c->layout.stages;
    double *layer_cost = NULL;
    int rc = layout_cut(c, m, M, NULL, cs->layout, NULL, NULL, NULL, 0, err);
    if (rc || too_big_to_time(c, m, cs->layout, cs->untimed, sizeof cs->untimed)) return rc;
    if (layout_is_timed(c, M)) {
        layer_cost = calloc((size_t)m->n_layers * N_OP_COSTS, sizeof(double));
        rc = layout_time_layers(c, be, m, c->layout.replicas, layer_cost, err);
    }
    if (!rc) rc = layout_cut(c, m, M, layer_cost, cs->layout, NULL, NULL, NULL, 0, err);
    free(layer_cost);
    snprintf(cs->source, sizeof cs->source, "timed here, one stage at a time");
    return rc ? rc : fill_stages(cs, be, m, 1, err);
}

static int make_cost_sets(const Config *cfg, const Backend *be, const Model *m, const PlanArgs *a,
                          CostSet *sets, FgError *err) {
    int file_mode = -1, rc = FG_OK, file_layout[SCHED_MAX_STAGES + 1];
    double file_costs[N_OP_COSTS * SCHED_MAX_STAGES];
    if (a->costs_path && (rc = plan_read_costs(cfg, a->costs_path, a->measured, &file_mode,
                                               file_layout, file_costs, err)))
        return rc;
    const double start = wall_seconds();
    for (int i = 0; i < N_SETS && !rc; i++) {
        CostSet *cs = &sets[i];
        cs->cfg = *cfg;
        if ((rc = config_set(&cs->cfg, "mode", set_mode_names[i], err))) break;
        if (set_modes[i] != file_mode && wall_seconds() - start > PLAN_SECONDS) {
            snprintf(cs->untimed, sizeof cs->untimed, "the plan's %d s of timing went to the modes "
                     "before it", PLAN_SECONDS);
            rc = layout_cut(&cs->cfg, m, cfg->layout.stages, NULL, cs->layout, NULL, NULL, NULL, 0, err);
            continue;
        }
        if (set_modes[i] != file_mode) {
            rc = time_cost_set(cs, be, m, err);
            continue;
        }
        memcpy(cs->layout, file_layout, sizeof cs->layout);
        memcpy(cs->costs, file_costs, sizeof cs->costs);
        snprintf(cs->source, sizeof cs->source, "%s in %s", a->measured ? "as its ops ran" : "as planned",
                 a->costs_path);
        rc = fill_stages(cs, be, m, 0, err);
    }
    return rc;
}

// The largest op group of stage s in any phase, as a resident run groups its ops.
static int max_group(const Schedule *S, int s) {
    int group = 1;
    for (int ph = 0; ph < S->n_phases; ph++) {
        ExecPlan ep;
        exec_plan_build(S, ph, s, 0, &ep);
        group = FG_MAX(group, ep.max_group);
        exec_plan_free(&ep);
    }
    return group;
}

// A stage's activations as a resident run allocates them: the timetable's stashes and kept
// adjoints at once (mem_account.h).
static void figures_of(const Schedule *S, const CostSet *cs, Figures *f) {
    const int M = S->M, N = S->N;
    *f = (Figures){.step = S->makespan, .bubble = schedule_stats(S).bubble_fraction};
    for (int s = 0; s < M; s++) {
        const StageBubbles b = schedule_stage_bubbles(S, s);
        f->b_ops[s] = (double)b.corrections / S->n_phases;
        double act[N_MEM_ACTIVATIONS];
        f->activations[s] = activation_bytes(&cs->act[s], b.stashes, b.kept, max_group(S, s), 1, act);
        for (int o = 0; o < N_MEM_OWNERS; o++)
            f->memory[o][s] = o < N_MEM_ACTIVATIONS ? act[o] : cs->resident[s][o];
        f->sent[s] = s < M - 1 ? N * cs->forward_msg[s] : 0.0;
        for (int p = 0; p < S->n_phases; p++) {
            const ScheduledOp *ops;
            const int n = schedule_stage_ops(S, p, s, &ops);
            for (int i = 0; i < n; i++)
                if (op_adjoint_taker_lag(S, p, &ops[i]) >= 0) f->sent[s] += cs->adjoint_msg[s] / S->n_phases;
        }
    }
}

// Per-stage values: each for up to 8 stages, else their range.
static void print_list(FILE *out, const double *v, int M, double unit, const char *fmt, int width) {
    char buf[256] = "", one[32];
    double lo = v[0], hi = v[0];
    for (int s = 0; s < M; s++) {
        lo = FG_MIN(lo, v[s]), hi = FG_MAX(hi, v[s]);
        snprintf(one, sizeof one, fmt, v[s] / unit);
        if (M <= 8) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", s ? " " : "", one);
    }
    if (M > 8) {
        snprintf(buf, sizeof buf, fmt, lo / unit);
        snprintf(one, sizeof one, fmt, hi / unit);
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "..%s", one);
    }
    fprintf(out, "  %-*s", width, buf);
}

// The rest of the stage beside its activations, resident (mem_account.h's owners).
static void print_memory(FILE *out, const Figures *fig, int M) {
    fprintf(out, "          memory MiB by stage:");
    for (int o = N_MEM_ACTIVATIONS; o < N_MEM_OWNERS; o++) {
        double sum = 0.0;
        for (int s = 0; s < M; s++) sum += fig->memory[o][s];
        if (sum <= 0) continue;
        fprintf(out, " %s", mem_owner_keys[o]);
        print_list(out, fig->memory[o], M, 1048576.0, "%.2f", 0);
    }
    fputc('\n', out);
}

static void print_cost_set(FILE *out, const CostSet *cs, int set) {
    static const char *const names[N_OP_COSTS] = {"F", "Bi", "Bw", "U", "clear"};
    const int M = cs->cfg.layout.stages;
    if (cs->untimed[0]) {
        fprintf(out, "%s op costs: not timed (%s; or --costs SUMMARY.json of a %s run)\n",
                set_mode_names[set], cs->untimed, set_mode_names[set]);
        return;
    }
    fprintf(out, "%s op costs (%s), ms; stages start at layers", set_mode_names[set], cs->source);
    for (int s = 0; s < M; s++) fprintf(out, " %d", cs->layout[s]);
    fputc('\n', out);
    for (int k = 0; k < N_OP_COSTS; k++) {
        if (set == SET_FG && (k == COST_BI || k == COST_BW)) continue;  // fg runs no B ops
        fprintf(out, "  %-5s", names[k]);
        print_list(out, cs->costs + k * M, M, 1e-3, "%.3f", 0);
        fputc('\n', out);
    }
}

static void json_list(FILE *f, const char *name, const double *v, int n) {
    fprintf(f, ", \"%s\": ", name);
    fg_write_json_doubles(f, v, n);
}

// name: the row's (fg+bp's row keeps its name when c alone chose another timetable, named by
// "timetable").
static void json_schedule(FILE *f, int first, const char *name, const Schedule *S, const Figures *fig) {
    fprintf(f, "%s\n  {\"schedule\": \"%s\", \"timetable\": \"%s\", \"step_seconds\": %.17g, "
            "\"bubble\": %.6f, \"n_phases\": %d", first ? "" : ",", name, schedule_mode_name(S->mode),
            fig->step, fig->bubble, S->n_phases);
    json_list(f, "b_ops", fig->b_ops, S->M);
    json_list(f, "activation_bytes", fig->activations, S->M);
    fputs(", \"memory_bytes\": {", f);  // by owner (mem_account.h), resident
    for (int o = 0; o < N_MEM_OWNERS; o++) {
        fprintf(f, "%s\"%s\": ", o ? ", " : "", mem_owner_keys[o]);
        fg_write_json_doubles(f, fig->memory[o], S->M);
    }
    fputc('}', f);
    json_list(f, "sent_bytes", fig->sent, S->M);
    fputs(", \"ops\": [", f);  // kind, stage, micro-batch, lag, phase, start, end
    for (int p = 0; p < S->n_phases; p++)
        for (int s = 0; s < S->M; s++) {
            const ScheduledOp *ops;
            const int n = schedule_stage_ops(S, p, s, &ops);
            for (int i = 0; i < n; i++)
                fprintf(f, "%s[\"%s\", %d, %d, %d, %d, %.17g, %.17g]", p + s + i ? ", " : "",
                        op_kind_name(ops[i].kind), s, ops[i].microbatch, ops[i].lag, p,
                        ops[i].start, ops[i].end);
        }
    fputs("]}", f);
}

static int plan_schedules(const CostSet *sets, FILE *out, FILE *json, Figures *figs, FgError *err) {
    const int M = sets[0].cfg.layout.stages;
    int rc = FG_OK, json_rows = 0;
    fprintf(out, "\n%-9s %9s %7s  %-*s  %-*s  %s\n", "schedule", "step ms", "bubble", M <= 8 ? 4 * M : 9,
            "B ops/step", M <= 8 ? 6 * M : 13, "activations MiB", "sent MiB/step (by stage)");
    for (int i = 0; i < N_PLANNED && !rc; i++) {
        const CostSet *cs = &sets[planned[i].set];
        Config c = cs->cfg;
        figs[i] = (Figures){0};
        if (cs->untimed[0]) {
            const char *name = planned[i].schedule ? planned[i].schedule : set_mode_names[planned[i].set];
            fprintf(out, "%-9s not timed\n", name);
            continue;
        }
        if (planned[i].schedule && (rc = config_set(&c, "schedule", planned[i].schedule, err))) break;
        Schedule S;
        char choice[256];
        if ((rc = pipeline_build_timetable(&c, M, cs->costs, 0, &S, choice, sizeof choice, err))) break;
        Figures fig;
        figures_of(&S, cs, &fig);
        figs[i] = fig;
        const char *name = planned[i].set == SET_FG_BP ? "fg+bp" : schedule_mode_name(S.mode);
        fprintf(out, "%-9s %9.3f %6.1f%%", name, 1e3 * fig.step, 100 * fig.bubble);
        print_list(out, fig.b_ops, M, 1.0, "%g", M <= 8 ? 4 * M : 9);
        print_list(out, fig.activations, M, 1048576.0, "%.2f", M <= 8 ? 6 * M : 13);
        print_list(out, fig.sent, M, 1048576.0, "%.2f", 0);
        fputc('\n', out);
        if (choice[0]) fprintf(out, "          (%s)\n", choice);
        FgError why = {0};
        if (pipeline_check_every_stage_learns(&c, &S, &why))
            fprintf(out, "          (a run refuses this timetable: %s)\n", why.msg);
        print_memory(out, &fig, M);
        if (json) json_schedule(json, !json_rows++, name, &S, &fig);
        schedule_free(&S);
    }
    return rc;
}

static void json_cost_sets(FILE *f, const CostSet *sets) {
    const Config *c = &sets[0].cfg;
    const int M = c->layout.stages;
    fprintf(f, "{\"stages\": %d, \"micro_batches\": %d, \"micro_batch\": %d, \"replicas\": %d, "
               "\"cost_sets\": [", M, c->training.micro_batches, c->training.micro_batch, c->layout.replicas);
    for (int i = 0; i < N_SETS; i++) {
        fprintf(f, "%s\n  {\"mode\": \"%s\", \"source\": ", i ? "," : "", set_mode_names[i]);
        fg_write_json_string(f, sets[i].source);
        fputs(", \"layout\": [", f);
        for (int s = 0; s <= M; s++) fprintf(f, "%s%d", s ? ", " : "", sets[i].layout[s]);
        fputc(']', f);
        for (int k = 0; k < N_OP_COSTS; k++) json_list(f, op_cost_keys[k], sets[i].costs + k * M, M);
        fputc('}', f);
    }
    fputs("],\n \"schedules\": [", f);
}

// A plan with no mode timed has nothing to show (exit 2); --batches needs all three.
static int check_timed(const CostSet *sets, int batches, FgError *err) {
    int untimed = 0, first = -1;
    for (int i = 0; i < N_SETS; i++)
        if (sets[i].untimed[0]) untimed++, first = first < 0 ? i : first;
    if (untimed == N_SETS)
        return fg_fail(err, FG_ERR_INPUT, "plan: no mode could be timed here (%s; or --costs "
                       "SUMMARY.json of a run)", sets[0].untimed);
    if (batches && untimed)
        return fg_fail(err, FG_ERR_INPUT, "plan --batches: %s not timed (%s)", set_mode_names[first],
                       sets[first].untimed);
    return FG_OK;
}

// The runtime every stage's process holds besides its buffers, as a run counts it against
// mem_budget: mem_runtime, or measured here before the model is built (a run measures its own
// later, with MPI and its data up: an estimate of it).
static void count_runtime(CostSet *sets, double runtime, FILE *out) {
    for (int i = 0; i < N_SETS; i++)
        for (int s = 0; s < sets[i].cfg.layout.stages; s++) sets[i].resident[s][MEM_RUNTIME] = runtime;
    fprintf(out, "runtime %.1f MiB per stage's process (the program, its libraries and data, counted "
            "against mem_budget: %s)\n", runtime / 1048576.0, sets[0].cfg.layout.mem_runtime >= 0 ?
            "mem_runtime" : "estimated from this process at start-up; a run measures its own");
}

// The token table's row blocks a run of the config chooses for mem_budget (table_rows.h), set on
// m for the figures after (plan --batches): the fewest rows any stage of its cut chose, with the
// plan's runtime (a run measures its own: the same choice where mem_runtime sets it). A budget
// the run would refuse is said, not refused.
static void plan_table_rows(const Config *cfg, const Backend *be, Model *m, const CostSet *sets,
                            double runtime, FILE *out) {
    const CostSet *cs = &sets[0];
    for (int i = 0; i < N_SETS; i++)
        if (set_modes[i] == cfg->method.mode) cs = &sets[i];
    int rows = 0, mine, hand = cfg->layout.table_block_rows;
    for (int s = 0; s < cfg->layout.stages && !hand && cfg->layout.mem_budget > 0; s++) {
        FgError why = {0};
        if (table_rows_plan(be, cfg, m, cs->layout, s, runtime, 1, &mine, &why))
            fprintf(out, "(a run refuses mem_budget: %s)\n", why.msg);
        else if (mine && (!rows || mine < rows))
            rows = mine;
    }
    model_set_row_blocks(m, hand ? hand : rows);
    if (rows) table_rows_say(cfg, m, rows, out);
}

int plan_print(const Config *cfg, const Backend *be, const PlanArgs *a, FILE *out, FgError *err) {
    if (a->node) {  // a node described: its curves from its figures, nothing timed here
        NodeSpec node;
        int rc = plan_node_parse(a->node, &node, err);
        return rc ? rc : plan_print_node(cfg, &node, a->node_params, a->node_batch ? a->node_batch : 64, out, err);
    }
    const double runtime = mem_runtime_bytes(cfg);  // before the plan's own buffers
    Model m;
    int rc = train_build_model(cfg, 1, &m, err);
    if (rc) return rc;
    for (int l = 0; l < m.n_layers; l++) m.layers[l].stored_bf16 = a->frozen_bf16 && m.layers[l].frozen;
    CostSet *sets = calloc(N_SETS, sizeof *sets);
    FILE *json = NULL;
    OutFile json_file;
    if (!(rc = make_cost_sets(cfg, be, &m, a, sets, err)) && a->json_path &&
        !(json = out_file_open(&json_file, "plan --json", a->json_path, err)))
        rc = FG_ERR_INPUT;
    if (!rc) {
        const char *threads = getenv("OMP_NUM_THREADS");
        fprintf(out, "fgpipe plan: %d stages, %d micro-batches of %d, %d replica%s, %zu parameters; "
                "timed with OMP_NUM_THREADS = %s (give it a rank's threads in the run)\n",
                cfg->layout.stages, cfg->training.micro_batches, cfg->training.micro_batch,
                cfg->layout.replicas, cfg->layout.replicas > 1 ? "s" : "", m.n_params,
                threads ? threads : "unset");
        if (cfg->timetable.recompute == RECOMPUTE_STAGE)
            fprintf(out, "recompute = stage: bp's and fg+bp's Bi include the rerun of F, a split Bw "
                    "redoes Bi (its cost and Bi's), their activations a stage input per micro-batch "
                    "in flight, the stage's output adjoint from Bi to Bw and one rerun's stash\n");
        count_runtime(sets, runtime, out);
        plan_table_rows(cfg, be, &m, sets, runtime, out);
        for (int i = 0; i < N_SETS; i++) print_cost_set(out, &sets[i], i);
        if (json) json_cost_sets(json, sets);
        Figures figs[N_PLANNED];
        rc = plan_schedules(sets, out, json, figs, err);
        if (!rc) rc = check_timed(sets, a->batches, err);
        if (!rc && a->batches)  // bp-zb (planned[2]), fg, fg+bp
            rc = plan_print_batches(&sets[SET_BP], &figs[2], &sets[SET_FG], &figs[3], &sets[SET_FG_BP],
                                    &figs[4], &m, a, out, err);
    }
    if (json) {
        fputs("]}\n", json);
        if (rc) out_file_abort(&json_file);
        else rc = out_file_commit(&json_file, err);
    }
    free(sets);
    return rc;
}
