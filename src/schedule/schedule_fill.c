// fg+bp: adjoint chains in FG's idle gaps (docs/pipeline.md, "Bubbles").
//
// A chain is one micro-batch b of one source phase: Bi(M-1,b), Bi(M-2,b), ... down to some
// stage, each stage's Bw after its Bi. Times are unrolled over steps: phase q's step covers
// [q T, (q+1) T) with T the step length, and an op placed in step q of a chain from source
// phase p has lag q - p; step q runs in phase q mod n_phases of the periodic timetable.
//
// Auto (select = -1) tries a few candidate shapes (F ops as early or as late as they can,
// 1..lag+1 phases, how many chains, their source phases, Bw ops earliest or latest, Bi ops only
// where their Bw fits right after them or anywhere) and keeps
// the one that corrects the most stages and, of those, fills most of the bubble.
// Each candidate: first every chain's Bi ops, each in the earliest gap after its input (and
// after the previous chain's Bi on the same stage, so every link delivers in the order its
// receiver consumes); then the Bw ops; a Bw op that fits nowhere within the lag bound cuts its
// chain there (the stages below lose that micro-batch: the groups stay nested).
#include "schedule_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int source, b;        // source phase and micro-batch
    int *bi_q, *bw_q;     // [M]: the unrolled step of Bi(s) / Bw(s), or -1 (not placed)
    double *bi_t, *bw_t;  // [M]: start within that step
} Chain;

typedef struct {
    int phases, chains;
    int round_robin;      // chain i's source phase: i mod phases (else: blocks of chains)
    int bw_by_stage;      // place Bw ops stage by stage (else chain by chain)
    int bw_late;          // Bw in the latest gap within the lag bound (else the earliest)
    int bi_with_bw;       // a Bi op only where its Bw fits right after it when placed (else
                          // Bi ops placed first may take all of a gap and leave their Bw ops
                          // none; the room is not reserved: a later chain's Bi may take it)
} Shape;

typedef struct {
    const ScheduleSpec *sp;
    Build b;
    double T, limit;      // step length; ops end by limit within their step
    const double *end_f;  // FG's F end times [M*N]
    Chain *chains;
    int n;
} Fill;

// An op's place: the earliest (or latest) gap of length c on stage s starting at unrolled
// time >= ready, in steps up to last_q.
static int place(const Fill *f, int s, double ready, double c, int last_q, int late, int *q_out,
                 double *t_out, int *pos_out) {
    int found = 0;
    // Explicit lags place past the step's end (limit infinite): ready may lie beyond last_q.
    for (int q = FG_MIN((int)floor(ready / f->T), last_q); q <= last_q; q++) {
        const int phase = q % f->b.S->n_phases;
        const ScheduledOp *ops = timetable_segment(&f->b, phase, s);
        const int n = *timetable_segment_count(&f->b, phase, s);
        double lo = FG_MAX(0.0, ready - q * f->T);
        int pos;
        double t = timetable_earliest_gap(ops, n, lo, c, f->limit, &pos);
        if (t < 0.0) continue;
        *q_out = q, *t_out = t, *pos_out = pos, found = 1;
        if (!late) return 1;
        // The latest gap of this step: scan the gaps from the end.
        for (int i = n; i >= pos; i--) {
            double gap_end = i < n ? ops[i].start : f->limit, gap_start = i > 0 ? ops[i - 1].end : 0.0;
            if (isinf(gap_end)) break;
            if (gap_end - FG_MAX(gap_start, lo) >= c) {
                *t_out = gap_end - c, *pos_out = i;
                break;
            }
        }
    }
    return found;
}

static void put(Fill *f, OpKind kind, int s, const Chain *ch, int q, double t, int pos) {
    const double c = kind == OP_BI ? f->sp->cost_bi[s] : timetable_cost_bw(f->sp, s);
    timetable_segment_insert(&f->b, q % f->b.S->n_phases, s, pos,
                             (ScheduledOp){kind, s, ch->b, q - ch->source, t, t + c});
}

static void take_back(Fill *f, OpKind kind, int s, Chain *ch) {
    int *q = kind == OP_BI ? ch->bi_q : ch->bw_q;
    if (q[s] < 0) return;
    ScheduledOp o = {kind, s, ch->b, q[s] - ch->source, 0, 0};
    timetable_segment_remove(&f->b, q[s] % f->b.S->n_phases, s, &o);
    q[s] = -1;
}

