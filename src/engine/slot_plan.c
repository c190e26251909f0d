// Slots of a streamed stage (slot_plan.h).
#include "slot_plan.h"

#include <stdio.h>

#include "device_lanes.h"
#include "layer_source.h"
#include "mem_account.h"

size_t slot_plan_page_round(size_t bytes) { return (bytes + 4095) / 4096 * 4096; }
static size_t page_round(size_t bytes) { return slot_plan_page_round(bytes); }

// Floats of what a slot holds of a layer: the layer, or one of its row blocks (its largest).
static size_t unit_floats(const Layer *L) {
    size_t first, n;
    layer_block(L, 0, &first, &n);
    return n;
}

static int slot16_layer(int weights16, const Model *m, int l) {
    const Layer *L = &m->layers[l];
    return weights16 && L->frozen && L->stored_bf16 && L->kind == LAYER_LINEAR && L->no_bias &&
           !L->block_rows && l != m->tied_first && l != m->tied_last;
}

int slot_plan_slot16(const Config *c, const Model *m, int l) {
    return slot16_layer(layer_needs(c).weights16, m, l);
}

int slot_plan_copy16(const Config *c, const Model *m, int l) {
    const int weights16 = layer_needs(c).weights16;
    return weights16 && layer_has_weights16(&m->layers[l]) && !slot16_layer(weights16, m, l);
}

// Floats of slot memory a unit of layer l takes: a BF16 slot's values two to a float.
static size_t slot_floats(const SlotPlan *sp, const Model *m, int l) {
    size_t n = unit_floats(&m->layers[l]);
    return slot16_layer(sp->weights16, m, l) ? (n + 1) / 2 : n;
}

// Bytes of a layer's slot in the weights store.
static size_t weights_bytes(const SlotPlan *sp, const Model *m, int l) {
    return (size_t)(m->layers[l].frozen ? 1 : sp->n_weights) * page_round(slot_floats(sp, m, l) * sizeof(float));
}

int slot_plan_large(const SlotPlan *sp, const Model *m, int l) {
    return sp->small && m->layers[l].param_count && slot_floats(sp, m, l) > sp->small;
}

double slot_plan_copy16_bytes(const SlotPlan *sp) { return (double)page_round(sp->copy16 * sizeof(uint16_t)); }

// The layers the stores hold: all but the twin (the tied head reading the embedding's copy).
static int stored(const SlotPlan *sp, const Model *m, int l) {
    return m->layers[l].param_count && l != sp->twin;
}

// The layers of at most `bound` floats a slot: the largest one's floats, how many, and the
// bytes of a slot that holds any of them whole in each store: a frozen one its parameters alone
// (an 8B base's gate and up in BF16, 235 MB, where trained layers' 3 buffers of its size would
// take 705), a trained one all its buffers.
typedef struct {
    size_t floats, bytes;
    int layers;
} ClassSize;

static ClassSize class_size(const SlotPlan *sp, const Model *m, int first, int last, size_t bound) {
    ClassSize c = {0};
    size_t weights = 0, step = 0;
    for (int l = first; l < last; l++) {
        if (!stored(sp, m, l) || slot_floats(sp, m, l) > bound) continue;
        c.floats = FG_MAX(c.floats, slot_floats(sp, m, l));
        weights = FG_MAX(weights, weights_bytes(sp, m, l));
        if (!m->layers[l].frozen)
            step = FG_MAX(step, (size_t)sp->n_step * page_round(slot_floats(sp, m, l) * sizeof(float)));
        c.layers++;
    }
    c.bytes = weights + step;
    return c;
}

// The small layers are those of at most half the largest; the tiny ones among them those of at
// most 1/TINY_RATIO of the largest small one.
enum { TINY_RATIO = 16 };

