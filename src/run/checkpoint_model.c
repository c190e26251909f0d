#include "checkpoint_model.h"

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "train_internal.h"

static int visit_flat(void *source, int writable, LayerVisitor visit, void *arg, FgError *err) {
    (void)writable;
    CheckpointModel *cm = source;
    float *bufs[1] = {cm->params};
    return model_visit_layers(&cm->model, 0, cm->model.n_layers, bufs, 1, visit, arg, err);
}

int checkpoint_model_load(CheckpointModel *cm, Storage *io, const char *path, int max_rows,
                          const char *command, FgError *err) {
    memset(cm, 0, sizeof *cm);
    char *text = NULL;
    config_defaults(&cm->cfg);
    int rc = io->load_config(io, path, &text, err);
    if (!rc) rc = config_load_text(&cm->cfg, text, path, err);
    free(text);
    if (rc) return rc;
    if (!config_is_language(&cm->cfg))
        return fg_fail(err, FG_ERR_INPUT, "checkpoint %s holds model '%s', not a gpt: %s reads a "
                       "GPT", path, cm->cfg.net.model, command);
    cm->cfg.net.freeze[0] = 0;  // inference: no layer is trained, none needs to be frozen
    if ((rc = train_build_model(&cm->cfg, 0, &cm->model, err))) return rc;
    cm->params = fg_alloc_floats(cm->model.n_params);
    CheckpointState st = {.model = &cm->model, .first = 0, .last = cm->model.n_layers,
                          .n_buffers = 1, .buffers = {"params"}, .visit_layers = visit_flat,
                          .source = cm};
    if (!rc) rc = io->load(io, &st, path, err);
    if (!rc) rc = stage_init(&cm->stage, &backend_cpu, &cm->model, 0, cm->model.n_layers, max_rows, 0, err);
    if (rc) checkpoint_model_free(cm);
    return rc;
}

void checkpoint_model_free(CheckpointModel *cm) {
    if (cm->stage.be) stage_free(&cm->stage);
    fg_free(cm->params);
    memset(cm, 0, sizeof *cm);
}

const float *checkpoint_model_forward(CheckpointModel *cm, const float *x, int rows) {
    const float *logits;
    stage_forward(&cm->stage, cm->params, NULL, x, NULL, rows, NULL, &logits, NULL);
    return logits;
}