// Chain i's Bi ops, from the last stage down, as far as they fit.
static void place_inputs(Fill *f, int i, int explicit_lag, int with_bw) {
    const ScheduleSpec *sp = f->sp;
    const int M = sp->M, N = sp->N;
    Chain *ch = &f->chains[i];
    const double base = ch->source * f->T;
    const int last_q = ch->source + sp->lag;
    double ready = base + f->end_f[(M - 1) * N + ch->b];
    if (explicit_lag) ready = FG_MAX(ready, last_q * f->T);
    for (int s = M - 1; s >= 0; s--) {
        double r = FG_MAX(ready, base + f->end_f[s * N + ch->b]);
        // The chains on a stage run in chain order: after the last earlier chain that reached
        // it (chain i-1 may not have: round robin's ready times are not in chain order).
        const Chain *prev = NULL, *first = NULL;
        for (int j = i - 1; j >= 0 && !prev; j--)
            if (f->chains[j].bi_q[s] >= 0) prev = &f->chains[j];
        for (int j = 0; j < i && !first; j++)
            if (f->chains[j].bi_q[s] >= 0) first = &f->chains[j];
        if (prev) r = FG_MAX(r, prev->bi_q[s] * f->T + prev->bi_t[s] + sp->cost_bi[s]);
        int q, pos;
        double t;
        const double c = sp->cost_bi[s] + (with_bw ? timetable_cost_bw(sp, s) : 0.0);
        if (!place(f, s, r, c, last_q, 0, &q, &t, &pos))
            return;
        // Link order across periods too: before the first chain's op of the next period.
        // (Explicit lags keep every op in one step, however long: no period overtakes.)
        if (first && !explicit_lag &&
            q * f->T + t >= (first->bi_q[s] + f->b.S->n_phases) * f->T + first->bi_t[s])
            return;
        put(f, OP_BI, s, ch, q, t, pos);
        ch->bi_q[s] = q, ch->bi_t[s] = t;
        ready = q * f->T + t + sp->cost_bi[s];
    }
}

// Bw(s) of chain i; if it does not fit, the chain ends above s.
static void place_weight(Fill *f, int i, int s, int late) {
    const ScheduleSpec *sp = f->sp;
    Chain *ch = &f->chains[i];
    if (ch->bi_q[s] < 0) return;
    int q, pos;
    double t;
    double ready = ch->bi_q[s] * f->T + ch->bi_t[s] + sp->cost_bi[s];
    if (place(f, s, ready, timetable_cost_bw(sp, s), ch->source + sp->lag, late, &q, &t, &pos)) {
        put(f, OP_BW, s, ch, q, t, pos);
        ch->bw_q[s] = q, ch->bw_t[s] = t;
        return;
    }
    for (int below = s; below >= 0; below--) {
        take_back(f, OP_BI, below, ch);
        take_back(f, OP_BW, below, ch);
    }
}

static void init_chains(Fill *f, const Shape *sh, int *store_i, double *store_t) {
    const int M = f->sp->M;
    int per_phase[3] = {0};
    for (int i = 0; i < sh->chains; i++) {
        Chain *ch = &f->chains[i];
        ch->source = sh->round_robin ? i % sh->phases : i * sh->phases / sh->chains;
        ch->b = per_phase[ch->source]++;
        ch->bi_q = store_i + (size_t)2 * M * i, ch->bw_q = ch->bi_q + M;
        ch->bi_t = store_t + (size_t)2 * M * i, ch->bw_t = ch->bi_t + M;
        for (int s = 0; s < M; s++) ch->bi_q[s] = ch->bw_q[s] = -1;
    }
}

// How good a candidate is: first how many stages it corrects at all (a stage without
// corrections never gets its part of c, and its update stays the forward gradient), then the
// share of the bubble its B ops fill.
typedef struct {
    int stages;
    double used;
} Score;

static int better(Score a, Score b) {
    return a.stages != b.stages ? a.stages > b.stages : a.used > b.used + 1e-9;
}

