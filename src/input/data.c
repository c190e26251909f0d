#include "data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "philox.h"
#include "tangent.h"


#define IDX_MAGIC_IMAGES 0x00000803u  // unsigned byte data, 3 dimensions
#define IDX_MAGIC_LABELS 0x00000801u  // unsigned byte data, 1 dimension
// Anything larger is a corrupt header, not a dataset: refuse before allocating.
#define IDX_MAX_ELEMENTS 100000000ull

#define READ_CHUNK 65536

static const char *INSTALL_HINT = " (install Debian package dataset-fashion-mnist)";

static int idx_open(gzFile *out, const char *path, FgError *err) {
    errno = 0;
    *out = gzopen(path, "rb");
    if (!*out) {
        int e = errno;
        // gzopen leaves errno at 0 when it fails for lack of memory rather than in open().
        return fg_fail(err, FG_ERR_INPUT, "cannot open %s: %s%s", path,
                       e ? strerror(e) : "zlib could not allocate its state",
                       e == ENOENT ? INSTALL_HINT : "");
    }
    return FG_OK;
}

// Reads up to n bytes into buf; *got is how many arrived. A short count means the file ended
// early -- for a plain file that is EOF, for a cut gzip stream zlib reports Z_BUF_ERROR
// ("unexpected end of file") -- and the caller words that as "truncated". Any other zlib error
// (corrupt deflate data, I/O error) fails here with zlib's own message.
static int read_bytes(gzFile f, const char *path, void *buf, size_t n, size_t *got,
                      FgError *err) {
    *got = 0;
    while (*got < n) {
        size_t want = FG_MIN(n - *got, (size_t)1 << 30);  // gzread takes an unsigned int
        int r = gzread(f, (unsigned char *)buf + *got, (unsigned)want);
        if (r < 0) {
            int zerr;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_BUF_ERROR) return FG_OK;
            if (zerr == Z_ERRNO)
                return fg_fail(err, FG_ERR_INPUT, "%s: read error: %s", path, strerror(errno));
            return fg_fail(err, FG_ERR_INPUT, "%s: corrupt gzip data: %s", path, msg);
        }
        if (r == 0) return FG_OK;
        *got += (size_t)r;
    }
    return FG_OK;
}

// After the data the header announced, the file must end, and reading on to its end is what
// makes zlib check the gzip trailer (CRC-32 and length): a reader that stops at the data's last
// byte accepts a stream with corrupted bytes or a cut trailer.
static int read_end(gzFile f, const char *path, FgError *err) {
    unsigned char extra;
    int r = gzread(f, &extra, 1), zerr = Z_OK;
    const char *msg = gzerror(f, &zerr);
    if (r > 0)
        return fg_fail(err, FG_ERR_INPUT, "%s: more bytes than its header announces (a damaged "
                       "header, or two files joined)", path);
    if (zerr == Z_BUF_ERROR)
        return fg_fail(err, FG_ERR_INPUT, "%s: truncated: the gzip stream ends before its "
                       "trailer (CRC-32 and length)", path);
    if (zerr == Z_ERRNO)
        return fg_fail(err, FG_ERR_INPUT, "%s: read error: %s", path, strerror(errno));
    if (zerr != Z_OK)
        return fg_fail(err, FG_ERR_INPUT, "%s: corrupt gzip data: %s", path, msg);
    return FG_OK;
}

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