static void plan_layers(const Model *m, int first, int last, SlotPlan *sp, int *param_layers) {
    *param_layers = 0;
    size_t weights = 0, trained = 0;
    for (int l = first; l < last; l++) {
        const Layer *L = &m->layers[l];
        if (sp->weights16 && L->param_count && layer_has_weights16(L) && !slot16_layer(sp->weights16, m, l))
            sp->copy16 = FG_MAX(sp->copy16, unit_floats(L));  // the twin's too: made from its slot
        if (slot16_layer(sp->weights16, m, l)) sp->wide16 = FG_MAX(sp->wide16, unit_floats(L));
        if (!stored(sp, m, l)) continue;
        if (slot_floats(sp, m, l) > sp->largest) sp->largest = slot_floats(sp, m, l), sp->largest_layer = l;
        weights = FG_MAX(weights, weights_bytes(sp, m, l));
        sp->lane_weights = FG_MAX(sp->lane_weights, (size_t)(L->frozen ? 1 : sp->n_weights) * unit_floats(L));
        if (!L->frozen) trained = FG_MAX(trained, unit_floats(L));
        ++*param_layers;
        // A tied embedding's copies keep their gradient apart (tied_grad, or a spill file).
        // Kept once, the embedding's gradient stays in the layer buffer: it steps in its wave.
        if (l == m->tied_first && !L->frozen && sp->twin < 0) sp->tied[0] = L->param_count;
    }
    if (m->tied_last >= first && m->tied_last < last && !m->layers[m->tied_last].frozen)
        sp->tied[1] = m->layers[m->tied_last].param_count;
    sp->large_bytes = weights + (size_t)sp->n_step * page_round(trained * sizeof(float));
    sp->lane_step = (size_t)sp->n_step * trained;
    ClassSize small = class_size(sp, m, first, last, sp->largest / 2);
    sp->small = small.floats, sp->small_bytes = small.bytes, sp->small_layers = small.layers;
    sp->large_layers = *param_layers - small.layers;
    ClassSize tiny = class_size(sp, m, first, last, sp->small / TINY_RATIO);
    sp->tiny = tiny.floats, sp->tiny_bytes = tiny.bytes, sp->tiny_layers = tiny.layers;
}

// Small slots that overlap the small layers' I/O with compute (one computed, one read ahead,
// one written back): the floor has them (with two, GPT-2 124M streamed at 0.83 of its bound,
// with three at 0.93), and slot_plan_make gives up a second large slot that would leave fewer.
enum { SMALL_SLOTS_OVERLAP = 3 };

static int overlap_slots(const SlotPlan *sp) { return FG_MIN(SMALL_SLOTS_OVERLAP, sp->small_layers); }

// The smallest stage that streams: two slots of the largest layer, or, with small slots, one of
// it and overlap_slots small ones when that is less (the token table's copies are never pinned
// at once: one large slot serves both, read again when the other was in it, unless they are one).
static int one_large_slot(const SlotPlan *sp) {
    return sp->small && (size_t)overlap_slots(sp) * sp->small_bytes < sp->large_bytes;
}

static double slots_floor(const SlotPlan *sp) {
    size_t slot = sp->large_bytes, small = sp->small_bytes;
    return one_large_slot(sp) ? (double)slot + overlap_slots(sp) * (double)small : 2.0 * (double)slot;
}

static void plan_sizes(const Config *c, const Model *m, int first, int last, SlotPlan *sp,
                       int *param_layers);

// One buffer of layer l on flash: a frozen base imported in BF16 keeps 2 bytes a value.
static double stored_buffer_bytes(const Layer *L) {
    return (double)L->param_count * (L->stored_bf16 ? 2 : sizeof(float));
}

double slot_plan_flash_bytes(const SlotPlan *sp, const Model *m, int first, int last) {
    double bytes = 0.0;
    for (int l = first; l < last; l++)
        if (stored(sp, m, l))
            bytes += (m->layers[l].frozen ? 1 : sp->n_weights + sp->n_step) * stored_buffer_bytes(&m->layers[l]);
    return bytes;
}

// One wave steps a trained layer (reads and writes its buffers); bp and fg+bp have a second,
// which reads its parameters alone unless F dots the reference (update_plan.c's wave_parts).
void slot_plan_step_bytes(const Config *c, const Model *m, int first, int last, double *read,
                          double *write) {
    SlotPlan sp;
    int param_layers;
    plan_sizes(c, m, first, last, &sp, &param_layers);
    const int waves = c->method.mode == MODE_FG ? 1 : 2, other = layer_needs(c).ref ? sp.n_weights : 1;
    *read = *write = 0.0;
    for (int l = first; l < last; l++) {
        if (!stored(&sp, m, l)) continue;
        const Layer *L = &m->layers[l];
        *read += (L->frozen ? waves : sp.n_weights + (waves - 1) * other) * stored_buffer_bytes(L);
        if (!L->frozen) *write += sp.n_weights * stored_buffer_bytes(L);
    }
}

double slot_plan_pass_bytes(const Config *c, const Model *m, int first, int last) {
    SlotPlan sp;
    int param_layers;
    plan_sizes(c, m, first, last, &sp, &param_layers);
    const int reads = layer_needs(c).ref ? sp.n_weights : 1;
    double bytes = 0.0;
    for (int l = first; l < last; l++)
        if (stored(&sp, m, l)) bytes += (m->layers[l].frozen ? 1 : reads) * stored_buffer_bytes(&m->layers[l]);
    return bytes;
}

