// `fgpipe generate`: text sampled from a GPT checkpoint, one byte at a time, on one CPU rank.
#ifndef FGPIPE_GENERATE_H
#define FGPIPE_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "storage.h"

typedef struct {
    const char *checkpoint;
    const char *prompt;   // bytes to start from ("" starts from a newline)
    int tokens;           // bytes to sample
    double temperature;   // 0: always the most likely byte
    int top_k;            // sample among the k most likely bytes (0 or 256: all)
    uint32_t seed;        // the draws are a pure function of (seed, position)
} GenerateArgs;

// Rebuilds the model from the checkpoint's stored config, loads its parameters through io, and
// writes the prompt and then each sampled byte to out. Errors name the checkpoint and cause.
int generate_text(const GenerateArgs *a, Storage *io, FILE *out, FgError *err);

#endif
