// Tests for the IDX loader, standardisation, shuffle and gather. Small IDX files are generated
// into a fresh temp dir, so every error path is exercised on data we control.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "test_util.h"

#define REAL_DIR "/usr/share/datasets/fashion-mnist"

static char tmpdir[256];

static int group_setup(void **state) {
    (void)state;
    return scratch_dir(tmpdir, sizeof tmpdir, "/tmp/fgpipe_test_data");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_tree(tmpdir);
}

static void tmp_path(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", tmpdir, name);
}

static void put_be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

// Writes magic, ndims sizes, then `nbytes` of data (which may disagree with the sizes, to make
// truncated files). gz selects gzip or a plain file.
static void write_idx(const char *path, int gz, uint32_t magic, int ndims, const uint32_t *dims,
                      const uint8_t *data, size_t nbytes) {
    unsigned char hdr[16];
    put_be32(hdr, magic);
    for (int d = 0; d < ndims; d++) put_be32(hdr + 4 + 4 * d, dims[d]);
    size_t hlen = 4 + 4 * (size_t)ndims;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(gzwrite(f, hdr, (unsigned)hlen), (int)hlen);
        if (nbytes) assert_int_equal(gzwrite(f, data, (unsigned)nbytes), (int)nbytes);
        assert_int_equal(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(hdr, 1, hlen, f), hlen);
        if (nbytes) assert_int_equal(fwrite(data, 1, nbytes, f), nbytes);
        assert_int_equal(fclose(f), 0);
    }
}

// A small valid pair: n images of rows x cols with pixel value (i*7 + k*13) % 256, labels i % 5.
static void write_pair(const char *img, const char *lab, int gz, uint32_t n, uint32_t rows,
                       uint32_t cols) {
    size_t total = (size_t)n * rows * cols;
    uint8_t *px = malloc(total), *lb = malloc(n);
    assert_non_null(px);
    assert_non_null(lb);
    for (uint32_t i = 0; i < n; i++) {
        for (size_t k = 0; k < (size_t)rows * cols; k++)
            px[i * (size_t)rows * cols + k] = (uint8_t)((i * 7 + k * 13) % 256);
        lb[i] = (uint8_t)(i % 5);
    }
    uint32_t idims[3] = {n, rows, cols}, ldims[1] = {n};
    write_idx(img, gz, 0x00000803u, 3, idims, px, total);
    write_idx(lab, gz, 0x00000801u, 1, ldims, lb, n);
    free(px);
    free(lb);
}

static float standardise(int p) { return ((float)p / 255.0f - 0.2860f) / 0.3530f; }

static void check_loaded(const Dataset *ds, uint32_t n, uint32_t rows, uint32_t cols) {
    assert_int_equal(ds->count, n);
    assert_int_equal(ds->features, (int)(rows * cols));
    assert_int_equal(ds->classes, n >= 5 ? 5 : (int)n);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(ds->labels[i], i % 5);
        for (size_t k = 0; k < (size_t)rows * cols; k++) {
            int p = (int)((i * 7 + k * 13) % 256);
            float got = ds->x[i * (size_t)rows * cols + k];
            assert_true(fabsf(got - standardise(p)) < 1e-6f);
        }
    }
}

static void test_load_gzip(void **state) {
    (void)state;
    char img[300], lab[300];
    tmp_path(img, sizeof img, "ok-images-idx3-ubyte.gz");
    tmp_path(lab, sizeof lab, "ok-labels-idx1-ubyte.gz");
    write_pair(img, lab, 1, 12, 3, 4);
    Dataset ds;
    FgError err = {0};
    assert_int_equal(dataset_load_split(&ds, tmpdir, "ok", &err), FG_OK);
    check_loaded(&ds, 12, 3, 4);
    // Spot-check the standardisation against hand-computed values: 0 and 255.
    assert_true(fabsf(standardise(0) - (-0.2860f / 0.3530f)) < 1e-6f);
    assert_true(fabsf(standardise(255) - ((1.0f - 0.2860f) / 0.3530f)) < 1e-6f);
    assert_true(fabsf(ds.x[0] - (-0.810198f)) < 1e-5f);  // pixel 0
    dataset_free(&ds);
    assert_null(ds.x);
    assert_null(ds.labels);
}

