// Cutting a model into pipeline stages: contiguous runs of layers.
#ifndef FGPIPE_PARTITION_H
#define FGPIPE_PARTITION_H

#include "common.h"
#include "model.h"

// Splits the model's layers into M contiguous stages: first[s] is stage s's first layer,
// first[M] = n_layers. `boundaries` lists first[1..M-1] ("2,4,6"), or is "auto": stages of
// equal work, by minimising the largest stage's cost, where layer l costs layer_cost[l]
// (NULL: its parameter count, the GEMM work). Stages start at linear layers.
int partition_layers(const Model *m, int M, const char *boundaries, const double *layer_cost,
                     int *first, FgError *err);

#endif
