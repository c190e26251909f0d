// Cutting a model into pipeline stages: contiguous runs of layers.
#ifndef FGPIPE_PARTITION_H
#define FGPIPE_PARTITION_H

#include "common.h"
#include "model.h"

// Splits the model's layers into M contiguous stages: first[s] is stage s's first layer,
// first[M] = n_layers. `boundaries` lists first[1..M-1] ("2,4,6"), or is "auto": balance the
// parameter counts (the GEMM work) by minimising the largest stage.
int partition_layers(const Model *m, int M, const char *boundaries, int *first, FgError *err);

#endif