static void test_load_plain(void **state) {
    (void)state;
    char img[300], lab[300];
    tmp_path(img, sizeof img, "plain-images");
    tmp_path(lab, sizeof lab, "plain-labels");
    write_pair(img, lab, 0, 3, 2, 2);  // 3 samples: labels 0,1,2 -> 3 classes
    Dataset ds;
    FgError err = {0};
    assert_int_equal(dataset_load_idx(&ds, img, lab, &err), FG_OK);
    check_loaded(&ds, 3, 2, 2);
    dataset_free(&ds);
}

// Loads (images, labels), expects FG_ERR_INPUT with `needle` and `path` in the message, and a
// zeroed Dataset.
static void expect_fail(const char *img, const char *lab, const char *needle, const char *path) {
    Dataset ds;
    FgError err = {0};
    int rc = dataset_load_idx(&ds, img, lab, &err);
    print_message("  error: %s\n", err.msg);
    assert_int_equal(rc, FG_ERR_INPUT);
    assert_int_equal(err.code, FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, needle));
    if (path) assert_non_null(strstr(err.msg, path));
    assert_null(ds.x);
    assert_null(ds.labels);
    assert_int_equal(ds.count, 0);
}

static void test_wrong_magic(void **state) {
    (void)state;
    char img[300], lab[300];
    tmp_path(img, sizeof img, "magic-images.gz");
    tmp_path(lab, sizeof lab, "magic-labels.gz");
    write_pair(img, lab, 1, 4, 2, 2);
    // Swap roles: a labels file where images are expected.
    expect_fail(lab, img, "magic", lab);
    Dataset ds;
    FgError err = {0};
    dataset_load_idx(&ds, lab, img, &err);
    assert_non_null(strstr(err.msg, "0x00000803"));
    assert_non_null(strstr(err.msg, "0x00000801"));
    // Right images, labels file with the images magic.
    expect_fail(img, img, "magic", img);
}

static void test_truncated(void **state) {
    (void)state;
    char img[300], lab[300], cut[300], hdr[300], zcut[300];
    tmp_path(img, sizeof img, "trunc-images.gz");
    tmp_path(lab, sizeof lab, "trunc-labels.gz");
    tmp_path(cut, sizeof cut, "trunc-short-images.gz");
    tmp_path(hdr, sizeof hdr, "trunc-header-labels");
    tmp_path(zcut, sizeof zcut, "trunc-zcut-images.gz");
    write_pair(img, lab, 1, 3, 4, 4);

    // Header promises 3 images of 16 bytes, data holds 40.
    uint8_t px[48] = {0};
    uint32_t idims[3] = {3, 4, 4};
    write_idx(cut, 1, 0x00000803u, 3, idims, px, 40);
    expect_fail(cut, lab, "truncated", cut);
    Dataset ds;
    FgError err = {0};
    dataset_load_idx(&ds, cut, lab, &err);
    assert_non_null(strstr(err.msg, "expected 48 bytes"));
    assert_non_null(strstr(err.msg, "got 40"));

    // Labels file cut inside the header (plain file).
    uint32_t ldims[1] = {3};
    write_idx(hdr, 0, 0x00000801u, 1, ldims, NULL, 0);
    FILE *f = fopen(hdr, "r+b");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), 6), 0);
    fclose(f);
    expect_fail(img, hdr, "truncated", hdr);

    // A gzip stream cut mid-way (a partial download): zlib sees an unexpected end of file.
    uint8_t big[4 * 28 * 28];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 2654435761u >> 24);
    uint32_t bdims[3] = {4, 28, 28};
    write_idx(zcut, 1, 0x00000803u, 3, bdims, big, sizeof big);
    struct stat st;
    assert_int_equal(stat(zcut, &st), 0);
    assert_int_equal(truncate(zcut, st.st_size / 2), 0);
    expect_fail(zcut, lab, "truncated", zcut);
}

// Flips one byte of a file at `offset` from its end.
static void flip_byte_from_end(const char *path, long offset) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -offset, SEEK_END), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -offset, SEEK_END), 0);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

