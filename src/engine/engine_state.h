// The step engine's state, below every unit that works on it: the Pipeline of one stage and
// its parts, a micro-batch's Lane through the layers, and the small queries on them. The
// engine is a stack (docs/core.md): pipeline_setup.c builds a Pipeline, pipeline.c (the step
// driver) runs op groups of pipeline_ops.c (F, B) and pipeline_update.c (U), which use
// pipeline_messages.c and pipeline_layers.c (engine_ops.h declares what they call of each
// other), and all of them read this state. Nothing here calls up.
#ifndef FGPIPE_ENGINE_STATE_H
#define FGPIPE_ENGINE_STATE_H

#include <signal.h>

#include "config.h"
#include "cv_scale.h"
#include "data.h"
#include "exec_plan.h"
#include "head_loss.h"
#include "layer_source.h"
#include "layer_stream.h"
#include "mem_account.h"
#include "model.h"
#include "op_cost.h"
#include "optimizer.h"
#include "partition.h"
#include "run_plan.h"
#include "schedule.h"
#include "stage.h"
#include "transport.h"

// Times the ops of stage `stage` of the layout `first` as cfg runs it with its layers resident,
// alone (op_timing.h's pipeline_time_ops). The run hands it to pipeline_init, since the timing
// steps a throwaway pipeline of its own.
typedef int (*StageTimer)(const Backend *be, const Config *cfg, const Model *m, const int *first,
                          int stage, int stages, int replica, int replicas,
                          double cost[N_OP_COSTS], FgError *err);

// Where the timetable's op costs come from: timed at start-up (each resident stage alone, in
// turns over the ranks), or given ([kind * M + stage], taken as they are; time is NULL).
typedef struct {
    StageTimer time;
    const double *given;
} OpCostSource;

typedef struct {
    double loss;        // mean loss of the step's micro-batches (valid on every stage)
    double seconds;     // wall time of the step on this stage
    double waves_bound; // a streamed stage's: the sum over the step's op groups (its waves) of
                        // max(I/O, compute) in each, what overlap within each wave allows
    // With UpdateState.want_stats (docs/log.md; NaN where not defined this step):
    double estimate_norm, exact_norm, cos_estimate_exact, cos_fg_exact, variance_reduction;
    double cv_beta_median;  // cv_scale = auto: median of the control variate's scales per layer
    // bf16: the first layer (model index) whose input or input tangents held a value that is
    // not finite this step, as rounded (Stage.not_finite); else the first whose input adjoint
    // did (not_finite_adjoint = 1); -1: none (or fp32)
    int not_finite_at, not_finite_adjoint;
} StepResult;

// An update computed by op U and not yet applied to every layer (a streamed stage applies it
// as the next forward wave reads each layer), per layer, scaled by clip, then the optimizer
// step: g = the update's gradient (LayerSlot.update_grad: bp's gradient), or
// g = base_grad * update_grad + base_ref * ref_beta[l] * ref + sum coeff[i] v_i (fg, fg+bp),
// where update_grad is this step's c, ref the reference of the step before and ref_beta its scale per layer
// (cv_scale = auto; NULL: 1).
typedef struct {
    int active;
    long step;
    double lr;
    float base_grad, base_ref, clip;
    int tangents;          // the coefficients apply (fg, fg+bp)
    int coeff_nonzero;     // some coefficient is not 0 (mix or cv at shrink 0: none is, and the
                           // tangents' terms, a GEMM per layer under activity, are not formed)
    int formed;            // resident: the norm pass left g in Pipeline.update
    int aged;              // the source moved the weights to prev[0] (age_weights): the
                           // update reads them there
    int set_ref;           // afterwards the reference becomes ref_scale * c (fg+bp, cv, guided)
    float ref_scale;
    float *coeff;          // [N*K] over every replica's micro-batches
    float fg_weight;       // the weight of the step's own forward gradient (mix: shrink; else 1):
                           // applies to the local estimates, formed in F unweighted
    const float *ref_beta; // [n_layers] or NULL
} PendingUpdate;

// When a step's update reaches the stage's layers: decided once at setup (update_plan) from
// where the layers live and the mode, and read at the step's points by update_at, the one place
// that begins a weight version and applies a pending update.
typedef enum {
    UPDATE_IN_U,             // resident: op U applies every layer's at once
    UPDATE_IN_BACKWARD,      // streamed bp without clipping: each layer steps as the backward
                             // wave leaves it (its gradient is whole there)
    UPDATE_IN_NEXT_FORWARD,  // streamed: the next forward wave applies each layer's as it reads it
} UpdateWhen;

