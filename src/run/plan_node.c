// fgpipe plan --node: the design's two curves (docs/out-of-core.md, "Choosing the batch") for a
// node described, not measured: D devices of a peak FLOP/s and a memory each, sharing one
// weights store on flash of a read and write bandwidth, training one transformer stage that
// streams its layers. Against the batch (sequences a step, b = B / D per device):
//  - activation memory per device grows with it: bp keeps each block's inputs for its backward,
//    b T L (34 C + 5 H T) x 2 bytes (Korthikanti et al. 2022's count for 16-bit activations,
//    doubled: fgpipe keeps FP32), fg keeps only the layer computing, its widest activation (the
//    MLP's 4 C) in and out with its K tangents: b T x 2 (1 + K) 4 C x 4 bytes;
//  - the flash bandwidth a step needs falls with it: the store (N parameters x the optimizer's
//    buffers x 4 bytes) is read once per wave (bp: 2, fg: 1) and written once a step, whatever
//    the batch, while the step's compute is B T (6 N + 12 L C T) FLOPs over D x the peak.
// The model is the config's (model = gpt or llama: n_layer, n_embd, n_head, ctx) or, with
// --params, N parameters in GPT-3's proportions (width 128 x the depth).
#include "plan_node.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layer_source.h"

// "devices=8,tflops=312,memory=80G,flash=25[,flash_write=W]" (memory in bytes with K/M/G/T,
// flash in GB/s); every key but flash_write is needed.
int plan_node_parse(const char *text, NodeSpec *out, FgError *err) {
    *out = (NodeSpec){0};
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '='), *end = NULL;
        if (!eq) return fg_fail(err, FG_ERR_INPUT, "--node: '%s' is not KEY=VALUE (devices, tflops, memory, flash, flash_write)", kv);
        *eq = 0;
        double v = strtod(eq + 1, &end);
        double unit = !strcmp(kv, "memory") ? (*end == 'K' ? 1e3 : *end == 'M' ? 1e6 : *end == 'G' ? 1e9 : *end == 'T' ? 1e12 : 1) : 1;
        if (unit != 1) end++;
        if (end == eq + 1 || *end || !(v > 0) || !isfinite(v))
            return fg_fail(err, FG_ERR_INPUT, "--node: %s=%s is not a positive number", kv, eq + 1);
        if (!strcmp(kv, "devices")) out->devices = (int)v;
        else if (!strcmp(kv, "tflops")) out->flops = v * 1e12;
        else if (!strcmp(kv, "memory")) out->memory = v * unit;
        else if (!strcmp(kv, "flash")) out->flash_read = v * 1e9;
        else if (!strcmp(kv, "flash_write")) out->flash_write = v * 1e9;
        else return fg_fail(err, FG_ERR_INPUT, "--node: unknown key '%s' (devices, tflops, memory, flash, flash_write)", kv);
    }
    if (!out->flash_write) out->flash_write = out->flash_read;
    if (!out->devices || !out->flops || !out->memory || !out->flash_read)
        return fg_fail(err, FG_ERR_INPUT, "--node needs devices, tflops, memory and flash (e.g. "
                       "devices=8,tflops=312,memory=80G,flash=25)");
    return FG_OK;
}

// The model's shape: the config's, or N parameters in GPT-3's proportions.
static NodeModel node_model(const Config *c, double params) {
    NodeModel m = {.ctx = c->net.ctx, .heads = c->net.n_head};
    if (params > 0) {
        double width = cbrt(params * 128.0 / 12.0);  // 12 L C^2 = N, C = 128 L
        m.width = (int)fmax(128.0, round(width / 128.0) * 128.0);
        m.layers = (int)fmax(1.0, round(params / (12.0 * m.width * (double)m.width)));
        m.heads = m.width / 128;
        m.params = params;
    } else {
        m.width = c->net.n_embd, m.layers = c->net.n_layer;
        m.params = 12.0 * m.layers * m.width * (double)m.width + (double)c->net.vocab * m.width;
    }
    return m;
}