// The gzip trailer (CRC-32, then the length) is checked: a reader that stops at the last data
// byte would accept each of these files.
static void test_gzip_trailer(void **state) {
    (void)state;
    char img[300], lab[300], crc[300], len[300], cut[300], extra[300];
    tmp_path(img, sizeof img, "trailer-images.gz");
    tmp_path(lab, sizeof lab, "trailer-labels.gz");
    tmp_path(crc, sizeof crc, "trailer-crc-labels.gz");
    tmp_path(len, sizeof len, "trailer-len-images.gz");
    tmp_path(cut, sizeof cut, "trailer-cut-labels.gz");
    tmp_path(extra, sizeof extra, "trailer-extra-images.gz");
    write_pair(img, lab, 1, 3, 4, 4);
    write_pair(len, crc, 1, 3, 4, 4);
    flip_byte_from_end(crc, 8);  // the CRC-32's first byte
    expect_fail(img, crc, "corrupt gzip data", crc);
    flip_byte_from_end(len, 1);  // the length's last byte
    expect_fail(len, lab, "corrupt gzip data", len);

    write_pair(img, cut, 1, 3, 4, 4);
    struct stat st;
    assert_int_equal(stat(cut, &st), 0);
    assert_int_equal(truncate(cut, st.st_size - 4), 0);
    expect_fail(img, cut, "trailer", cut);

    uint8_t px[3 * 16 + 5] = {0};
    uint32_t idims[3] = {3, 4, 4};
    write_idx(extra, 1, 0x00000803u, 3, idims, px, sizeof px);
    expect_fail(extra, lab, "more bytes than its header", extra);
}

static void test_missing(void **state) {
    (void)state;
    char img[300], lab[300];
    tmp_path(img, sizeof img, "missing-ok-images.gz");
    tmp_path(lab, sizeof lab, "missing-ok-labels.gz");
    write_pair(img, lab, 1, 2, 2, 2);
    char nope[300];
    tmp_path(nope, sizeof nope, "does-not-exist.gz");
    expect_fail(nope, lab, "dataset-fashion-mnist", nope);
    expect_fail(img, nope, "dataset-fashion-mnist", nope);
    expect_fail(img, nope, "No such file", nope);

    Dataset ds;
    FgError err = {0};
    assert_int_equal(dataset_load_split(&ds, tmpdir, "nosuchsplit", &err), FG_ERR_INPUT);
    assert_non_null(strstr(err.msg, "nosuchsplit-images-idx3-ubyte.gz"));
    assert_non_null(strstr(err.msg, "dataset-fashion-mnist"));
}

static void test_count_mismatch(void **state) {
    (void)state;
    char img[300], lab[300], img2[300], lab2[300];
    tmp_path(img, sizeof img, "mm5-images.gz");
    tmp_path(lab, sizeof lab, "mm5-labels.gz");
    tmp_path(img2, sizeof img2, "mm6-images.gz");
    tmp_path(lab2, sizeof lab2, "mm6-labels.gz");
    write_pair(img, lab, 1, 5, 2, 2);
    write_pair(img2, lab2, 1, 6, 2, 2);
    expect_fail(img, lab2, "mismatch", img);
    expect_fail(img2, lab, "mismatch", lab);
}

static void test_bad_dims(void **state) {
    (void)state;
    char img[300], lab[300], zero[300], huge[300];
    tmp_path(img, sizeof img, "dims-images.gz");
    tmp_path(lab, sizeof lab, "dims-labels.gz");
    tmp_path(zero, sizeof zero, "dims-zero-images.gz");
    tmp_path(huge, sizeof huge, "dims-huge-images.gz");
    write_pair(img, lab, 1, 2, 2, 2);
    uint32_t zdims[3] = {2, 0, 2}, hdims[3] = {100000, 100000, 100000};
    write_idx(zero, 1, 0x00000803u, 3, zdims, NULL, 0);
    write_idx(huge, 1, 0x00000803u, 3, hdims, NULL, 0);
    expect_fail(zero, lab, "unreasonable", zero);
    expect_fail(huge, lab, "unreasonable", huge);
}

