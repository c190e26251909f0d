// One run per layer store: a lock file beside the store, DIR/NAME.lock, held (flock) for the
// run's life by the process that opens the store; the LayerStreams.lock of layer_stream.h.
#ifndef FGPIPE_STORE_LOCK_H
#define FGPIPE_STORE_LOCK_H

#include "common.h"

// Takes the lock (making DIR, one level, if missing); *handle for store_lock_release. Held by
// a live process: refused, naming its pid, host and start time. Left by a dead one (the file
// still names it): taken over, with a note on stderr.
int store_lock_take(const char *dir, const char *name, int *handle, FgError *err);
// Removes the lock file, then lets go: a run leaves no lock behind (a killed one leaves its).
void store_lock_release(const char *dir, const char *name, int handle);

#endif
