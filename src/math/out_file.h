// Files a run writes are whole or absent (a full disk, a crash): a file written at once goes to
// PATH.tmp and is renamed over PATH only once every byte is on disk; a file that grows by lines
// (loss.csv) never keeps a cut line.
#ifndef FGPIPE_OUT_FILE_H
#define FGPIPE_OUT_FILE_H

#include <stdio.h>
#include <sys/types.h>

#include "common.h"

typedef struct {
    FILE *f;          // write here between out_file_open and out_file_commit
    int direct;       // PATH is not a regular file (/dev/stdout, /dev/full): written in place
    char path[4096], tmp[4112];
    const char *what; // "--summary-json", "loss.csv": errors name it
} OutFile;

// Opens PATH.tmp for writing (PATH itself when it exists and is not a regular file); NULL with
// err naming what, the path and the cause.
FILE *out_file_open(OutFile *o, const char *what, const char *path, FgError *err);
// Flushes, syncs and renames the temporary over PATH; on any failure (ENOSPC) removes it,
// leaves PATH as it was and names the cause.
int out_file_commit(OutFile *o, FgError *err);
// Gives up: the temporary is removed, PATH untouched.
void out_file_abort(OutFile *o);

// A file that grows by whole lines: each write(2) is one or more whole lines, and a write that
// fails part way (a full disk) is cut back to the last whole line before the error is returned.
typedef struct {
    int fd;
    off_t size;       // bytes of whole lines on disk
    const char *what;
    char path[4096];
} LineFile;

// Starts PATH over with `head` (whole lines, may be empty), whole or not at all (out_file), then
// opens it for appending.
int line_file_start(LineFile *lf, const char *what, const char *path, const char *head, FgError *err);
int line_file_append(LineFile *lf, const char *lines, FgError *err);
// Lines up to here are on disk (fdatasync).
int line_file_sync(LineFile *lf, FgError *err);
void line_file_close(LineFile *lf);

#endif