// The points of a step and of a run where update_at may begin a version or apply the update.
typedef enum {
    AT_FORWARD,        // a forward wave starts
    AT_LAST_BACKWARD,  // the step's last backward wave starts
    AT_U,              // op U has computed the update
    AT_READ,           // the weights are read whole (evaluation, a checkpoint, the run's end)
    AT_LOAD,           // the weights are replaced (a load): a pending update is dropped
} UpdatePoint;

// What follows a wave of this stage, which its read-ahead runs on into (pipeline_layers.c).
typedef struct {
    int wraps[2];             // [dir > 0]: a wave of that direction is followed by a forward
                              // wave from the stage's first layer (bp's backward; fg's forward,
                              // with no backward ops; an evaluation's passes)
    int turns;                // a forward wave is followed by a backward from the stage's last
                              // layer (wherever every F group is followed by a B group: bp)
    unsigned forward_parts;   // what that forward acquires of a layer (LayerSource parts): the
                              // parameters alone where it applies no update (bp, evaluation)
    unsigned char *wrap_blocks;  // [row blocks of the stage's first layer]: those the next
                              // step's forward reads, where it reads only those (a frozen
                              // table, streamed): a wrap reads them ahead (NULL: block 0 on)
} WaveEnds;

// The timetable (identical on every stage) and this stage's part of it.
typedef struct {
    Schedule sched;
    ExecPlan plans[SCHED_MAX_LAG + 1];  // one per phase of the timetable
    const ExecPlan *plan;     // this step's (phase step mod n_phases)
    int *taker_lag;           // [n_ops]: op_adjoint_taker_lag of each op of the timetable
    int old_versions;         // weight versions held for this stage's ops with a lag: the
                              // largest lag in its timetable (at most need.prev)
    WaveEnds ends;            // what follows a wave, which its read-ahead runs on into
    char choice[256];         // why this timetable, where the run chose one (or "")
    double *measured;         // [n_ops of the schedule][2]: start, end of the last step's ops
    double costs[N_OP_COSTS * SCHED_MAX_STAGES];  // [kind * M + stage]: what it was planned
                              // with (op_cost.h; F calibrated where the run calibrates)
    double op_seconds[OP_U + 1];  // by OpKind: this stage's ops as they ran, summed over the
    long op_count[OP_U + 1];      // steps after the first few (pipeline_measured_costs)
} StageTimetable;

// Messages between neighbouring stages: this step's plan, the inbox (each receive posted while
// the message before is in use) and the outbox. A message is bytes: activations, tangents or
// adjoints in the type of the layer at its cut (stage_message_bytes).
typedef struct {
    MessagePlan plan;         // this step's
    size_t slot_bytes;        // an inbox slot (and the outbox): the largest message
                              // (messages_slot_bytes), a multiple of 4
    unsigned char *inbox;     // received messages, [n_inbox][slot_bytes], used round-robin
    int n_inbox;
    const MessagePlan *recv_plan;     // this step's receives:
    int recv_posted, recv_taken;      // posted so far (one ahead of those taken), taken
    int recv_handle;
    void *outbox;             // the message being sent
} Messages;

// The buffers an op group's micro-batches ("lanes") pass through the layers with.
typedef struct {
    struct Lane *lanes;       // [max_group]
    size_t act_stride, tan_stride, adj_stride;
    float *act[2], *tan[2], *adj[2];  // ping-pong by layer parity, [max_group][stride]
    float *x_in;              // stage 0's inputs: [max_group][x_stride]
    size_t x_stride;
    Label *labels;            // last stage: one micro-batch of labels
    float *host_x;            // host: inputs as gathered from the dataset
    Label *host_labels;       // host: labels as gathered
    float *loss_d;            // host: one micro-batch's directional derivatives [K]
    unsigned char *rows_state;  // a fused head in row blocks: each lane's running softmax
                                // [max_group][stage_rows_state_bytes] (NULL: none)
} LaneBuffers;

// What backward ops need, kept from F (or Bi) to their last use: the stashes of activations
// (recompute: the stage's input, from F to B or Bw), the last stage's loss adjoints and Bi's
// adjoints for Bw, by the step of their F (mod rings) and micro-batch, and the buffers free for
// reuse.
typedef struct {
    unsigned char *keeps;     // [n_phases][N]: F of micro-batch b in phase p keeps a stash
    float *dz[SCHED_MAX_LAG + 1];
    int rings;             // steps whose stashes and dz live at once: the timetable's lag + 1
    float *stash[SCHED_MAX_LAG + 1][SCHED_MAX_MICROBATCHES];
    float *bw_adj[SCHED_MAX_LAG + 1][SCHED_MAX_MICROBATCHES];
    float **free_stash, **free_adj;
    int n_free_stash, n_stash_alloc, n_free_adj, n_adj_alloc;  // n_*_alloc: at most at once
    int n_trimmed[3];         // of those, freed while idle (stash, input, adj; stash_pool_trim)
    // recompute = stage: F keeps the stage's input alone (in stash[][], until the last
    // backward op); each backward op reruns the stash of the layers after it, for itself.
    float **free_input;
    int n_free_input, n_input_alloc;
} StashPool;

