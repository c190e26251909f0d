// Labelled image datasets from IDX files (the MNIST / Fashion-MNIST format), gzip or plain;
// and the shape of a text corpus's splits (text_data.h) in the same struct.
#ifndef FGPIPE_DATA_H
#define FGPIPE_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "text_data.h"

// Per-pixel statistics of the Fashion-MNIST training set on the [0, 1] scale: every image is
// standardised as x = (pixel / 255 - mean) / std. Fixed constants (rather than statistics of
// whatever file is loaded) keep train and test inputs on the same scale and make the transform
// a pure function of the pixel value; checkpoints store them (docs/checkpoints.md).
#define DATA_PIXEL_MEAN 0.2860f
#define DATA_PIXEL_STD 0.3530f

typedef struct {
    size_t count;      // number of samples (text: windows of ctx tokens)
    int features;      // pixels per sample (rows * cols); text: ctx token ids
    int classes;       // 1 + largest label; text: 256 bytes
    int tokens;        // labels per sample: 1; text: ctx (the next byte at every position)
    float *x;          // [count, features], standardised: (pixel/255 - mean) / std; or NULL
    Label *labels;   // [count * tokens]
    const TextCorpus *text;  // training text: windows drawn per step (text_train_batch), no x
} Dataset;

// Reads an images file (magic 0x00000803) and a labels file (magic 0x00000801); both may be
// gzip-compressed (zlib's gzread reads plain files too). Errors name the file and the cause:
// missing (with a hint to install Debian's dataset-fashion-mnist), wrong magic, truncated,
// count mismatch between images and labels, label out of range.
int dataset_load_idx(Dataset *ds, const char *images_path, const char *labels_path,
                     FgError *err);

// Loads "<dir>/<prefix>-images-idx3-ubyte.gz" and "<dir>/<prefix>-labels-idx1-ubyte.gz";
// prefix is "train" or "t10k".
int dataset_load_split(Dataset *ds, const char *dir, const char *prefix, FgError *err);

// The same without the pixels (x == NULL; count and features from the header): what a
// pipeline stage that never reads the inputs needs.
int dataset_load_split_labels(Dataset *ds, const char *dir, const char *prefix, FgError *err);

void dataset_free(Dataset *ds);

// A seeded permutation of 0..count-1 for one epoch: a pure function of (seed, epoch).
void dataset_shuffle(size_t *order, size_t count, uint32_t seed, uint32_t epoch);

// Copies rows order[first .. first+rows) into x [rows, features] and labels [rows, tokens]; either
// may be NULL (a pipeline's last stage needs only the labels).
void dataset_gather(const Dataset *ds, const size_t *order, size_t first, int rows, float *x,
                    Label *labels);

#endif