NodeRow plan_node_row(const Config *c, const NodeSpec *n, const NodeModel *m, int fg, int batch) {
    const LayerNeeds need = layer_needs(c);
    const double T = m->ctx, C = m->width, L = m->layers, H = m->heads;
    const double b = (double)batch / n->devices;  // sequences per device
    const double store = m->params * (1 + need.opt_buffers + need.ref) * sizeof(float);
    NodeRow r = {.batch = batch};
    r.activations = fg ? b * T * 2.0 * (1 + c->method.tangents) * 4.0 * C * sizeof(float)
                       : b * T * L * (34.0 * C + 5.0 * H * T) * 2.0;
    // bp's forward wave reads the parameters alone, its backward wave steps (reads and writes
    // every buffer); fg's one wave steps (update_plan.c)
    r.read = (fg ? 0 : m->params * sizeof(float)) + store, r.write = store;
    r.compute = batch * T * (6.0 * m->params + 12.0 * L * C * T) / (n->devices * n->flops);
    r.io = r.read / n->flash_read + r.write / n->flash_write;
    r.needed_bandwidth = (r.read + r.write) / r.compute;
    // beside the activations a device holds two copies of the largest layer (one computing,
    // one loading): an MLP matrix of 4 C^2 with the optimizer's buffers
    r.memory = r.activations + 2.0 * 4.0 * C * C * (1 + need.opt_buffers + need.ref) * sizeof(float);
    return r;
}

static void print_curve(const Config *c, const NodeSpec *n, const NodeModel *m, int fg, int at, FILE *out) {
    fprintf(out, "%-4s %7s %14s %10s %9s %9s %12s  %s\n", "mode", "batch", "activ. GB/dev",
            "step s", "I/O s", "moved GB", "need GB/s", "bound");
    for (int batch = n->devices; batch <= 64 * n->devices || batch <= 2 * at; batch *= 2) {
        NodeRow r = plan_node_row(c, n, m, fg, batch);
        fprintf(out, "%-4s %7d %14.2f %10.2f %9.2f %9.0f %12.1f  %s%s\n", fg ? "fg" : "bp", batch,
                r.activations / 1e9, r.compute, r.io, (r.read + r.write) / 1e9, r.needed_bandwidth / 1e9,
                r.io > r.compute ? "flash" : "compute", r.memory > n->memory ? ", over the device's memory" : "");
    }
    NodeRow r = plan_node_row(c, n, m, fg, at);
    fprintf(out, "     -> batch %d (%g a device): %s-bound (needs %.1f GB/s of %.1f), %.2f GB of "
            "activations a device%s\n", at, (double)at / n->devices, r.io > r.compute ? "flash" : "compute",
            r.needed_bandwidth / 1e9, (n->flash_read + n->flash_write) / 2e9, r.activations / 1e9,
            r.memory > n->memory ? ": over the device's memory" : ", fits");
}

int plan_print_node(const Config *c, const NodeSpec *n, double params, int at, FILE *out, FgError *err) {
    if (strcmp(c->net.model, "gpt") != 0 && strcmp(c->net.model, "llama") != 0)
        return fg_fail(err, FG_ERR_INPUT, "plan --node describes a transformer: model = gpt or llama");
    NodeModel m = node_model(c, params);
    fprintf(out, "fgpipe plan --node: %d devices of %.0f TFLOP/s and %.0f GB sharing one store on "
            "flash (%.1f GB/s read, %.1f write); the model %.3g parameters, %d blocks of width %d, "
            "%d heads, ctx %d; %s, %d tangent%s for fg\n", n->devices, n->flops / 1e12, n->memory / 1e9,
            n->flash_read / 1e9, n->flash_write / 1e9, m.params, m.layers, m.width, m.heads, m.ctx,
            c->optim.optimizer == OPT_ADAM ? "AdamW" : "SGD", c->method.tangents, c->method.tangents > 1 ? "s" : "");
    fprintf(out, "batch: sequences a step on the node; the step at the devices' peak (6 N + 12 L C T "
            "FLOPs a token); bytes moved: the store read once a wave, written once a step\n");
    print_curve(c, n, &m, 0, at, out);
    print_curve(c, n, &m, 1, at, out);
    return FG_OK;
}
