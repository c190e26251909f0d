// One pipeline stage at run time: the step engine. It executes its part of the step's
// timetable (ops F, B, U) against the stage's layer source (layer_source.h), exchanging
// activations, tangents and adjoints with its neighbours through a Transport. With one stage
// and transport_local() this is the single-rank trainer; nothing else is.
//
// The same engine runs a stage whose layers are resident and one that streams them: the
// source decides the grouping of ops (micro-batch-major or layer-major waves, exec_plan.h) and
// when an update is applied (at once, or as the next wave reads each layer).
#ifndef FGPIPE_PIPELINE_H
#define FGPIPE_PIPELINE_H

#include "config.h"
#include "cv_scale.h"
#include "data.h"
#include "exec_plan.h"
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

typedef struct {
    double loss;        // mean loss of the step's micro-batches (valid on every stage)
    double seconds;     // wall time of the step on this stage
    // With UpdateState.want_stats (docs/log.md; NaN where not defined this step):
    double estimate_norm, exact_norm, cos_estimate_exact, cos_fg_exact, variance_reduction;
    double cv_beta_median;  // cv_scale = auto: median of the control variate's scales per layer
} StepResult;

// An update computed by op U and not yet applied to every layer (a streamed stage applies it
// as the next forward wave reads each layer), per layer, scaled by clip, then the optimizer
// step: g = the kept gradient (bp), or
// g = base_kept * kept + base_ref * ref_beta[l] * ref + sum coeff[i] v_i (fg, fg+bp), where
// kept is this step's c, ref the reference of the step before and ref_beta its scale per layer
// (cv_scale = auto; NULL: 1).
typedef struct {
    int active;
    long step;
    double lr;
    float base_kept, base_ref, clip;
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

// The timetable (identical on every stage) and this stage's part of it.
typedef struct {
    Schedule sched;
    ExecPlan plans[SCHED_MAX_LAG + 1];  // one per phase of the timetable
    const ExecPlan *plan;     // this step's (phase step mod n_phases)
    int *taker_lag;           // [n_ops]: op_adjoint_taker_lag of each op of the timetable
    int lags_kept;            // weight versions kept for this stage's ops with a lag: the
                              // largest lag in its timetable (at most need.prev)
    char choice[256];         // why this timetable, where the run chose one (or "")
    double *measured;         // [n_ops of the schedule][2]: start, end of the last step's ops
    double costs[N_OP_COSTS * SCHED_MAX_STAGES];  // [kind * M + stage]: what it was planned
                              // with (op_cost.h; F calibrated where the run calibrates)
    double op_seconds[OP_U + 1];  // by OpKind: this stage's ops as they ran, summed over the
    long op_count[OP_U + 1];      // steps after the first few (pipeline_measured_costs)
} StageTimetable;

// Messages between neighbouring stages: this step's plan, the inbox (each receive posted while
// the message before is in use) and the outbox.
typedef struct {
    MessagePlan plan;         // this step's
    size_t stride;            // floats of an inbox slot: the largest message
    float *inbox;             // received messages, [n_inbox][stride], used round-robin
    int n_inbox;
    const MessagePlan *recv_plan;     // this step's receives:
    int recv_posted, recv_taken;      // posted so far (one ahead of those taken), taken
    int recv_handle;
    float *outbox;            // the message being sent
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
} LaneBuffers;

// What backward ops need, kept from F (or Bi) to their last use: the stashes of activations,
// the last stage's loss adjoints and Bi's kept adjoints, by the step of their F (mod rings)
// and micro-batch, and the buffers free for reuse.
typedef struct {
    unsigned char *keeps;     // [n_phases][N]: F of micro-batch b in phase p keeps a stash
    float *dz[SCHED_MAX_LAG + 1];
    int rings;             // steps whose stashes and dz live at once: the timetable's lag + 1
    float *stash[SCHED_MAX_LAG + 1][SCHED_MAX_MICROBATCHES];
    float *kept_adj[SCHED_MAX_LAG + 1][SCHED_MAX_MICROBATCHES];
    float **free_stash, **free_adj;
    int n_free_stash, n_stash_alloc, n_free_adj, n_adj_alloc;
} StashPool;

// What op F keeps for op U besides the scalars (activity perturbation, local losses).
typedef struct {
    // Every layer's kept block for every micro-batch of a step (stage_kept_offset's layout);
    // two when the update is applied in the next step (streamed). work: one layer's G for U.
    float *blocks[2], *work;
    Label *lane_labels;       // local losses, a fused head: the labels of F's lanes
                              // [max_group][B * tokens]
} ForwardKept;

// Op U's state between steps: the exact gradient c, the reference, the update in waiting.
typedef struct {
    long first_c_step;        // fg+bp: the first step with an exact gradient c
    int weight_lanes;         // this step's B and Bw lanes so far (c is their mean)
    float c_scale;            // c = c_scale * the kept gradient (fg+bp: 1 / its lanes)
    int ref_active;           // the reference is not zero (guided: tangent 0 follows it)
    CvScale cv;               // cv_scale = auto: the reference's scale per layer (else empty)
    float *delayed[SCHED_MAX_LAG + 1];  // bp, grad_delay = D: the last D + 1 steps' gradients
    float *estimate;          // the estimate g: the stage's (resident), or the source's layer_buffer
    float *scratch;           // want_stats, resident: one layer's plain fg estimate
    PendingUpdate pending;
    int want_stats;           // fill the StepResult statistics (costs allreduces and one more
                              // tangent pass); the same on every stage
    StepResult stats;         // of the last update
} UpdateState;

typedef struct {
    const Backend *be;        // every float buffer below is its memory unless marked host
    const Config *cfg;
    const Model *model;
    Transport *tr;
    const Dataset *data;      // training set: stage 0 reads inputs, the last stage labels
    Stage stage;
    LayerSource src;          // the stage's layers: resident or streamed
    RunPlan run;              // the run's options, resolved
    LayerNeeds need;
    StageTimetable tt;
    int is_first, is_last;
    int K;                    // tangents (0 in bp)
    size_t n;                 // parameters of this stage
    size_t largest;           // parameters of its largest layer
    int n_streamed;           // stages of the pipeline that stream their layers
    Messages msg;
    LaneBuffers work;
    StashPool pool;
    ForwardKept kept;
    UpdateState upd;
    float *host_layer[4];     // host staging of one layer's checkpoint buffers (device backends)
    // The step's scalars, summed over the grid in op U: [0] loss, then d [N*K] (activity:
    // [N*K*B]), then r.v [R][L][Nr*K] per replica and layer, then |grad_l|^2 [L].
    double *scalars;
    size_t n_scalars;
    long first_step;          // the run's first step (a resumed run's is > 0)
    MemAccount mem;           // the stage's memory by owner, counted as it is allocated
} Pipeline;

// Builds the stage for transport t's stage. A stage that does not fit cfg->mem_budget keeps
// its layers in stores under cfg->weights_dir through `streams` (NULL: refused); resuming from
// those stores (streams->resume) sets p->first_step. If any stage streams, every stage runs
// layer-major (so neighbours agree on the order of messages). Measures op costs in a warm-up
// and builds the timetable (identical on every stage).
int pipeline_init(Pipeline *p, const Backend *be, const Config *cfg, const Model *m,
                  const int *first, Transport *t, const Dataset *train,
                  const LayerStreams *streams, int want_stats, FgError *err);

// Stage [first, last) of model m as cfg runs it: its buffers for cfg's micro-batch, K
// tangents, perturbation, low-rank tangents and local losses.
int pipeline_stage_init(Stage *st, const Backend *be, const Config *cfg, const Model *m, int first,
                        int last, FgError *err);
// The costs of stage st's ops (op_cost.h) as a run of cfg with `replicas` pipelines times them
// at start-up when st is its stage `stage` (resident: a streamed stage's are nominal).
int pipeline_stage_costs(Stage *st, const Config *cfg, int stage, int replicas,
                         double cost[N_OP_COSTS], FgError *err);
// The timetable spec of cfg on M stages with op costs costs[kind * M + stage] (pointers into
// costs): schedule_build_clearing(&spec, costs + COST_ZERO * M, ...) is the run's timetable.
ScheduleSpec pipeline_schedule_spec(const Config *cfg, int M, const double *costs);
// The run's timetable for costs (op_cost.h's [kind * M + stage]) into out: the one of its spec
// (without_b: fg+bp's without B ops), or, for fg+bp with select = -1 and c alone, the candidate
// with the most exact micro-batches per second weighed by lag (timetable_choice.c), with the
// figures behind the choice in why ("" where there was none; why may be NULL).
int pipeline_build_timetable(const Config *cfg, int M, const double *costs, int without_b,
                             Schedule *out, char *why, size_t why_size, FgError *err);
// What that choice maximises: mean over stages of (corrections per step / (1 + lag_cost x the
// stage's largest lag)) per second of step; 0 when a stage has no correction.
double pipeline_weighed_exact_rate(const Schedule *S, double lag_cost);

// This stage's ops as they ran, in op_cost's kinds: the mean seconds of each kind over the
// run's steps after its first 3 (B split into Bi and Bw in the planned ratio; a kind that never
// ran: as planned; clearing the gradient is inside the measured B or Bw: 0).
void pipeline_measured_costs(const Pipeline *p, double cost[N_OP_COSTS]);

// fg+bp's mix with shrink 0 updates a stage by its exact gradient alone: a timetable that
// backpropagates nothing on some stage (no bubble to fill, e.g. one stage with select = -1)
// is refused, as every rank sees the same timetable, by all of them alike.
int pipeline_check_every_stage_learns(const Config *cfg, const Schedule *S, FgError *err);

// Why the timetable is not planned with calibrated F times (config key calibrate_steps), or
// NULL where it is.
const char *pipeline_calibration_off(const Pipeline *p);
// Returns the first error of closing the stage's layer source (its last writes).
int pipeline_free(Pipeline *p, FgError *err);

// One optimizer step on samples order[sample0 ..) of the epoch's order.
int pipeline_step(Pipeline *p, long step, long total_steps, const size_t *order, size_t sample0,
                  StepResult *out, FgError *err);

// Applies an update still pending (streamed stages), so the weights are those of the run so far.
int pipeline_apply_pending(Pipeline *p, FgError *err);

// Calls visit for every layer of the stage with parameters, in order, with the layer's
// checkpoint buffers as host memory: parameters, optimizer state buffers, the reference.
// Pending updates are applied first. writable (a load): what visit writes becomes the stage's
// state, on which step next_step runs next (the run's first step).
int pipeline_visit_layers(Pipeline *p, int writable, long next_step, LayerVisitor visit, void *arg,
                          FgError *err);

// Brackets what replica 0 alone does with its layers (its checkpoint, evaluation,
// --save-params; on: 1 before, 0 after), called on every rank: where replicas on one node share
// a store, the pending update is applied by all of them first and the others wait at the
// bracket's end while the node's I/O rank reads alone. Nothing otherwise.
int pipeline_solo(Pipeline *p, int on, FgError *err);

// Mean loss and accuracy over a dataset, streamed through the pipeline (all stages get them).
int pipeline_evaluate(Pipeline *p, const Dataset *ds, double *loss, double *acc, FgError *err);

// Bytes kept for backward ops at most at once: stashes of activations and Bi's adjoints, and
// the layer inputs that activity perturbation keeps for the update.
double pipeline_stash_bytes(const Pipeline *p);

#endif
