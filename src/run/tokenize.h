// `fgpipe tokenize` (tokenize.c): GPT-2's BPE over files, on one process.
#ifndef FGPIPE_TOKENIZE_H
#define FGPIPE_TOKENIZE_H

#include "common.h"

// argv after the command word: --in, --out, --vocab DIR, --decode. Returns FG_OK or an error
// in err (bad arguments, a missing or malformed vocabulary, text that is not UTF-8, ...).
int tokenize_command(int argc, char **argv, FgError *err);

#endif
