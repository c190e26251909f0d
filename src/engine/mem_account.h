// A stage's memory by owner: counted where the engine allocates and frees it (the current bytes
// and the peak of each owner, and the peak of the activations together), and the activations a
// timetable implies, planned from one model of their sizes (fgpipe plan, the out-of-core
// budget and the run use the same).
#ifndef FGPIPE_MEM_ACCOUNT_H
#define FGPIPE_MEM_ACCOUNT_H

#include "config.h"
#include "run_plan.h"
#include "stage.h"

// The activation categories come first: what F keeps for B (stashes), what Bi keeps for Bw
// (adjoints for Bw), what F saves for U (activity's layer inputs, local losses' estimates, and
// U's work block), the last stage's loss adjoints dz, the op groups' lanes, the message
// buffers. Then the rest of the stage: weights (and the weight versions held for lagged ops),
// gradients (also the estimate, the reference, delayed gradients), optimizer state, the tied
// table's second copy (its weights, gradient and state, counted here and not above), the
// slots of a streamed stage, the data set. Last the runtime: what the process holds besides
// the stage's own buffers (mem_runtime_bytes).
typedef enum {
    MEM_STASH, MEM_BW_ADJOINTS, MEM_SAVED_INPUTS, MEM_LOSS_ADJOINTS, MEM_LANES, MEM_MESSAGES,
    N_MEM_ACTIVATIONS,
    MEM_WEIGHTS = N_MEM_ACTIVATIONS, MEM_GRADIENTS, MEM_OPTIMIZER, MEM_TIED, MEM_IO_SLOTS, MEM_DATA,
    MEM_RUNTIME, N_MEM_OWNERS
} MemOwner;

// Their keys in summary.json's "memory_bytes" and fgpipe plan's JSON.
extern const char *const mem_owner_keys[N_MEM_OWNERS];

typedef struct {
    double current[N_MEM_OWNERS], peak[N_MEM_OWNERS];
    double activations, activation_peak;  // the activation categories together
} MemAccount;

// bytes > 0: allocated (or taken from a pool); < 0: freed (given back).
void mem_account_add(MemAccount *a, MemOwner owner, double bytes);

// What one micro-batch of B rows holds from F to its backward ops, in floats, by what F keeps
// (StashKind): a stash (every layer's input and the stage's output; with the stage's input
// kept, the rerun's: the stash less that input), the input F holds in its place (0: none) and
// what Bi keeps for Bw: each parameter layer's output adjoint, or with the stage's input kept
// the stage's output adjoint alone, from which (and the input) Bw redoes Bi, none on the last
// stage, whose dz stays for the step anyway.
typedef struct {
    size_t stash, input, adjoints;
} StashSizes;
StashSizes stash_sizes(StashKind kind, const Stage *st, int B, int is_last);

// What a stage's activation memory is made of, from its config and layers.
typedef struct {
    double stash, adjoint;   // one micro-batch's stash (stage_stash_floats), Bi's adjoints for Bw
    double input;            // recompute = stage: one micro-batch's stage input, kept from F
                             // to its last B op; the rest of a stash is the rerun of the one
                             // B, Bi or Bw op running (0: none)
    double saved, saved_work;  // one copy of what a step's F saves for U; U's work blocks (G, and
                               // a layer's widened BF16 inputs; 0: none)
    double local_lane;       // local losses folded in F: a lane's linear input (and the estimate)
    double loss_adjoints;    // the last stage's dz of one step (0: none)
    double lane;             // one lane of an op group (activations, tangents, adjoints; inputs)
    double message;          // one message slot: the largest message
    int rings;               // steps whose dz live at once (the timetable's lag + 1)
} ActivationSizes;

// For the stage st (is_first, is_last) of a run of config c.
ActivationSizes activation_sizes(const Config *c, const Stage *st, int is_first, int is_last);

// One inbox (or outbox) slot's bytes, for micro-batches of `rows`: the largest message at the
// model's widest layer with K tangents, in the type of the cuts (layer 1's input: BF16 in a
// bf16 run), or stage 0's FP32 inputs, which evaluation reads in the inbox. A multiple of 4.
size_t message_slot_bytes(const Stage *st, int K, int rows);

// Bytes by activation category (out[N_MEM_ACTIVATIONS]) of `stashes` stashes and `adjoints`
// adjoints for Bw alive at once, lanes for op groups of `group`, `saved_copies` copies of what
// F saves for U (a streamed stage applies its update a step later: 2); returns their sum.
double activation_bytes(const ActivationSizes *z, int stashes, int adjoints, int group,
                        int saved_copies, double *out);

// The bytes of mem_budget the process holds besides a stage's own buffers: the program, its
// libraries (MPI, HDF5, OpenBLAS) and the data. c->layout.mem_runtime when set (>= 0), else
// this process's resident bytes now, rounded up to whole MiB, with RUNTIME_GROWTH for what the
// runtime adds once the run starts (OpenBLAS's and MPI's buffers, HDF5's caches). Called before
// the stage's first buffer.
#define RUNTIME_GROWTH (16.0 * 1048576.0)
double mem_runtime_bytes(const Config *c);
// What a budget named as the smallest that works (a refusal's) adds for a measured runtime: it
// differs between processes by a few hundred KB, so that another process's runtime may round
// up to the next MiB; 0 where mem_runtime is set.
#define RUNTIME_MARGIN (2.0 * 1048576.0)
double mem_runtime_margin(const Config *c);

// The resident layers [first, last) of a run of config c, by owner (out[N_MEM_OWNERS] += ...):
// weights and the versions kept for lagged ops, the gradient, the reference and the estimate
// (pipeline_setup.c makes that one), the optimizer
// state; the tied table's second copy (all of its buffers) apart.
void mem_resident_bytes(const Config *c, const Model *m, int first, int last, double *out);

#endif