static void plan_sizes(const Config *c, const Model *m, int first, int last, SlotPlan *sp,
                       int *param_layers) {
    LayerNeeds need = layer_needs(c);
    *sp = (SlotPlan){.n_weights = 1 + need.opt_buffers + need.ref,
                     .n_step = need.keep_grad + need.prev, .twin = -1, .weights16 = need.weights16};
    // bp steps both copies of a tied table with one sum, from one state, and keeps nothing else
    // per layer (no step store, no reference): one copy on flash serves both, and stays in its
    // slot from the embedding's backward to the head's forward (docs/out-of-core.md).
    int both = m->tied_first >= first && m->tied_first < last && m->tied_last >= first && m->tied_last < last;
    if (m->tied_first >= 0 && both && c->method.mode == MODE_BP && !sp->n_step && !need.ref)
        sp->twin = m->tied_last;
    plan_layers(m, first, last, sp, param_layers);
}

double layer_source_streamed_floor(const Config *c, const Model *m, int first, int last) {
    SlotPlan sp;
    int param_layers;
    plan_sizes(c, m, first, last, &sp, &param_layers);
    return slots_floor(&sp) + slot_plan_copy16_bytes(&sp);  // the tied copies' gradients on flash (tied_spill)
}

size_t layer_source_streamed_params(const Config *c, const Model *m, int first, int last) {
    SlotPlan sp;
    int param_layers;
    plan_sizes(c, m, first, last, &sp, &param_layers);
    size_t n = model_range_count(m, first, last);
    return sp.twin >= 0 ? n - m->layers[sp.twin].param_count : n;
}

SlotNeeds slot_plan_needs(const Config *c, const Model *m, int first, int last) {
    SlotPlan sp;
    int param_layers;
    plan_sizes(c, m, first, last, &sp, &param_layers);
    double two = 2.0 * (double)sp.large_bytes + slot_plan_copy16_bytes(&sp);
    if (one_large_slot(&sp)) two += overlap_slots(&sp) * (double)sp.small_bytes;
    return (SlotNeeds){.floor = slots_floor(&sp) + slot_plan_copy16_bytes(&sp), .two = two,
                       .tied = (double)(sp.tied[0] + sp.tied[1]) * sizeof(float)};
}

// A budget without room for the smallest set of slots, refused naming the smallest that works.
// A measured runtime varies between processes: the budget named leaves a margin for it.
static int refuse_budget(const Config *c, const Model *m, int stage, double work_bytes,
                         double runtime, const SlotPlan *sp, FgError *err) {
    const double margin = mem_runtime_margin(c), slot = (double)sp->large_bytes;
    const double small = (double)sp->small_bytes;
    runtime += margin;
    char faster[160] = "", name[96], measured[64] = "", smalls[48] = "";
    if (margin > 0)
        snprintf(measured, sizeof measured, ", measured, %.0f MiB of it a margin", margin / 1048576.0);
    const Layer *L = &m->layers[sp->largest_layer];
    if (L->block_rows) snprintf(name, sizeof name, "a row block (%d rows) of %s", L->block_rows, L->name);
    else snprintf(name, sizeof name, "%s", L->name);
    if (one_large_slot(sp))
        snprintf(smalls, sizeof smalls, ", and %d of its smaller ones", overlap_slots(sp));
    if (one_large_slot(sp) && sp->large_layers > 1)  // two keep the table's copies in memory
        snprintf(faster, sizeof faster, "; %.0f bytes with two slots of %s",
                 runtime + work_bytes + 2.0 * slot + overlap_slots(sp) * small, name);
    return fg_fail(err, FG_ERR_INPUT, "mem_budget %.0f bytes is too small for stage %d: the "
                   "runtime takes %.0f bytes (mem_runtime%s), its activations need %.0f bytes "
                   "and %s of its largest layer, %s%s, %.0f more (at least %.0f bytes%s)",
                   c->layout.mem_budget, stage, runtime, measured, work_bytes,
                   one_large_slot(sp) ? "one slot" : "two slots", name,
                   smalls, slots_floor(sp),
                   runtime + work_bytes + slots_floor(sp), faster);
}

// The small slots that fit room beside n_large large ones (at most one per small layer).
static int small_slots_left(const SlotPlan *sp, double room, int n_large) {
    double small = (double)sp->small_bytes;
    return (int)FG_MIN((room - n_large * (double)sp->large_bytes) / small, (double)sp->small_layers);
}

