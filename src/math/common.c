#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// A message longer than err->msg keeps its head (what failed) and its tail (why), with the
// middle (a long path or value) elided: the reason is never the part that is cut.
int fg_fail(FgError *err, int code, const char *fmt, ...) {
    if (!err) return code;
    va_list ap;
    va_start(ap, fmt);
    char *full = NULL;
    int n = vasprintf(&full, fmt, ap);
    va_end(ap);
    size_t size = sizeof err->msg;
    if (n < 0) {
        snprintf(err->msg, size, "(no memory for the message of error %d)", code);
    } else if ((size_t)n < size) {
        memcpy(err->msg, full, (size_t)n + 1);
    } else {
        static const char gap[] = " [...] ";
        size_t head = size / 4, tail = size - head - sizeof gap;
        snprintf(err->msg, size, "%.*s%s%s", (int)head, full, gap, full + n - tail);
    }
    free(full);
    err->code = code;
    return code;
}

// Buffers from this size on (a large model's weights, gradients, optimizer state, stashes)
// start on 2 MiB boundaries and ask for transparent huge pages: setting them up costs a page
// fault every 2 MiB instead of every 4 KiB (on a virtual machine each fault is dear: a GPT-2
// 124M stage's set-up spent most of its time in them), and a step walking them misses the TLB
// less. Below it, rounding up to 2 MiB would cost more than it saves.
#define HUGE_FROM ((size_t)64 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

void *fg_alloc_bytes(size_t n) {
    size_t align = n >= HUGE_FROM ? HUGE_PAGE : 64;
    size_t rounded = n ? (n + align - 1) / align * align : 64;
    void *p = aligned_alloc(align, rounded);
    if (!p) {
        fprintf(stderr, "fgpipe: out of memory allocating %zu bytes\n", n);
        abort();
    }
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE) madvise(p, rounded, MADV_HUGEPAGE);  // advice: no harm when refused
#endif
    memset(p, 0, rounded);
    return p;
}

float *fg_alloc_floats(size_t n) { return fg_alloc_bytes(n * sizeof(float)); }

void fg_free(void *p) { free(p); }

double fg_dot_f64(const float *a, const float *b, size_t n) {
    enum { LANES = 8 };
    double t[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) t[j] += (double)a[i + j] * b[i + j];
    for (; i < n; i++) t[0] += (double)a[i] * b[i];
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double fg_median(double *v, size_t n) {
    qsort(v, n, sizeof *v, compare_doubles);
    return v[n / 2];
}

double fg_available_memory_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0.0;
    char line[256];
    double kib = 0.0;
    while (fgets(line, sizeof line, f))  // lines are short and fixed-format
        if (sscanf(line, "MemAvailable: %lf kB", &kib) == 1) break;
    fclose(f);
    return kib * 1024.0;
}

double fg_resident_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0.0;
    double size = 0.0, pages = 0.0;
    int got = fscanf(f, "%lf %lf", &size, &pages);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return got == 2 && page > 0 ? pages * (double)page : 0.0;
}

void fg_write_json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

void fg_write_json_doubles(FILE *f, const double *v, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? ", " : "", v[i]);
    fputc(']', f);
}

char *fg_read_file(const char *what, const char *path, const char *missing_hint, size_t *n,
                   FgError *err) {
    struct stat sb;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        fg_fail(err, FG_ERR_INPUT, "%s %s: cannot open: %s%s", what, path, strerror(e),
                e == ENOENT && missing_hint ? missing_hint : "");
        return NULL;
    }
    // fopen succeeds on a directory on Linux; refuse it (and devices, FIFOs) by name.
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
        int dir = S_ISDIR(sb.st_mode);
        fclose(f);
        fg_fail(err, FG_ERR_INPUT, "%s %s: %s", what, path,
                dir ? "is a directory, not a regular file" : "not a regular file");
        return NULL;
    }
    *n = (size_t)sb.st_size;
    char *bytes = fg_alloc_bytes(*n + 1);  // zeroed: the byte after the file is 0
    size_t got = fread(bytes, 1, *n, f);
    int e = ferror(f) ? errno : 0;
    fclose(f);
    if (got == *n) return bytes;
    fg_fail(err, FG_ERR_INPUT, "%s %s: read error after %zu of %zu bytes: %s", what, path, got, *n,
            e ? strerror(e) : "file ended early");  // or it shrank since fstat
    fg_free(bytes);
    return NULL;
}
