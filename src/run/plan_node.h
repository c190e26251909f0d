// fgpipe plan --node (plan_node.c): the activation memory and the flash bandwidth a streamed
// transformer stage needs against the batch, for a node described by its devices and flash.
#ifndef FGPIPE_PLAN_NODE_H
#define FGPIPE_PLAN_NODE_H

#include <stdio.h>

#include "common.h"
#include "config.h"

typedef struct {
    int devices;                    // data-parallel devices sharing the node's one store
    double flops;                   // peak FLOP/s of one device
    double memory;                  // bytes of one device
    double flash_read, flash_write; // the node's flash, bytes per second
} NodeSpec;

typedef struct {
    double params;
    int layers, width, heads, ctx;
} NodeModel;

// One point of the curves at `batch` sequences a step on the node: bytes and seconds.
typedef struct {
    int batch;
    double activations, memory;  // per device
    double read, write, io;      // the node's flash, one step
    double compute;              // seconds of one step at the devices' peak
    double needed_bandwidth;     // (read + write) / compute
} NodeRow;

int plan_node_parse(const char *text, NodeSpec *out, FgError *err);
NodeRow plan_node_row(const Config *c, const NodeSpec *n, const NodeModel *m, int fg, int batch);
// The curves for bp and fg and where batch `at` stands; params > 0: a model of that many
// parameters instead of the config's shape.
int plan_print_node(const Config *c, const NodeSpec *n, double params, int at, FILE *out, FgError *err);

#endif