// Tiny slots for as many tiny layers as come between the small layers the small slots read
// ahead (one more computing, one written back), their bytes taken from the small slots; none
// when that would leave fewer small slots than overlap them (the tiny layers take small ones).
static void plan_tiny_slots(SlotPlan *sp, double room) {
    const int others = sp->small_layers - sp->tiny_layers;
    if (!sp->tiny_layers || others < 1) return;
    int n_tiny = FG_MIN(sp->tiny_layers, (sp->n_small + 1) * sp->tiny_layers / others + 2);
    double left = room - sp->n_slots * (double)sp->large_bytes - n_tiny * (double)sp->tiny_bytes;
    int n_small = (int)FG_MIN(left / (double)sp->small_bytes, (double)others);
    if (n_small < overlap_slots(sp)) return;
    sp->n_small = n_small, sp->n_tiny = n_tiny;
}

int slot_plan_make(const Backend *be, const Config *c, const Model *m, int first, int last,
                   int stage, double work_bytes, double runtime, int spill, SlotPlan *sp,
                   FgError *err) {
    int param_layers;
    plan_sizes(c, m, first, last, sp, &param_layers);
    if (!spill) work_bytes += (double)(sp->tied[0] + sp->tied[1]) * sizeof(float);
    work_bytes += slot_plan_copy16_bytes(sp);  // beside the slots, as the held layer's work
    size_t slot = sp->large_bytes;
    // A device also holds copies of the layer it computes on: two where they leave the slots'
    // floor (the next layer uploads during this one's compute), else one.
    sp->device_lanes = 0;
    if (be->on_device) {
        // The widened BF16 slot (slot_bf16.h): device memory while a checkpoint or a load holds
        // the layer, counted as the copy is (above); a CPU's is host memory made the same way
        // and left out, as the checkpoint's other buffers are.
        work_bytes += (double)sp->wide16 * sizeof(float);
        size_t lane = sp->lane_weights + sp->lane_step;
        double two = device_lanes_bytes(2, lane);
        sp->device_lanes = c->layout.mem_budget - runtime - work_bytes - two >= slots_floor(sp) ? 2 : 1;
        work_bytes += device_lanes_bytes(sp->device_lanes, lane);
    }
    double room = c->layout.mem_budget - runtime - work_bytes;
    if (room < slots_floor(sp)) return refuse_budget(c, m, stage, work_bytes, runtime, sp, err);
    sp->n_slots = (int)FG_MIN(room / (double)slot, (double)param_layers);
    if (!sp->small) return FG_OK;
    // Two large slots when they fit (the table's copies kept across the step), the rest small,
    // or all large when as many serve as well; else one, which the large layers take in turns
    // (also when two leave too few small slots: GPT-2 1.5B at 3G, 0.71 of its bound with 2 + 1),
    // and when there is one large layer (the table kept once) for the second to hold.
    int n_large = FG_MIN(sp->n_slots, 2), n_small = small_slots_left(sp, room, n_large);
    int overlap = overlap_slots(sp);
    if (n_large == 2 && (n_small < overlap || sp->large_layers == 1) && small_slots_left(sp, room, 1) >= overlap)
        n_large = 1, n_small = small_slots_left(sp, room, 1);
    if (n_large == 2 && n_small <= sp->n_slots - 2) sp->small = sp->tiny = 0;
    else sp->n_slots = n_large, sp->n_small = n_small, plan_tiny_slots(sp, room);
    return FG_OK;
}

size_t slot_plan_memory_bytes(const SlotPlan *sp, int n_bufs) {
    size_t per_buf = (size_t)sp->n_slots * page_round(sp->largest * sizeof(float)) +
                     (size_t)sp->n_small * page_round(sp->small * sizeof(float)) +
                     (size_t)sp->n_tiny * page_round(sp->tiny * sizeof(float));
    return (size_t)n_bufs * per_buf;
}

SlotClasses slot_plan_classes(const SlotPlan *sp) {
    return (SlotClasses){.n = {sp->n_slots, sp->n_small, sp->n_tiny}, .count = {0, sp->small, sp->tiny}};
}

int slot_plan_total(const SlotPlan *sp) { return sp->n_slots + sp->n_small + sp->n_tiny; }

const char *slot_plan_note(const SlotPlan *sp, char *note, size_t size) {
    char tiny[96] = "";
    note[0] = 0;
    if (sp->n_tiny)
        snprintf(tiny, sizeof tiny, ", %d of %.1f MB for those of at most %zu", sp->n_tiny,
                 sp->tiny_bytes / 1e6, sp->tiny);
    if (sp->n_small)
        snprintf(note, size, " (%d of %.0f MB, %d of %.1f MB for the layers of at most %zu "
                 "parameters%s)", sp->n_slots, sp->large_bytes / 1e6, sp->n_small,
                 sp->small_bytes / 1e6, sp->small, tiny);
    return note;
}

