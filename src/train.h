// Single-rank training: the whole model as one stage, bp or fg, on an IDX dataset.
#ifndef FGPIPE_TRAIN_H
#define FGPIPE_TRAIN_H

#include <stddef.h>

#include "common.h"
#include "config.h"

typedef struct {
    long steps;
    double first_loss;     // mean training loss of the first steps (up to 20)
    double final_loss;     // mean training loss of the last steps (up to 20)
    double test_loss, test_acc;
    double samples_per_s;  // training samples / training wall time (evaluation excluded)
    double train_seconds;
    size_t peak_rss_bytes;
    size_t n_params;
} TrainResult;

// Runs the configured training. out_dir (may be NULL) receives config.txt and loss.csv.
int train_run(const Config *cfg, const char *out_dir, TrainResult *res, FgError *err);

// Writes the result as one JSON object (the --summary-json format).
int train_write_summary(const Config *cfg, const TrainResult *res, const char *path, FgError *err);

size_t peak_rss_bytes(void);

#endif
