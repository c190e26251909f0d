// Hugging Face's tokenizer.json for a byte-level BPE, as Llama 3, Qwen3 (and GPT-2 in
// Hugging Face's layout) ship it: model.vocab and model.merges ("a b" strings or ["a", "b"]
// pairs), model.ignore_merges, the added tokens (matched before pre-tokenization), the
// pre-tokenizer (ByteLevel, or a Split by a regex then ByteLevel without its own regex), the
// normalizer (none or NFC). Anything else (WordPiece, Unigram, byte_fallback BPE, other
// pre-tokenizers or normalizers, lstrip/rstrip added tokens) is refused naming the key.
#ifndef FGPIPE_HF_TOKENIZER_H
#define FGPIPE_HF_TOKENIZER_H

#include "bpe.h"

int hf_tokenizer_load(const char *path, Bpe **out, FgError *err);

#endif