// Builds one candidate into out; returns its score.
static Score build_shape(const ScheduleSpec *sp, const Shape *sh, const double *end_f,
                         Schedule *out) {
    const int M = sp->M;
    const int explicit_lag = sp->select >= 0;
    Fill f = {.sp = sp, .end_f = end_f, .n = sh->chains};
    timetable_build_start(&f.b, sp, sh->phases, sp->N + 2 * sh->chains + 1, end_f, out);
    f.T = out->fg_makespan;
    f.limit = explicit_lag ? INFINITY : out->last_f;
    f.chains = fg_alloc_bytes(sizeof(Chain) * (size_t)FG_MAX(sh->chains, 1));
    int *store_i = fg_alloc_bytes(sizeof(int) * (size_t)2 * M * FG_MAX(sh->chains, 1));
    double *store_t = fg_alloc_bytes(sizeof(double) * (size_t)2 * M * FG_MAX(sh->chains, 1));
    init_chains(&f, sh, store_i, store_t);
    for (int i = 0; i < sh->chains; i++) place_inputs(&f, i, explicit_lag, sh->bi_with_bw);
    for (int outer = 0; outer < (sh->bw_by_stage ? M : sh->chains); outer++)
        for (int inner = 0; inner < (sh->bw_by_stage ? sh->chains : M); inner++)
            if (sh->bw_by_stage) place_weight(&f, inner, M - 1 - outer, sh->bw_late);
            else place_weight(&f, outer, M - 1 - inner, sh->bw_late);
    out->n_chains = 0;
    Score score = {0, 0.0};
    for (int s = 0; s < M; s++) {
        int corrected = 0;
        for (int i = 0; i < sh->chains; i++) corrected |= f.chains[i].bw_q[s] >= 0;
        score.stages += corrected;
    }
    for (int i = 0; i < sh->chains; i++) {
        const Chain *ch = &f.chains[i];
        out->n_chains += ch->bw_q[M - 1] >= 0;
        int fits = 1;
        for (int s = 0; s < M; s++)
            fits &= ch->bw_q[s] >= 0 && ch->bw_q[s] * f.T + ch->bw_t[s] + timetable_cost_bw(sp, s) <=
                                            (ch->bw_q[s] * f.T + out->last_f) * (1 + 1e-12);
        out->n_fit += fits;
    }
    timetable_build_updates(&f.b, sp);
    schedule_pack(&f.b);
    fg_free(f.chains);
    fg_free(store_i);
    fg_free(store_t);
    score.used = schedule_stats(out).bubble_used_by_b;
    return score;
}

// How many chains a candidate with `phases` phases could use at most: the last stage's idle
// time per step holds that many Bi + Bw, plus one that may end in another phase.
static int most_chains(const ScheduleSpec *sp, const double *end_f, int phases) {
    const int M = sp->M, N = sp->N;
    const double idle = end_f[M * N - 1] - N * sp->cost_f[M - 1];
    const int per_step = (int)floor(idle / (sp->cost_bi[M - 1] + timetable_cost_bw(sp, M - 1)) + 1e-9);
    return FG_MIN(phases * N, phases * (per_step + 1));
}

// The best candidate of one F layout into *best (kept when no candidate beats *best_score).
static void best_shape(const ScheduleSpec *sp, const double *end_f, Schedule *best,
                       Score *best_score) {
    for (int phases = 1; phases <= sp->lag + 1; phases++)
        for (int variant = 0; variant < (phases > 1 ? 16 : 8); variant++) {
            const int n_max = most_chains(sp, end_f, phases);
            int empty_run = 0;
            for (int chains = 1; chains <= n_max && empty_run < 2; chains++) {
                Shape sh = {phases, chains, variant >> 3, variant & 1, (variant >> 1) & 1, (variant >> 2) & 1};
                Schedule cand;
                const Score score = build_shape(sp, &sh, end_f, &cand);
                empty_run = cand.n_chains < chains ? empty_run + 1 : 0;
                if (better(score, *best_score)) {
                    schedule_free(best);
                    *best = cand, *best_score = score;
                } else {
                    schedule_free(&cand);
                }
            }
        }
}

int schedule_fill_chains(const ScheduleSpec *sp, Schedule *out, FgError *err) {
    (void)err;
    double *end_f = fg_alloc_bytes(sizeof(double) * (size_t)sp->M * sp->N);
    timetable_fg_ends(sp, end_f);
    Schedule best = {0};
    Score best_score = {-1, -1.0};
    if (sp->select >= 0) {  // explicit: F ops where fg has them
        Shape sh = {1, sp->select, 1, 0, 0, 0};
        build_shape(sp, &sh, end_f, &best);
    } else {
        best_shape(sp, end_f, &best, &best_score);
        timetable_fg_latest_ends(sp, end_f);
        best_shape(sp, end_f, &best, &best_score);
        if (best_score.stages < 0) {  // no chain fits anywhere (e.g. one stage): FG's timetable
            Shape none = {1, 0, 1, 0, 0, 0};
            timetable_fg_ends(sp, end_f);
            build_shape(sp, &none, end_f, &best);
        }
    }
    fg_free(end_f);
    *out = best;
    return FG_OK;
}
