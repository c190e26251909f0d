// Byte-level BPE (Radford et al., 2019; OpenAI's encoder.py): text -> token ids, as GPT-2,
// nanoGPT and llm.c tokenize, from GPT-2's own encoder.json and vocab.bpe (launch/gpt2-vocab.sh
// fetches them), or as Llama 3 and Qwen3 tokenize, from a Hugging Face tokenizer.json
// (hf_tokenizer.h). Encoding matches the added tokens (<|endoftext|>, ...) first, splits the
// UTF-8 text between them with the pre-tokenizer pattern (PCRE2, Unicode properties), maps
// each piece's bytes to GPT-2's printable byte alphabet and merges adjacent symbols by rank
// until no merge applies. Decoding maps ids back to bytes. Every table is keyed by raw bytes,
// not by the alphabet.
#ifndef FGPIPE_BPE_H
#define FGPIPE_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

typedef struct Bpe Bpe;

// Reads encoder.json and vocab.bpe; errors name the file and what is wrong in it.
int bpe_load(const char *encoder_json, const char *vocab_bpe, Bpe **out, FgError *err);
void bpe_free(Bpe *b);
int bpe_vocab_size(const Bpe *b);  // 50257 for GPT-2: one past the largest id

// The tokens of text[0..n) (UTF-8), appended to *tokens (grown with realloc; *count updated).
// Invalid UTF-8 is an error naming its byte offset.
int bpe_encode(const Bpe *b, const char *text, size_t n, uint32_t **tokens, size_t *count,
               FgError *err);

// The bytes of `token` (NULL and 0 when it is not in the vocabulary).
const char *bpe_token_bytes(const Bpe *b, int token, size_t *len);

#endif
