#include "direct_io.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
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

// One contiguous piece, retried until done: pread/pwrite may transfer less than asked.
static int rw_piece(DioFile *f, int write, char *buf, size_t len, uint64_t off, FgError *err) {
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

struct DioPool {
    int threads;
    size_t chunk;
    pthread_t *th;
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    // The request being served: chunks are handed out in order under mu.
    long gen;
    int stop, write, running;
    DioFile *f;
    char *buf;
    size_t len, next;
    uint64_t off;
    FgError err;
};

// Takes chunks of the current request until none are left; returns when the request is done.
static void serve(DioPool *p) {
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (p->next >= p->len || p->err.code) {
            pthread_mutex_unlock(&p->mu);
            return;
        }
        size_t at = p->next, n = FG_MIN(p->chunk, p->len - at);
        p->next += n;
        pthread_mutex_unlock(&p->mu);
        FgError e = {0};
        if (rw_piece(p->f, p->write, p->buf + at, n, p->off + at, &e)) {
            pthread_mutex_lock(&p->mu);
            if (!p->err.code) p->err = e;  // the first failure is the one reported
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker(void *arg) {
    DioPool *p = arg;
    long seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->gen == seen) pthread_cond_wait(&p->job_cv, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        p->running++;
        pthread_mutex_unlock(&p->mu);
        serve(p);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0) pthread_cond_broadcast(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

DioPool *dio_pool_new(int threads, size_t chunk_bytes) {
    DioPool *p = calloc(1, sizeof *p);
    p->threads = threads < 1 ? 1 : threads;
    p->chunk = dio_round_up(chunk_bytes ? chunk_bytes : (1u << 20));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->job_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    if (p->threads > 1) {
        p->th = calloc((size_t)p->threads - 1, sizeof *p->th);
        for (int i = 0; i < p->threads - 1; i++) pthread_create(&p->th[i], NULL, worker, p);
    }
    return p;
}

void dio_pool_free(DioPool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->job_cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->threads - 1; i++) pthread_join(p->th[i], NULL);
    free(p->th);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->job_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

static int rw(DioPool *p, DioFile *f, int write, void *buf, size_t len, uint64_t off,
              FgError *err) {
    if (f->direct && (((uintptr_t)buf | len | off) % DIO_ALIGN))
        return fg_fail(err, FG_ERR_INTERNAL,
                       "%s: O_DIRECT request not aligned to %d bytes (buffer %p, %zu bytes at "
                       "offset %llu)",
                       f->path, DIO_ALIGN, buf, len, (unsigned long long)off);
    if (p->threads == 1 || len <= p->chunk) return rw_piece(f, write, buf, len, off, err);
    pthread_mutex_lock(&p->mu);
    p->f = f, p->write = write, p->buf = buf, p->len = len, p->off = off, p->next = 0;
    memset(&p->err, 0, sizeof p->err);
    p->gen++;
    pthread_cond_broadcast(&p->job_cv);
    pthread_mutex_unlock(&p->mu);
    serve(p);
    pthread_mutex_lock(&p->mu);
    while (p->running > 0) pthread_cond_wait(&p->done_cv, &p->mu);
    // Workers that woke late find no chunks left; none can still hold this request.
    p->len = 0;
    FgError e = p->err;
    pthread_mutex_unlock(&p->mu);
    if (e.code) return fg_fail(err, e.code, "%s", e.msg);
    return FG_OK;
}

int dio_read(DioPool *p, DioFile *f, void *buf, size_t len, uint64_t off, FgError *err) {
    return rw(p, f, 0, buf, len, off, err);
}

int dio_write(DioPool *p, DioFile *f, const void *buf, size_t len, uint64_t off, FgError *err) {
    return rw(p, f, 1, (void *)buf, len, off, err);
}

int dio_sync(DioFile *f, FgError *err) {
    if (fdatasync(f->fd))
        return fg_fail(err, FG_ERR_INPUT, "syncing %s: %s", f->path, strerror(errno));
    // Buffered fallback: clean pages can go now, so the store does not fill the page cache.
    if (!f->direct) posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
    return FG_OK;
}