struct Pipeline;
struct Lane;

// Evaluation's passes (eval_pass.h), decided once at setup: every layer is acquired once a pass
// for as many windows (micro-batches of the validation set) as the stage's memory holds.
typedef struct {
    int windows;              // at most, a pass (the step's largest op group at least)
    int group;                // the step's largest op group: up to these, the step's own lanes
    double window_bytes;      // a window's buffers beyond those: 2 activations, its input, a
                              // fused head's running softmax
    double lent_bytes;        // what the step's stash pool may hold (stashes, Bi's adjoints
                              // for Bw), planned within the budget and idle between steps
    const volatile sig_atomic_t *stop;  // during an evaluation: the run's stop request (a
                                        // signal), read before each layer (NULL: none)
} EvalPlan;

// What a backward op computes at each layer (StashPolicy.half, by OpKind).
typedef enum {
    HALF_BOTH,    // the input adjoint and the weight gradient (B; Bw redoing Bi)
    HALF_INPUT,   // the input adjoint alone, keeping what Bw needs (Bi)
    HALF_WEIGHT,  // the weight gradient alone, from the adjoints Bi kept (Bw)
} BackwardHalf;

// How the stage keeps what its backward ops need: decided once at setup (stash_policy.c, from
// the run plan's recompute), read by the op code. Every layer's input is stashed from F to the
// micro-batch's last backward op, or F holds the stage's input alone and each backward op
// reruns F from it into a stash of its own (recompute).
typedef struct {
    size_t stash_floats;      // one stash (recompute: every layer's input but the first's)
    size_t input_floats;      // the input F holds in place of a stash (0: it holds a stash)
    size_t adj_floats;        // what Bi keeps for Bw (0: nothing)
    BackwardHalf half[OP_U + 1];  // what each backward op kind computes at a layer
    // F of a micro-batch a backward op will take: what it holds (a->stash or a->input).
    float *(*hold)(struct Pipeline *p, struct Lane *a);
    // A backward lane's buffers from what its F held (recompute: a stash for the rerun).
    void (*take)(struct Pipeline *p, struct Lane *a, float *held);
    // The lane's output adjoint (dy: the message, NULL for Bw) and what Bi keeps of it.
    void (*output_adjoint)(struct Pipeline *p, struct Lane *a, const float *dy);
    // Layer l's input in the lane's buffers, in its element type (stage_act_type).
    float *(*layer_input)(const struct Pipeline *p, const struct Lane *a, int l);
    // Where Bi keeps layer l's output adjoint for Bw, and Bw reads it (NULL: none).
    float *(*bw_adjoint)(const struct Pipeline *p, const struct Lane *a, int l);
    // Before a backward group's layers: the lanes' stashes from their inputs (or nothing).
    int (*rerun)(struct Pipeline *p, int n, FgError *err);
} StashPolicy;

// What op F saves for op U besides the scalars (activity perturbation, local losses).
typedef struct {
    // Every layer's saved block for every micro-batch of a step (stage_saved_offset's layout);
    // two when the update is applied in the next step (streamed). work: one layer's G for U;
    // widened: one layer's saved inputs as floats for U where they are kept in BF16, else NULL.
    float *blocks[2], *work, *widened;
    // Local losses on a resident stage: each lane's linear input [max_group][B * max_width]
    // until its loss, and one estimate [B * max_width] (stage_local_fold).
    float *local_input, *local_estimate;
    Label *lane_labels;       // local losses, a fused head: the labels of F's lanes
                              // [max_group][B * tokens]
} ForwardSaved;

// Where op U keeps layer l's estimate (UpdateState.layer[l]; update_plan.c).
typedef struct {
    size_t estimate_at;       // its offset in UpdateState.estimate: the stage's (resident), or 0
                              // in the one layer buffer (streamed)
    int holds_layer;          // its buffer holds the whole layer (a block's rows from the slot's
                              // first on), not only the rows being formed (the layer buffer)
    unsigned backward_parts;  // what the backward wave acquires of it: LAYER_PARAMS_ONLY where
                              // the wave neither steps it nor reads its reference (a streamed
                              // layer's optimizer state stays on flash)
    int formed_in_u;          // op U forms it before the update (form_all_estimates): every
                              // layer's on a resident stage, a streamed one's tied copies alone
} UpdateLayer;

