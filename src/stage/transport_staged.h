// Wraps a host-memory Transport so that it carries buffers of a device Backend (staged through
// host memory). The wrapped transport stays owned by the caller.
#ifndef FGPIPE_TRANSPORT_STAGED_H
#define FGPIPE_TRANSPORT_STAGED_H

#include "backend.h"
#include "transport.h"

Transport transport_staged(Transport inner, const Backend *be);
void transport_staged_free(Transport *t);

#endif
