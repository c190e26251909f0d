// What a weights store's bytes depend on, kept beside it: DIR/NAME.conf holds the resolved
// config of the run that made the store (model shape, LoRA's keys, frozen layers, optimizer,
// seed, mode; the store's own format fixes float32), and --resume-weights refuses a config
// that differs in any of them, by the key's name (config_store_mismatch), as --resume does.
#ifndef FGPIPE_STORE_SETTINGS_H
#define FGPIPE_STORE_SETTINGS_H

#include "common.h"
#include "config.h"

// --resume-weights: DIR/NAME.conf against c. A store without one (made by an older fgpipe)
// passes with a note; its record's seed and mode are still checked when it opens.
int store_settings_check(const Config *c, const char *dir, const char *name, FgError *err);
// A new store's record (whole or absent), once its first version is written: a run refused
// before that leaves the old store and its record as they were (a crash between the two leaves
// a store of version 0, nothing trained, with the old record).
int store_settings_write(const Config *c, const char *dir, const char *name, FgError *err);

#endif
