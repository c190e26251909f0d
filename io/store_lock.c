#include "store_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// "pid P on HOST, started YYYY-MM-DD HH:MM:SS": who holds it, written once it is held.
static void describe_self(char *out, size_t size) {
    char host[128] = "?", when[32] = "?";
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out, size, "pid %d on %s, started %s\n", (int)getpid(), host, when);
}

// The holder the file names, without its newline ("" when empty).
static void read_holder(int fd, char *out, size_t size) {
    ssize_t n = pread(fd, out, size - 1, 0);
    out[n > 0 ? n : 0] = 0;
    out[strcspn(out, "\n")] = 0;
}

// Opens the lock file into *fd (-1: it cannot be) and flocks it: 0, or the errno of the
// failure (EWOULDBLOCK: held; *fd stays open to read the holder). Locked, it must still be the
// file at path: a holder that released removed the one it held, and another run may have made
// a new one since.
static int lock_path(const char *path, int *fd) {
    for (int tries = 0; tries < 8; tries++) {
        if ((*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) return errno;
        if (flock(*fd, LOCK_EX | LOCK_NB)) return errno;
        struct stat a, b;
        if (!fstat(*fd, &a) && !stat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) return 0;
        close(*fd);
    }
    *fd = -1;
    return EAGAIN;
}

static void lock_file_path(const char *dir, const char *name, char *out, size_t size) {
    snprintf(out, size, "%s/%s.lock", dir, name);
}

int store_lock_take(const char *dir, const char *name, int *handle, FgError *err) {
    char path[4096 + 96], holder[256], self[256];
    *handle = -1;
    mkdir(dir, 0755);  // a new weights dir (open below reports any failure)
    lock_file_path(dir, name, path, sizeof path);
    int fd, e = lock_path(path, &fd);
    if (e && fd < 0)
        return fg_fail(err, FG_ERR_INPUT, "weights dir %s: cannot make the store's lock %s: %s",
                       dir, path, strerror(e));
    if (e) {
        read_holder(fd, holder, sizeof holder);
        close(fd);
        if (e == EWOULDBLOCK)
            return fg_fail(err, FG_ERR_INPUT, "layer store %s/%s.h5 is in use by another run (%s; "
                           "lock %s): one run per store; wait for it to end, or name another "
                           "--weights-dir", dir, name, holder[0] ? holder : "its pid not yet written", path);
        // No locks on this file system (ENOLCK: some network mounts): nothing keeps a second run off.
        fprintf(stderr, "fgpipe: note: cannot lock %s (%s): nothing keeps another run off this "
                "store\n", path, strerror(e));
        return FG_OK;
    }
    read_holder(fd, holder, sizeof holder);
    if (holder[0])  // a holder releases by removing the file: this one ended without doing so
        fprintf(stderr, "fgpipe: note: took over the lock %s from %s, which ended without "
                "releasing it (killed or crashed)\n", path, holder);
    describe_self(self, sizeof self);
    size_t n = strlen(self);
    if (ftruncate(fd, 0) || pwrite(fd, self, n, 0) != (ssize_t)n) {
        e = errno;
        close(fd);
        return fg_fail(err, FG_ERR_INPUT, "writing the store's lock %s: %s", path, strerror(e));
    }
    *handle = fd;
    return FG_OK;
}

void store_lock_release(const char *dir, const char *name, int handle) {
    char path[4096 + 96];
    if (handle < 0) return;
    lock_file_path(dir, name, path, sizeof path);
    unlink(path);  // while held: a run that opened it meanwhile finds it gone (lock_path)
    close(handle);
}
