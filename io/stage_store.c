#include "stage_store.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "direct_io.h"
#include "layer_store.h"
#include "layer_stream_store.h"

// Version 0: each layer's initial weights (or zeros) through one slot-sized buffer, a row block
// at a time for a layer in blocks.
static int write_version0(LayerStore *s, const LayerStreamSpec *spec, FgError *err) {
    int rc = FG_OK;
    unsigned char *buf = dio_alloc(layer_store_max_block_slot_bytes(s));
    size_t aux = layer_store_aux_bytes(s);
    if (aux) {
        unsigned char *zeros = dio_alloc(aux);
        rc = layer_store_write_aux(s, 0, zeros, err);
        fg_free(zeros);
    }
    for (int i = 0; i < layer_store_n_layers(s) && !rc; i++) {
        const StoreLayer *ly = layer_store_layer(s, i);
        for (int b = 0, n = layer_store_n_blocks(s, i); b < n && !rc; b++) {
            size_t count = layer_store_block_floats(s, i, b);
            size_t first = (size_t)b * layer_store_block_stride(s, i) / sizeof(float);
            memset(buf, 0, layer_store_block_slot_bytes(s, i));
            if (spec->fill_weights) model_init_part(spec->model, ly->layer, first, count, (float *)buf, spec->seed);
            rc = layer_store_write_block(s, i, b, 0, buf, err);
        }
    }
    fg_free(buf);
    return rc;
}

// The model's row blocks (Layer.block_rows) of the store's layers.
static int set_blocks(LayerStore *s, const Model *m, FgError *err) {
    int rc = FG_OK;
    for (int i = 0; i < layer_store_n_layers(s) && !rc; i++) {
        const Layer *L = &m->layers[layer_store_layer(s, i)->layer];
        if (L->block_rows) rc = layer_store_set_block(s, i, (size_t)L->block_rows * layer_row_floats(L), err);
    }
    return rc;
}

// The layers whose slots hold BF16 as on flash (LayerStreamSpec.slot16): after version 0, which
// a new store writes from floats.
static int set_slot16(LayerStore *s, const LayerStreamSpec *spec, FgError *err) {
    int rc = FG_OK;
    for (int i = 0; spec->slot16 && i < layer_store_n_layers(s) && !rc; i++)
        if (spec->slot16[layer_store_layer(s, i)->layer]) rc = layer_store_set_slot16(s, i, err);
    return rc;
}

// A BF16 layer (a frozen base as imported) is never widened over: a run that would train it is
// refused by name.
static int check_bf16(LayerStore *s, const LayerStreamSpec *spec, FgError *err) {
    for (int i = 0; i < layer_store_n_layers(s); i++) {
        const StoreLayer *have = layer_store_layer(s, i);
        if (have->bf16 && !spec->model->layers[have->layer].frozen)
            return fg_fail(err, FG_ERR_INPUT, "layer store %s/%s keeps layer %s in BF16 (a frozen "
                           "base, as imported); this run would train it: a BF16 store is not "
                           "widened over. Start from the checkpoint (--init-from) instead of "
                           "--resume-weights, or freeze it again", spec->dir, spec->name, have->name);
    }
    return FG_OK;
}

// A reopened store must hold exactly the stage's layers with the asked-for buffers.
static int check_layout(LayerStore *s, const LayerStreamSpec *spec, const StoreLayer *want, int n,
                        FgError *err) {
    int rc = check_bf16(s, spec, err);
    if (rc) return rc;
    int same = layer_store_n_layers(s) == n && layer_store_n_bufs(s) == spec->n_bufs &&
               layer_store_aux_bytes(s) == spec->aux_bytes;
    for (int i = 0; i < n && same; i++) {
        const StoreLayer *have = layer_store_layer(s, i);
        same = have->layer == want[i].layer && have->count == want[i].count &&
               have->frozen == want[i].frozen;
    }
    if (same) return FG_OK;
    return fg_fail(err, FG_ERR_INPUT, "layer store %s/%s was made for another model, optimizer or "
                   "layout, or other frozen layers (%d layers x %d buffers there, %d x %d here)", spec->dir, spec->name,
                   layer_store_n_layers(s), layer_store_n_bufs(s), n, spec->n_bufs);
}

// A new store (and the stores made after it) must fit the flash: refused before anything is
// written, naming the bytes (a trained layer takes two slots of its buffers, a frozen one one
// copy of its parameters).
static int check_room(const LayerStreamSpec *spec, const StoreLayer *layers, int n, FgError *err) {
    double need = 0.0;
    for (int i = 0; i < n; i++)  // a frozen layer: no optimizer state, no step buffers
        need += (layers[i].frozen ? 1.0 : 2.0 * (spec->n_bufs + spec->later_bufs)) *
                (double)dio_round_up(layers[i].count * (layers[i].bf16 ? 2 : sizeof(float)));
    need += spec->later_bytes;
    struct statvfs fs;
    if (statvfs(spec->dir, &fs) != 0) return FG_OK;  // create reports an unusable dir by name
    double room = (double)fs.f_bavail * (double)fs.f_frsize;
    if (need <= room) return FG_OK;
    return fg_fail(err, FG_ERR_INPUT, "weights dir %s has %.3f GB free; stage layers %d..%d need "
                   "%.3f GB there (two slots of every trained layer's weights, optimizer state and "
                   "step buffers, one of every frozen layer's weights, and the tied copies' spill): nothing was written; free space or name another --weights-dir",
                   spec->dir, room / 1e9, spec->first, spec->last - 1, need / 1e9);
}

int stage_store_open(void *arg, const LayerStreamSpec *spec, LayerStream *out, FgError *err) {
    (void)arg;
    StoreLayer layers[MODEL_MAX_LAYERS];
    int skip = spec->tied_once ? spec->model->tied_last : -1;
    int n = layer_store_layers_for_stage(spec->model, spec->first, spec->last, spec->frozen, skip, layers);
    StoreOptions opt = {.n_bufs = spec->n_bufs, .aux_bytes = spec->aux_bytes, .preallocate = 1,
                        .staged = spec->staged};
    LayerStore *s = NULL;
    int rc;
    if (spec->reopen) {
        rc = layer_store_open_at(&s, spec->dir, spec->name, spec->version, err);
        if (!rc) rc = check_layout(s, spec, layers, n, err);
        if (!rc) rc = set_blocks(s, spec->model, err);
    } else {
        mkdir(spec->dir, 0755);  // a new weights dir (any failure is reported by create)
        rc = check_room(spec, layers, n, err);
        if (!rc) rc = layer_store_create(&s, spec->dir, spec->name, n, layers, &opt, err);
        if (!rc) rc = set_blocks(s, spec->model, err);
        if (!rc) rc = write_version0(s, spec, err);
    }
    if (!rc) rc = set_slot16(s, spec, err);
    if (rc) {
        if (s) layer_store_close(s);
        return rc;
    }
    return layer_stream_store_open_in(out, s, &spec->slots, spec->slot_memory, spec->slot_memory_bytes,
                                      err);  // owns s from here
}
