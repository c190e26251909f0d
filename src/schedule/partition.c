// Cutting a model into pipeline stages.
#include "partition.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"

int partition_layers(const Model *m, int M, const char *boundaries, const double *layer_cost,
                     int *first, FgError *err) {
    int L = m->n_layers;
    if (M > L)
        return fg_fail(err, FG_ERR_INPUT, "stages: %d stages for a model of %d layers", M, L);
    first[0] = 0;
    first[M] = L;
    if (strcmp(boundaries, "auto") != 0) {
        const char *s = boundaries;
        for (int i = 1; i < M; i++) {
            char *end;
            long v = strtol(s, &end, 10);
            if (end == s || v <= first[i - 1] || v >= L || (*end && *end != ','))
                return fg_fail(err, FG_ERR_INPUT,
                               "boundaries: '%s' must list %d increasing layer indices in 1..%d "
                               "(first layer of stages 1..%d)",
                               boundaries, M - 1, L - 1, M - 1);
            first[i] = (int)v;
            s = *end ? end + 1 : end;
        }
        if (*s)
            return fg_fail(err, FG_ERR_INPUT, "boundaries: '%s' has more than %d entries",
                           boundaries, M - 1);
        return FG_OK;
    }
    // Smallest possible largest stage, by dynamic programming over cut positions; counted in
    // parameters, a layer costs one more so that activation layers are not free.
    double cost[MODEL_MAX_LAYERS + 1] = {0};
    for (int l = 0; l < L; l++)
        cost[l + 1] = cost[l] + (layer_cost ? layer_cost[l] : (double)m->layers[l].param_count + 1.0);
    double best[SCHED_MAX_STAGES + 1][MODEL_MAX_LAYERS + 1];
    int cut[SCHED_MAX_STAGES + 1][MODEL_MAX_LAYERS + 1];
    for (int j = 0; j <= L; j++) best[1][j] = cost[j], cut[1][j] = 0;
    // Stages start at linear layers only: an activation stays with the layer it follows.
    for (int s = 2; s <= M; s++)
        for (int j = s; j <= L; j++) {
            best[s][j] = INFINITY;
            for (int i = s - 1; i < j; i++) {
                if (m->layers[i].kind != LAYER_LINEAR) continue;
                double v = fmax(best[s - 1][i], cost[j] - cost[i]);
                if (v < best[s][j]) best[s][j] = v, cut[s][j] = i;
            }
        }
    if (!isfinite(best[M][L]))
        return fg_fail(err, FG_ERR_INPUT, "stages: %d stages, but a stage must start at a linear layer and the model has fewer (set boundaries explicitly or use fewer stages)", M);
    for (int s = M, j = L; s >= 1; s--) first[s - 1] = j = cut[s][j];
    first[0] = 0;
    return FG_OK;
}