// Reads and checks an IDX header: magic, then ndims big-endian uint32 sizes, each non-zero,
// with a product of at most IDX_MAX_ELEMENTS (returned in *total).
static int read_header(gzFile f, const char *path, uint32_t magic, int ndims, uint32_t *dims,
                       size_t *total, FgError *err) {
    // Magic first, on its own: a file of the wrong kind may be shorter than this kind's header.
    unsigned char hdr[16];
    size_t want = 4 + 4 * (size_t)ndims, got;
    int rc = read_bytes(f, path, hdr, 4, &got, err);
    if (rc) return rc;
    if (got == 4) {
        uint32_t found = be32(hdr);
        if (found != magic)
            return fg_fail(err, FG_ERR_INPUT,
                           "%s: bad magic number: expected 0x%08x, found 0x%08x "
                           "(not an IDX %s file)",
                           path, (unsigned)magic, (unsigned)found,
                           ndims == 1 ? "labels" : "images");
        size_t more;
        rc = read_bytes(f, path, hdr + 4, want - 4, &more, err);
        if (rc) return rc;
        got += more;
    }
    if (got < want)
        return fg_fail(err, FG_ERR_INPUT, "%s: truncated header: expected %zu bytes, got %zu",
                       path, want, got);
    unsigned long long prod = 1;
    for (int d = 0; d < ndims; d++) {
        dims[d] = be32(hdr + 4 + 4 * d);
        // Checking after every factor keeps prod below 1e8 * 2^32, far from overflow.
        prod *= dims[d];
        if (dims[d] == 0 || prod > IDX_MAX_ELEMENTS)
            return fg_fail(err, FG_ERR_INPUT,
                           "%s: unreasonable size in header: dimension %d is %u, %llu elements "
                           "so far (need 1 .. %llu in total)",
                           path, d, (unsigned)dims[d], prod, IDX_MAX_ELEMENTS);
    }
    *total = (size_t)prod;
    return FG_OK;
}

// Images file -> standardised floats, converted chunk by chunk so the raw bytes never need a
// second full-size buffer. On success *x_out owns count*rows*cols floats.
// x_out == NULL reads only the header (count and features).
static int load_images(const char *path, float **x_out, size_t *count, int *features,
                       FgError *err) {
    gzFile f;
    int rc = idx_open(&f, path, err);
    if (rc) return rc;
    uint32_t dims[3];
    size_t total = 0;
    rc = read_header(f, path, IDX_MAGIC_IMAGES, 3, dims, &total, err);
    if (rc || !x_out) {
        gzclose(f);
        *count = dims[0];
        *features = (int)(dims[1] * dims[2]);
        return rc;
    }

    // 256 possible pixel values: a table makes the transform exact-same for every pixel.
    float lut[256];
    for (int p = 0; p < 256; p++)
        lut[p] = ((float)p / 255.0f - DATA_PIXEL_MEAN) / DATA_PIXEL_STD;

    float *x = fg_alloc_floats(total);
    unsigned char buf[READ_CHUNK];
    size_t done = 0;
    while (done < total) {
        size_t want = FG_MIN(total - done, (size_t)READ_CHUNK), got;
        rc = read_bytes(f, path, buf, want, &got, err);
        for (size_t i = 0; i < got; i++) x[done + i] = lut[buf[i]];
        done += got;
        if (rc) break;
        if (got < want) {
            rc = fg_fail(err, FG_ERR_INPUT,
                         "%s: truncated: expected %zu bytes of image data (%u x %u x %u), got %zu",
                         path, total, (unsigned)dims[0], (unsigned)dims[1], (unsigned)dims[2],
                         done);
            break;
        }
    }
    if (!rc) rc = read_end(f, path, err);
    gzclose(f);
    if (rc) {
        fg_free(x);
        return rc;
    }
    *x_out = x;
    *count = dims[0];
    *features = (int)(dims[1] * dims[2]);  // <= IDX_MAX_ELEMENTS, fits an int
    return FG_OK;
}

static int load_labels(const char *path, Label **labels_out, size_t *count, FgError *err) {
    gzFile f;
    int rc = idx_open(&f, path, err);
    if (rc) return rc;
    uint32_t dims[1];
    size_t total = 0, got = 0;
    rc = read_header(f, path, IDX_MAGIC_LABELS, 1, dims, &total, err);
    Label *labels = NULL;
    uint8_t *bytes = NULL;  // IDX labels are one byte each
    if (!rc) {
        bytes = fg_alloc_bytes(total);
        labels = fg_alloc_bytes(total * sizeof *labels);
        rc = read_bytes(f, path, bytes, total, &got, err);
        if (!rc && got < total)
            rc = fg_fail(err, FG_ERR_INPUT,
                         "%s: truncated: expected %zu bytes of label data, got %zu", path, total,
                         got);
        if (!rc) rc = read_end(f, path, err);
        for (size_t i = 0; !rc && i < total; i++) labels[i] = bytes[i];
    }
    fg_free(bytes);
    gzclose(f);
    if (rc) {
        fg_free(labels);
        return rc;
    }
    *labels_out = labels;
    *count = total;
    return FG_OK;
}