static void test_shuffle(void **state) {
    (void)state;
    enum { N = 1000 };
    size_t a[N], b[N], c[N], d[N];
    dataset_shuffle(a, N, 42, 3);
    dataset_shuffle(b, N, 42, 3);
    dataset_shuffle(c, N, 42, 4);
    dataset_shuffle(d, N, 43, 3);

    // A permutation: every index exactly once.
    unsigned char seen[N] = {0};
    for (size_t i = 0; i < N; i++) {
        assert_true(a[i] < N);
        assert_int_equal(seen[a[i]], 0);
        seen[a[i]] = 1;
    }
    assert_memory_equal(a, b, sizeof a);  // pure function of (seed, epoch)
    assert_memory_not_equal(a, c, sizeof a);
    assert_memory_not_equal(a, d, sizeof a);
    // Actually shuffled: few fixed points (about 1 expected).
    int fixed = 0;
    for (size_t i = 0; i < N; i++) fixed += a[i] == i;
    assert_true(fixed < 10);

    // Degenerate sizes must not underflow.
    size_t one[1] = {99};
    dataset_shuffle(one, 1, 1, 1);
    assert_int_equal(one[0], 0);
    dataset_shuffle(NULL, 0, 1, 1);
}

static void test_gather(void **state) {
    (void)state;
    char img[300], lab[300];
    tmp_path(img, sizeof img, "gather-images.gz");
    tmp_path(lab, sizeof lab, "gather-labels.gz");
    write_pair(img, lab, 1, 8, 2, 3);
    Dataset ds;
    FgError err = {0};
    assert_int_equal(dataset_load_idx(&ds, img, lab, &err), FG_OK);
    size_t order[8] = {7, 2, 5, 0, 3, 1, 6, 4};
    float x[3 * 6];
    Label labels[3];
    dataset_gather(&ds, order, 2, 3, x, labels);  // rows 5, 0, 3
    size_t want[3] = {5, 0, 3};
    for (int r = 0; r < 3; r++) {
        assert_memory_equal(x + r * 6, ds.x + want[r] * 6, 6 * sizeof(float));
        assert_int_equal(labels[r], ds.labels[want[r]]);
        assert_int_equal(labels[r], want[r] % 5);
    }
    dataset_free(&ds);
}

// The real test split. The project's install script installs the Debian package, so a missing
// dataset is a broken setup and fails loudly rather than skipping.
static void test_real_t10k(void **state) {
    (void)state;
    if (access(REAL_DIR "/t10k-images-idx3-ubyte.gz", R_OK) != 0 ||
        access(REAL_DIR "/t10k-labels-idx1-ubyte.gz", R_OK) != 0)
        fail_msg("Fashion-MNIST not found in " REAL_DIR
                 ": install Debian package dataset-fashion-mnist");
    Dataset ds;
    FgError err = {0};
    int rc = dataset_load_split(&ds, REAL_DIR, "t10k", &err);
    if (rc) fail_msg("loading t10k failed: %s", err.msg);
    assert_int_equal(ds.count, 10000);
    assert_int_equal(ds.features, 784);
    assert_int_equal(ds.classes, 10);
    // The test split is balanced: 1000 per class.
    int per_class[10] = {0};
    for (size_t i = 0; i < ds.count; i++) per_class[ds.labels[i]]++;
    for (int c = 0; c < 10; c++) assert_int_equal(per_class[c], 1000);
    // Standardised with training-set statistics: near zero mean, unit std on the test split.
    double sum = 0, sq = 0;
    size_t n = ds.count * (size_t)ds.features;
    for (size_t i = 0; i < n; i++) {
        sum += ds.x[i];
        sq += (double)ds.x[i] * ds.x[i];
    }
    double mean = sum / (double)n, std = sqrt(sq / (double)n - mean * mean);
    print_message("  t10k standardised mean %.4f std %.4f\n", mean, std);
    assert_true(fabs(mean) < 0.02);
    assert_true(fabs(std - 1.0) < 0.02);
    dataset_free(&ds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_gzip),   cmocka_unit_test(test_load_plain),
        cmocka_unit_test(test_wrong_magic), cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_gzip_trailer),
        cmocka_unit_test(test_missing),     cmocka_unit_test(test_count_mismatch),
        cmocka_unit_test(test_bad_dims),    cmocka_unit_test(test_shuffle),
        cmocka_unit_test(test_gather),      cmocka_unit_test(test_real_t10k),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
