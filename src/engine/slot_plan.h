// How a streamed stage's memory budget becomes slots (docs/out-of-core.md): the largest layer
// sets a large slot's size, and the budget beside the stage's work and the process's runtime
// how many fit. Where the largest layers dwarf the others (a GPT's token table beside its
// blocks' matrices), the rest of the budget goes to small slots for the layers of at most half
// the largest: many more of those fit, so the small layers are read far ahead. The tiny layers
// among them (norms, LoRA adapters: at most 1/16 of the largest small one) get tiny slots of
// their own, so that they do not take a small slot each and cut the read-ahead short.
#ifndef FGPIPE_SLOT_PLAN_H
#define FGPIPE_SLOT_PLAN_H

#include <stddef.h>

#include "backend.h"
#include "config.h"
#include "layer_stream.h"
#include "model.h"

typedef struct {
    size_t largest, small, tied[2];  // floats of the largest layer, of the largest small one
                                     // (0: no small slots), of the tied copies held here
    size_t large_bytes;       // a large slot in both stores: the largest layer's weights slot
                              // and the largest trained layer's step slot
    size_t small_bytes;       // a small slot in both stores: the small layers' largest weights
                              // slot (a frozen one: its parameters alone) and step slot
    int largest_layer;        // the model's index of the largest layer
    int small_layers;         // layers that fit a small slot
    int large_layers;         // layers that take a large slot (the tied copies kept once: one)
    int twin;                 // tied_last when the store keeps the tied copies once, else -1
    int n_weights, n_step;    // buffers per trained layer in the weights store and the step store
    size_t tiny, tiny_bytes;  // floats of the largest tiny layer (0: none), a tiny slot's bytes
    int tiny_layers;          // small layers that fit a tiny slot
    int n_slots, n_small, n_tiny;
    size_t lane_weights;      // floats of a device's copy of a layer's weights part (its
    size_t lane_step;         // buffers packed; a frozen layer's params alone) and step part
    int device_lanes;         // a device's copies of the layer it computes on (device_lanes.h):
                              // two where the budget holds them (uploads overlap compute), else
                              // one; 0 on the CPU
    int weights16;            // the GEMMs read BF16 weights (LayerNeeds.weights16)
    size_t copy16;            // values of the held layer's BF16 copy, made from its FP32 slot
                              // once per acquire (the largest such layer's; 0: none)
    size_t wide16;            // floats of a BF16 slot widened for a reader of floats (a
                              // checkpoint, a load: slot_bf16.h), the largest one's; 0: none
} SlotPlan;

// A bf16 run's streamed layers, decided once per layer from the model and the config: a layer
// whose slot holds BF16 (slot16: a frozen base kept in BF16 whose only reads are BF16 GEMMs, a
// linear layer without bias that is no tied copy: half its slot, read and fed to the GEMMs as
// on flash, never widened), or whose GEMMs read a BF16 copy of its FP32 slot (copy16: the other
// layers of layer_has_weights16), or neither (norms, biases: FP32 reads; an fp32 run).
int slot_plan_slot16(const Config *c, const Model *m, int l);
int slot_plan_copy16(const Config *c, const Model *m, int l);

// Page-locked host bytes of the slots of a store of n_bufs buffers per layer (a device's).
size_t slot_plan_memory_bytes(const SlotPlan *sp, int n_bufs);

size_t slot_plan_page_round(size_t bytes);

// The plan for the stage's layers [first, last) within c->layout.mem_budget, less work_bytes
// and runtime (spill: the tied copies' gradients go to a spill file, else they take memory);
// a budget without room for the smallest set of slots is refused naming the smallest that works.
int slot_plan_make(const Backend *be, const Config *c, const Model *m, int first, int last,
                   int stage, double work_bytes, double runtime, int spill, SlotPlan *sp,
                   FgError *err);

// What the stage's slots take (the token table's row blocks are chosen by them, table_rows.c):
// the floor slot_plan_make refuses below; two slots of the largest layer, so that one is read
// while the other computes, with the small ones that overlap; the tied copies' gradients, which
// take memory where they cannot spill.
typedef struct {
    double floor, two, tied;
} SlotNeeds;
SlotNeeds slot_plan_needs(const Config *c, const Model *m, int first, int last);

// Whether layer l takes a large slot of a plan with small ones (its slot's bytes, not its
// parameters, decide: a BF16 slot holds twice the values).
int slot_plan_large(const SlotPlan *sp, const Model *m, int l);

// Bytes of the held layer's BF16 copy (SlotPlan.copy16), which the budget holds beside the slots.
double slot_plan_copy16_bytes(const SlotPlan *sp);

// Bytes of one version of the stage's layers in both stores.
double slot_plan_flash_bytes(const SlotPlan *sp, const Model *m, int first, int last);
// A step's weights bytes read from and written to flash by layers [first, last) (the step
// stores' aside), every wave's: a trained layer's buffers both ways in the wave that steps it,
// its parameters alone read by bp's and fg+bp's other wave (all of them where F dots the
// reference), a frozen one's parameters read by each wave, each in its stored dtype
// (Layer.stored_bf16: 2 bytes a value). slot_plan_pass_bytes: a pass that steps nothing (an
// evaluation).
double slot_plan_pass_bytes(const Config *c, const Model *m, int first, int last);
void slot_plan_step_bytes(const Config *c, const Model *m, int first, int last, double *read,
                          double *write);

// " (2 of A MB, N of B MB ...)" when the plan has small slots, else "".
const char *slot_plan_note(const SlotPlan *sp, char *note, size_t size);

// The plan's slots as a stream takes them (large, small, tiny), and how many in all.
SlotClasses slot_plan_classes(const SlotPlan *sp);
int slot_plan_total(const SlotPlan *sp);

#endif
