// The command line, independent of how ranks are launched: the caller (mpi/main.c) hands in a
// factory that makes this rank's Transport once the config says how many stages there are.
#ifndef FGPIPE_CLI_H
#define FGPIPE_CLI_H

#include "backend.h"
#include "config.h"
#include "storage.h"
#include "transport.h"

// Makes this rank's compute backend for a device other than the CPU (the config's `device`).
typedef int (*BackendFactory)(void *arg, DeviceKind device, const Backend **out, FgError *err);

// Makes this rank's Transport for `replicas` pipelines of `stages` stages, and its Storage
// (io->save NULL: none). A transport that carries `be`'s device buffers itself sets
// device_memory; otherwise the CLI stages its messages through host memory.
typedef int (*TransportFactory)(void *arg, int stages, int replicas, const Backend *be,
                                Transport *out, Storage *io, FgError *err);

// From now on SIGTERM and SIGUSR1 ask a training run to checkpoint and stop at its next step
// boundary instead of killing the process. main calls it first thing: a warning that arrives
// while MPI starts (Slurm's, at a job's very start) must not kill the rank.
void fgpipe_catch_stop_signals(void);

// Returns the process exit code: 0 success, 2 bad usage or input, 1 anything else.
// make_backend may be NULL: a CPU-only build.
int fgpipe_cli(int argc, char **argv, TransportFactory make_transport,
               BackendFactory make_backend, void *arg);

#endif
