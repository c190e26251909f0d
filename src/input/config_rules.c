// What options imply beside their own value, without the key table (config.c calls these): the
// estimator auto resolves to; row blocks of the token table (table_block_rows; docs/
// out-of-core.md, "Row blocks of the token table"): which runs may take them, their unit, and
// the check of a block size set by hand.
#include <stdio.h>
#include <string.h>

#include "config.h"

EstimatorKind config_estimator(const Config *c) {
    if (c->method.estimator != EST_AUTO) return c->method.estimator;
    return c->method.perturb == PERTURB_ACTIVITY ? EST_MIX : EST_CV;
}

int config_table_block_unit(const Config *c) {
    int r = c->net.head_block, C = c->net.n_embd;
    while (((size_t)r * C) % 1024) r += c->net.head_block;
    return r;
}

// Built for the CPU, bp and weight tangents: a block's activity, low-rank, guided or mix terms
// are not written, the GPU's head has no row form, a rerun forward takes whole layers.
int config_table_blocks_forbidden(const Config *c, char *option, char *why, size_t size) {
    EstimatorKind est = config_estimator(c);
    if (strcmp(c->net.model, "gpt") != 0 && strcmp(c->net.model, "llama") != 0) {
        snprintf(option, CONFIG_OPTION_MAX, "model = %.48s", c->net.model);
        snprintf(why, size, "row blocks of the token table are built for model = gpt and llama "
                 "only (this is %s)", c->net.model);
    } else if (c->layout.device != DEVICE_CPU) {
        snprintf(option, CONFIG_OPTION_MAX, "device = cuda");
        snprintf(why, size, "row blocks of the token table are built for device = cpu only (the "
                 "GPU's fused head has no row form)");
    } else if (c->method.mode != MODE_BP && (c->method.perturb != PERTURB_WEIGHT || c->method.tangent_rank ||
                                             (c->method.mode == MODE_FG_BP && est != EST_CV && est != EST_FG))) {
        if (c->method.perturb != PERTURB_WEIGHT) snprintf(option, CONFIG_OPTION_MAX, "perturb = activity");
        else if (c->method.tangent_rank) snprintf(option, CONFIG_OPTION_MAX, "tangent_rank = %d", c->method.tangent_rank);
        else snprintf(option, CONFIG_OPTION_MAX, "estimator = %s", est == EST_GUIDED ? "guided" : "mix");
        snprintf(why, size, "fg and fg+bp run on row blocks of the token table with perturb = "
                 "weight, tangent_rank = 0 and (fg+bp) estimator cv or fg only (a row block's "
                 "activity, low-rank, guided or mix terms are not written)");
    } else if (c->timetable.recompute != RECOMPUTE_NONE) {
        snprintf(option, CONFIG_OPTION_MAX, "recompute = stage");
        snprintf(why, size, "recompute = stage reruns the forward of whole layers; set recompute = none");
    } else {
        return 0;
    }
    return 1;
}

// A block's rows start the head's blocks of columns, and a block's bytes are whole 4 KiB pages
// (direct I/O) at offsets the tied copies' spill file takes (1024 floats).
int config_validate_table_blocks(const Config *c, FgError *err) {
    int rows = c->layout.table_block_rows, C = c->net.n_embd;
    char why[320], option[CONFIG_OPTION_MAX];
    if (!rows) return FG_OK;
    if (config_table_blocks_forbidden(c, option, why, sizeof why))
        return fg_fail(err, FG_ERR_INPUT, "table_block_rows = %d: %s", rows, why);
    if (rows % c->net.head_block || ((size_t)rows * C) % 1024)
        return fg_fail(err, FG_ERR_INPUT, "table_block_rows = %d: must be a multiple of head_block "
                       "(%d) and its rows of n_embd = %d floats a multiple of 1024 floats (4 KiB "
                       "pages); %d would do", rows, c->net.head_block, C, config_table_block_unit(c));
    return FG_OK;
}