// Op U's state between steps: the exact gradient c, the reference, the update in waiting.
typedef struct {
    long first_c_step;        // fg+bp: the first step with an exact gradient c
    int weight_lanes;         // this step's B and Bw lanes so far (c is their mean)
    float c_scale;            // c = c_scale * update_grad (fg+bp: 1 / its lanes)
    int ref_active;           // the reference is not zero (guided: tangent 0 follows it)
    CvScale cv;               // cv_scale = auto: the reference's scale per layer (else empty)
    float *delayed[SCHED_MAX_LAG + 1];  // bp, grad_delay = D: the last D + 1 steps' gradients
    float *estimate;          // the estimate g: the stage's (resident), or the source's layer_buffer
    float *scratch;           // want_stats, resident: one layer's plain fg estimate
    UpdateWhen when;
    // The backward wave's end of each layer's gradient, after the step's last B or Bw on it
    // (update_finish_layer_gradient) where the layer leaves memory after the wave (streamed);
    // else nothing: op U finishes the stage's. Set with `when` (update_plan).
    int (*finish_in_wave)(struct Pipeline *p, long step, long total, int l, LayerSlot *s,
                          unsigned *dirty, FgError *err);
    // Also set by update_plan, from where the layers live:
    int sums_layer_replicas;  // the replicas' sum of a fresh gradient runs per layer as the wave
                              // finishes it (streamed), else once for the stage's (resident)
    int keeps_estimates;      // the estimates op U forms stay until applied (resident: the stage's
                              // buffer), else each is formed again as it is applied (streamed)
    int saved_copies;         // of what F saves for U (ForwardSaved.blocks): 2 where the update
                              // waits for the next forward wave, whose F saves the next step's
    int forms_in_u;           // op U forms estimates before the update (form_all_estimates): for
                              // the tied copies' sum, and where replicas sum theirs (resident with
                              // saved inputs)
    UpdateLayer *layer;       // [n_layers], host
    PendingUpdate pending;    // owned by pipeline_update.c
    int want_stats;           // fill the StepResult statistics (costs allreduces and one more
                              // tangent pass); the same on every stage
    StepResult stats;         // of the last update
} UpdateState;

// The last stage's end of op F and of evaluation (loss_end.c), chosen once at setup
// (loss_end_of) from the model's last layer: a head fused with the loss scored the labels in its
// own layer (its records are the loss adjoints), or the layer's logits are scored here.
typedef struct {
    // Op F: the loss into *loss_sum, the directional derivatives into the step's scalars, and
    // for a micro-batch B ops will take, its loss adjoint dz scaled for its average.
    int (*train)(struct Pipeline *p, long step, const struct Lane *a, const size_t *order,
                 size_t sample0, double *loss_sum, FgError *err);
    // Evaluation: lane a's n rows of chunk `chunk` of ds: loss * labels and hits into totals.
    void (*eval)(struct Pipeline *p, const Dataset *ds, size_t chunk, int n, const struct Lane *a,
                 double *totals);
} LossEnd;

typedef struct Pipeline {
    const Backend *be;        // every float buffer below is its memory unless marked host
    const Config *cfg;
    const Model *model;
    Transport *tr;
    const Dataset *data;      // training set: stage 0 reads inputs, the last stage labels
    Stage stage;
    LayerSource src;          // the stage's layers: resident or streamed
    RunPlan run;              // the run's options, resolved
    const LossEnd *loss;      // the last stage's end of F and of evaluation (loss_end_of)
    LayerNeeds need;
    StageTimetable tt;
    int is_first, is_last;
    const int *layout;        // the cut (pipeline_init's `first`): stage s has layers
                              // [layout[s], layout[s + 1])
    OpCostSource cost_source; // where the timetable's op costs come from (pipeline_init)
    int K;                    // tangents (0 in bp)
    size_t n;                 // parameters of this stage
    size_t largest;           // parameters of its largest layer (a row block of a table in blocks)
    size_t largest_trained;   // ... of its largest trained one: a gradient's, a tangent's size
    int n_streamed;           // stages of the pipeline that stream their layers
    int layer_major;          // some do: every stage runs layer-major waves (neighbours agree on
                              // their messages' order), and their F times are nominal
    Messages msg;
    LaneBuffers work;
    StashPool pool;
    StashPolicy stash;        // how the pool is used (recompute or not)
    ForwardSaved saved;
    UpdateState upd;
    float *host_layer[4];     // host staging of one layer's checkpoint buffers (device backends)
    // The step's scalars, summed over the grid in op U: [0] loss, then d [N*K] (activity:
    // [N*K*B]), then r.v [R][L][Nr*K] per replica and layer, then |grad_l|^2 [L].
    // After them, n_run_scalars of the run's own (pipeline_run_scalars), summed alike.
    double *scalars;
    size_t n_scalars, n_run_scalars;
    double *not_finite_read;  // host [2L]: Stage.not_finite's counts as downloaded (bf16 runs)
    long first_step;          // the run's first step (a resumed run's is > 0)
    MemAccount mem;           // the stage's memory by owner, counted as it is allocated
    double runtime;           // bytes of mem_budget the process holds besides the stage's own
    EvalPlan eval;            // evaluation's passes (eval_pass.c)
} Pipeline;

