// Unicode's canonical composition (NFC), as Hugging Face's NFC normalizer applies it to the text
// before Qwen3's pre-tokenizer: decompose canonically, order combining marks by class, compose
// primary composites (UAX #15). Tables from tools/gen-unicode-nfc.py (unicode_nfc_table.c).
#ifndef FGPIPE_UNICODE_NFC_H
#define FGPIPE_UNICODE_NFC_H

#include <stddef.h>
#include <stdint.h>

#define UNICODE_NFC_WIDTH 4  // the longest full canonical decomposition

extern const size_t unicode_n_ccc, unicode_n_decomp, unicode_n_compose;
extern const uint32_t unicode_ccc[][2];                        // code point, class (non-zero)
extern const uint32_t unicode_decomp[][UNICODE_NFC_WIDTH + 1]; // code point, its NFD
extern const uint32_t unicode_compose[][3];                    // first, second, composite

int unicode_is_ascii(const char *s, size_t n);
// The NFC form of the valid UTF-8 s[0..n), malloc'd (its length in *len); NULL: no memory.
char *unicode_nfc(const char *s, size_t n, size_t *len);

#endif
