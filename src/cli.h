// The command line, independent of how ranks are launched: the caller (mpi/main.c) hands in a
// factory that makes this rank's Transport once the config says how many stages there are.
#ifndef FGPIPE_CLI_H
#define FGPIPE_CLI_H

#include "storage.h"
#include "transport.h"

// Makes this rank's Transport for `stages` stages, and its Storage (io->save NULL: none).
typedef int (*TransportFactory)(void *arg, int stages, Transport *out, Storage *io,
                                FgError *err);

// Returns the process exit code: 0 success, 2 bad usage or input, 1 anything else.
int fgpipe_cli(int argc, char **argv, TransportFactory make_transport, void *arg);

#endif