// One micro-batch of an op group on its way through the stage's layers.
typedef struct Lane {
    int op;                   // timetable index
    OpKind kind;
    int microbatch;           // of this replica
    int lag;                  // B, Bi, Bw: the micro-batch of `lag` steps before
    int taker_lag;            // B, Bi: the lag of the op of the stage before that takes the
                              // input adjoint (-1: none)
    int rows;
    TangentKey key;           // F: its tangents (layer set per layer)
    const float *x, *xdot;    // F: the input, then each layer's output (evaluation: no xdot)
    const float *dy;          // B: the output adjoint, then each layer's input adjoint
    float *stash;             // what B needs: every layer's input (NULL: not selected)
    float *input;             // recompute: the stage's input, kept from F for B's rerun
    float *bw_adjoints;       // Bi, Bw: each parameter layer's output adjoint (recompute: the
                              // stage's output adjoint, from which Bw redoes Bi)
    const Label *labels;      // F with local losses or a fused head: the micro-batch's labels
                              // (host)
    float loss;               // F through a fused head: the mean loss, and its hits
    int correct;
} Lane;

// Replica r's micro-batch mb is the step's global micro-batch r*N + mb. It names the tangents
// and the place of its scalars, so R replicas of N micro-batches compute what one pipeline of
// R*N micro-batches computes.
static inline int pipeline_global_microbatch(const Pipeline *p, int mb) {
    return p->tr->replica * p->cfg->training.micro_batches + mb;
}
// The micro-batches c is the mean of where the timetable fixes them on every stage: bp's
// timetables all N, fg+bp's explicit select n (also where select = -1 chose one); 0 where each
// stage averages its own corrections of the step (fg+bp's auto timetable).
static inline int pipeline_fixed_corrections(const Pipeline *p) {
    return schedule_fixed_corrections(&p->tt.sched);
}
// The loss's adjoint per label position: a fused head's record (head_loss.h), or a row of
// logits.
static inline int pipeline_adjoint_width(const Pipeline *p) {
    return p->stage.plan[p->model->n_layers - 1].loss_width;
}
// What a micro-batch's loss adjoint is scaled by: bp averages over all N micro-batches and the
// R replicas (the replica sum adds them up); fg+bp's c with select = n over the n on every
// stage; auto's over the replicas here and over each stage's own corrections in op U.
static inline float pipeline_adjoint_scale(const Pipeline *p) {
    int fixed = pipeline_fixed_corrections(p), n = fixed ? fixed : 1;
    return 1.0f / (float)(n * p->tr->replicas);
}
// An evaluation is to stop (its run's stop request is set): read before each layer.
static inline int pipeline_eval_stopping(const Pipeline *p) {
    return p->eval.stop && *p->eval.stop;
}
// Activity perturbation: each sample's directional derivative, in place in d [K][rows]. A GPT
// sample's loss is the mean over its T tokens, each of which depends on the tangents of all of
// the sample's rows: d_b = mean over t of the token rows' derivatives (docs/gpt.md).
static inline void pipeline_per_sample_means(const Pipeline *p, float *d, int rows) {
    int T = p->model->tokens, samples = rows / T;
    for (int i = 0; T > 1 && i < p->K * samples; i++) {  // in place: i <= i * T
        double sum = 0;
        for (int t = 0; t < T; t++) sum += d[(size_t)i * T + t];
        d[i] = (float)(sum / T);
    }
}
// The timetable's phase of a step.
static inline int pipeline_step_phase(const Pipeline *p, long step) {
    return (int)(step % p->tt.sched.n_phases);
}

#endif
