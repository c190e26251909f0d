// LayerStreams.open_spill (src/stage/layer_stream.h): a scratch file of regions on local flash,
// through O_DIRECT where the filesystem takes it.
#ifndef FGPIPE_LAYER_SPILL_H
#define FGPIPE_LAYER_SPILL_H

#include "layer_stream.h"

int layer_spill_open(const char *dir, const char *name, int n_regions, const size_t *floats,
                     LayerSpill *out, FgError *err);

#endif
