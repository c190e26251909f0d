#include "direct_io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dio_open(DioFile *f, const char *path, int flags, FgError *err) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, flags | O_RDWR | O_DIRECT | O_CLOEXEC, 0644);
    if (f->fd >= 0) {
        f->direct = 1;
        return FG_OK;
    }
    if (errno != EINVAL)
        return fg_fail(err, FG_ERR_INPUT, "cannot open %s: %s", path, strerror(errno));
    // ramfs, older tmpfs and some network filesystems refuse O_DIRECT: same data, through the page cache.
    f->fd = open(path, flags | O_RDWR | O_CLOEXEC, 0644);
    if (f->fd < 0) return fg_fail(err, FG_ERR_INPUT, "cannot open %s: %s", path, strerror(errno));
    snprintf(f->note, sizeof f->note,
             "%s: the filesystem refuses O_DIRECT (EINVAL: ramfs, tmpfs before Linux 6.6, some network filesystems): using buffered I/O, "
             "written pages are dropped from the page cache after each sync", path);
    return FG_OK;
}

void dio_close(DioFile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

void *dio_alloc(size_t bytes) {
    size_t n = dio_round_up(bytes ? bytes : 1);
    void *p = aligned_alloc(DIO_ALIGN, n);
    if (!p) {
        fprintf(stderr, "fgpipe: out of memory allocating %zu bytes\n", n);
        abort();
    }
    memset(p, 0, n);
    return p;
}

// The whole range in one request, retried until done: pread/pwrite may transfer less than asked.
static int rw(DioFile *f, int write, char *buf, size_t len, uint64_t off, FgError *err) {
    if (f->direct && (((uintptr_t)buf | len | off) % DIO_ALIGN))
        return fg_fail(err, FG_ERR_INTERNAL,
                       "%s: O_DIRECT request not aligned to %d bytes (buffer %p, %zu bytes at "
                       "offset %llu)",
                       f->path, DIO_ALIGN, (void *)buf, len, (unsigned long long)off);
    size_t done = 0;
    while (done < len) {
        ssize_t n = write ? pwrite(f->fd, buf + done, len - done, (off_t)(off + done))
                          : pread(f->fd, buf + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            return fg_fail(err, FG_ERR_INPUT, "%s %s at offset %llu (%zu bytes): %s",
                           write ? "writing" : "reading", f->path,
                           (unsigned long long)(off + done), len - done, strerror(errno));
        if (n == 0)
            return fg_fail(err, FG_ERR_INPUT,
                           "%s: short %s at offset %llu: the file ends before byte %llu "
                           "(truncated store?)",
                           f->path, write ? "write" : "read", (unsigned long long)(off + done),
                           (unsigned long long)(off + len));
        done += (size_t)n;
    }
    return FG_OK;
}

int dio_read(DioFile *f, void *buf, size_t len, uint64_t off, FgError *err) {
    return rw(f, 0, buf, len, off, err);
}

int dio_write(DioFile *f, const void *buf, size_t len, uint64_t off, FgError *err) {
    return rw(f, 1, (char *)buf, len, off, err);
}

int dio_sync(DioFile *f, FgError *err) {
    if (fdatasync(f->fd))
        return fg_fail(err, FG_ERR_INPUT, "syncing %s: %s", f->path, strerror(errno));
    // Buffered fallback: clean pages can go now, so the store does not fill the page cache.
    if (!f->direct) posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
    return FG_OK;
}
