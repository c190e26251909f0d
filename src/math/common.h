// Shared basics for the numerical core: error reporting and aligned buffers.
#ifndef FGPIPE_COMMON_H
#define FGPIPE_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// A class index or a token id: the MLP's 10 classes, the byte GPT's 256 bytes, GPT-2's 50257
// tokens, Llama 3's 128256, Qwen3's 151936.
typedef uint32_t Label;

// Errors are returned, never printed deep inside the core: a function that can fail takes a
// FgError*, fills it with a message that names the cause, and returns a non-zero code.
enum { FG_OK = 0, FG_ERR_INPUT = 2, FG_ERR_INTERNAL = 1 };

typedef struct {
    int code;
    char msg[1024];  // fg_fail elides the middle of longer ones
} FgError;

// Sets err (if not NULL) and returns code, so callers can `return fg_fail(err, FG_ERR_INPUT, ...)`.
int fg_fail(FgError *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// 64-byte aligned zeroed allocation (cache line / AVX-512 friendly); abort on out-of-memory,
// because every caller would only report it and stop.
float *fg_alloc_floats(size_t n);
void *fg_alloc_bytes(size_t n);
void fg_free(void *p);

// The memory the kernel says a new process can use without swapping (MemAvailable), in bytes;
// 0 when unknown.
double fg_available_memory_bytes(void);
// The bytes of this process now resident in memory (/proc/self/statm); 0 when unknown.
double fg_resident_bytes(void);

// a . b over n floats, accumulated in double in eight running sums added in a fixed order: the
// same bits every call, without one chain of dependent adds (latency-bound).
double fg_dot_f64(const float *a, const float *b, size_t n);
// The median of v[0..n) (n > 0; the upper one of two middles); sorts v.
double fg_median(double *v, size_t n);

// All of the regular file at path, with a 0 byte after its *n bytes (free with fg_free), or NULL
// with err naming `what`, the path and the cause: cannot open (plus missing_hint when it does
// not exist; may be NULL), a directory or other non-regular file, a read error.
char *fg_read_file(const char *what, const char *path, const char *missing_hint, size_t *n,
                   FgError *err);

// s as a JSON string, quoted, with quotes, backslashes and control characters escaped.
void fg_write_json_string(FILE *f, const char *s);
// v[0..n) as a JSON array of numbers in full precision (%.17g: read back, the same doubles).
void fg_write_json_doubles(FILE *f, const double *v, int n);

#define FG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define FG_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
