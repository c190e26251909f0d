// Positioned file I/O that bypasses the page cache (O_DIRECT).
//
// Why: a store much larger than memory must not end up in the page cache (it would evict
// everything else and double the host memory used). Each request is issued whole from the
// calling thread: the kernel splits a large O_DIRECT request into many bios in flight, and
// chunks spread over 4 threads measured no faster (docs/out-of-core.md). O_DIRECT needs the
// buffer address, the file offset and the length aligned (DIO_ALIGN covers 512 B and 4 KiB
// sector devices). Filesystems that refuse O_DIRECT (tmpfs: EINVAL at open) get buffered I/O
// instead, with a note that says so.
#ifndef FGPIPE_DIRECT_IO_H
#define FGPIPE_DIRECT_IO_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

enum { DIO_ALIGN = 4096 };

static inline size_t dio_round_up(size_t n) { return (n + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN; }

typedef struct {
    int fd;
    int direct;         // 1: opened with O_DIRECT
    char path[1024];
    char note[384];     // why direct I/O is off ("" when it is on)
} DioFile;

// Opens path read-write (creating it with O_CREAT in flags), with O_DIRECT when the filesystem
// accepts it. Errors name the path and the cause.
int dio_open(DioFile *f, const char *path, int flags, FgError *err);
void dio_close(DioFile *f);

// Reads or writes len bytes at off, all of it or an error: a short read (the file ends early)
// or a failed write (ENOSPC, EIO) names the file, the offset and the cause. With O_DIRECT, buf,
// len and off must be multiples of DIO_ALIGN.
int dio_read(DioFile *f, void *buf, size_t len, uint64_t off, FgError *err);
int dio_write(DioFile *f, const void *buf, size_t len, uint64_t off, FgError *err);

// Durable on the device (fdatasync); after buffered writes also drops the file's cached pages.
int dio_sync(DioFile *f, FgError *err);

// DIO_ALIGN-aligned zeroed host memory (slots, headers); free with fg_free.
void *dio_alloc(size_t bytes);

#endif
