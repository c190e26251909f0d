#include "out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

FILE *out_file_open(OutFile *o, const char *what, const char *path, FgError *err) {
    struct stat sb;
    *o = (OutFile){.what = what};
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp", path);
    // A device or FIFO is written in place: renaming over /dev/null would replace the device.
    o->direct = !stat(path, &sb) && !S_ISREG(sb.st_mode);
    if (o->direct && S_ISDIR(sb.st_mode)) {
        fg_fail(err, FG_ERR_INPUT, "%s %s is a directory; it names a file", what, path);
        return NULL;
    }
    o->f = fopen(o->direct ? o->path : o->tmp, "w");
    if (!o->f) fg_fail(err, FG_ERR_INPUT, "%s: cannot write %s: %s", what, o->direct ? o->path : o->tmp,
                       strerror(errno));
    return o->f;
}

// The directory's entry of the renamed file on disk too.
static int sync_dir_of(const char *path) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int out_file_commit(OutFile *o, FgError *err) {
    int bad = fflush(o->f) != 0 || ferror(o->f);
    int e = bad ? errno : 0;
    if (!bad && !o->direct && fsync(fileno(o->f))) bad = 1, e = errno;
    if (fclose(o->f) && !bad) bad = 1, e = errno;
    o->f = NULL;
    if (!bad && !o->direct && rename(o->tmp, o->path)) bad = 1, e = errno;
    if (!bad && !o->direct) sync_dir_of(o->path);
    if (!bad) return FG_OK;
    if (!o->direct) unlink(o->tmp);
    return fg_fail(err, FG_ERR_INPUT, "%s: writing %s failed: %s%s", o->what, o->path,
                   e ? strerror(e) : "I/O error", o->direct ? "" : " (the file was left as it was)");
}

void out_file_abort(OutFile *o) {
    if (o->f) fclose(o->f);
    o->f = NULL;
    if (!o->direct) unlink(o->tmp);
}

int line_file_start(LineFile *lf, const char *what, const char *path, const char *head, FgError *err) {
    OutFile o;
    *lf = (LineFile){.fd = -1, .what = what};
    snprintf(lf->path, sizeof lf->path, "%s", path);
    FILE *f = out_file_open(&o, what, path, err);
    if (!f) return FG_ERR_INPUT;
    fputs(head, f);
    int rc = out_file_commit(&o, err);
    if (rc) return rc;
    lf->fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    struct stat sb;
    if (lf->fd < 0 || fstat(lf->fd, &sb))
        return fg_fail(err, FG_ERR_INPUT, "%s: cannot append to %s: %s", what, path, strerror(errno));
    lf->size = sb.st_size;
    return FG_OK;
}

int line_file_append(LineFile *lf, const char *lines, FgError *err) {
    size_t n = strlen(lines), done = 0;
    while (done < n) {
        ssize_t w = write(lf->fd, lines + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            // No cut line left behind: back to the last whole one.
            if (ftruncate(lf->fd, lf->size) == 0) lseek(lf->fd, lf->size, SEEK_SET);
            return fg_fail(err, FG_ERR_INPUT, "%s: writing %s failed: %s (the file keeps its "
                           "whole lines)", lf->what, lf->path, strerror(e));
        }
        done += (size_t)w;
    }
    lf->size += (off_t)n;
    return FG_OK;
}

int line_file_sync(LineFile *lf, FgError *err) {
    if (lf->fd >= 0 && fdatasync(lf->fd) && errno != EINVAL)
        return fg_fail(err, FG_ERR_INPUT, "%s: writing %s failed: %s", lf->what, lf->path, strerror(errno));
    return FG_OK;
}

void line_file_close(LineFile *lf) {
    if (lf->fd >= 0) close(lf->fd);
    lf->fd = -1;
}