static int load_idx(Dataset *ds, const char *images_path, const char *labels_path, int pixels,
                    FgError *err) {
    memset(ds, 0, sizeof *ds);
    float *x = NULL;
    Label *labels = NULL;
    size_t n_images = 0, n_labels;
    int features = 0;
    int rc = load_images(images_path, pixels ? &x : NULL, &n_images, &features, err);
    if (rc) return rc;
    rc = load_labels(labels_path, &labels, &n_labels, err);
    if (rc) {
        fg_free(x);
        return rc;
    }
    if (n_images != n_labels) {
        fg_free(x);
        fg_free(labels);
        return fg_fail(err, FG_ERR_INPUT,
                       "count mismatch: %s has %zu images but %s has %zu labels", images_path,
                       n_images, labels_path, n_labels);
    }
    // Labels are single bytes, so none can exceed 255; the class count follows the data.
    int max_label = 0;
    for (size_t i = 0; i < n_labels; i++) max_label = FG_MAX(max_label, (int)labels[i]);

    ds->count = n_images;
    ds->features = features;
    ds->classes = max_label + 1;
    ds->tokens = 1;
    ds->x = x;
    ds->labels = labels;
    return FG_OK;
}

int dataset_load_idx(Dataset *ds, const char *images_path, const char *labels_path,
                     FgError *err) {
    return load_idx(ds, images_path, labels_path, 1, err);
}

static int load_split(Dataset *ds, const char *dir, const char *prefix, int pixels, FgError *err) {
    char images[4096], labels[4096];
    int ni = snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    int nl = snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    if (ni < 0 || nl < 0 || (size_t)ni >= sizeof images || (size_t)nl >= sizeof labels) {
        memset(ds, 0, sizeof *ds);
        return fg_fail(err, FG_ERR_INPUT, "dataset path too long: dir %s, prefix %s", dir,
                       prefix);
    }
    return load_idx(ds, images, labels, pixels, err);
}

int dataset_load_split(Dataset *ds, const char *dir, const char *prefix, FgError *err) {
    return load_split(ds, dir, prefix, 1, err);
}

int dataset_load_split_labels(Dataset *ds, const char *dir, const char *prefix, FgError *err) {
    return load_split(ds, dir, prefix, 0, err);
}

void dataset_free(Dataset *ds) {
    if (!ds) return;
    fg_free(ds->x);
    fg_free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

// Fisher-Yates driven by Philox: swap step i draws from counter {i, epoch, i >> 32, 0} under
// key (seed, STREAM_SHUFFLE), so the permutation depends only on (seed, epoch, count), never on
// how many random numbers anything else consumed. j = r * (i+1) >> 32 maps a 32-bit word onto
// 0..i without a rejection loop (bias below count / 2^32, irrelevant for a shuffle); it needs
// count <= 2^32, far above any dataset the loader accepts.
void dataset_shuffle(size_t *order, size_t count, uint32_t seed, uint32_t epoch) {
    for (size_t i = 0; i < count; i++) order[i] = i;
    for (size_t i = count; i-- > 1;) {
        Philox4 ctr = {{(uint32_t)i, epoch, (uint32_t)((uint64_t)i >> 32), 0}};
        uint32_t r = philox4x32_10(ctr, seed, STREAM_SHUFFLE).v[0];
        size_t j = (size_t)(((uint64_t)r * (uint64_t)(i + 1)) >> 32);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

void dataset_gather(const Dataset *ds, const size_t *order, size_t first, int rows, float *x,
                    Label *labels) {
    size_t f = (size_t)ds->features;
    for (int r = 0; r < rows; r++) {
        size_t src = order[first + (size_t)r];
        if (x) memcpy(x + (size_t)r * f, ds->x + src * f, f * sizeof(float));
        if (labels) memcpy(labels + (size_t)r * ds->tokens, ds->labels + src * ds->tokens,
                           (size_t)ds->tokens * sizeof(Label));
    }
}
