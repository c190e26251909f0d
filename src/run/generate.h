// `fgpipe generate`: text sampled from a GPT checkpoint, one token at a time, on one CPU rank:
// bytes for a byte-level model (vocab 256), GPT-2's BPE tokens (bpe.h) for vocab 50257, or the
// tokens of a Hugging Face tokenizer.json (hf_tokenizer.h: Llama 3, Qwen3).
#ifndef FGPIPE_GENERATE_H
#define FGPIPE_GENERATE_H

#include <stdint.h>
#include <stdio.h>

#include "common.h"
#include "storage.h"

typedef struct {
    const char *checkpoint;
    const char *prompt;   // text to start from ("" starts from a newline)
    const char *vocab_dir;  // encoder.json and vocab.bpe, for a BPE model
    const char *tokenizer;  // or a Hugging Face tokenizer.json (NULL: vocab_dir)
    int tokens;           // tokens to sample
    double temperature;   // 0: always the most likely token
    int top_k;            // sample among the k most likely tokens (0: all)
    uint32_t seed;        // the draws are a pure function of (seed, position)
} GenerateArgs;

// Rebuilds the model from the checkpoint's stored config, loads its parameters through io, and
// writes the prompt and then each sampled token's bytes to out. Errors name the checkpoint and cause.
int generate_text(const GenerateArgs *a, Storage *io, FILE *out, FgError *err);

#endif
