// Fuzz-style checks of the readers of untrusted input (issue 19): random mutations of a valid
// config and of valid gzip IDX files, for a bounded time each. Every outcome must be success
// (a config that validates; a dataset whose sizes agree) or FG_ERR_INPUT with a message;
// a crash or a hang fails the test (ctest's timeout). The mutations are seeded: a failure
// prints the iteration that reproduces it.
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "config.h"
#include "data.h"
#include "test_util.h"

enum { SECONDS_EACH = 4 };

static char tmpdir[256];

static int group_setup(void **state) {
    (void)state;
    return scratch_dir(tmpdir, sizeof tmpdir, "/tmp/fgpipe_test_fuzz");
}

static int group_teardown(void **state) {
    (void)state;
    return remove_tree(tmpdir);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// One random edit of buf[0..*n) (capacity cap): flip, overwrite, insert a run, delete a range,
// duplicate a range, or cut the tail. Bytes come from `alphabet` when given.
static void mutate(Rng *r, unsigned char *buf, size_t *n, size_t cap, const char *alphabet) {
    size_t len = *n, at = len ? (size_t)rng_int(r, 0, (int)len - 1) : 0;
    size_t span = (size_t)rng_int(r, 1, 64);
    unsigned char byte = alphabet ? (unsigned char)alphabet[rng_int(r, 0, (int)strlen(alphabet) - 1)]
                                  : (unsigned char)rng_int(r, 0, 255);
    switch (rng_int(r, 0, 5)) {
    case 0: if (len) buf[at] ^= (unsigned char)(1u << rng_int(r, 0, 7)); break;
    case 1: if (len) buf[at] = byte; break;
    case 2:
        if (len + span <= cap) {
            memmove(buf + at + span, buf + at, len - at);
            memset(buf + at, byte, span);
            *n += span;
        }
        break;
    case 3:
        if (at + span <= len) memmove(buf + at, buf + at + span, len - at - span), *n -= span;
        break;
    case 4:
        if (at + span <= len && len + span <= cap) {
            memmove(buf + at + span, buf + at, len - at);  // the range again, right after itself
            *n += span;
        }
        break;
    default: *n = at; break;
    }
}

static void test_config_mutations(void **state) {
    (void)state;
    static const char valid[] =
        "model = 784-64-10\nactivation = relu\nmode = fg+bp\nperturb = activity\n"
        "estimator = mix\nshrink = 0\nstages = 2\nmicro_batch = 32   # per micro-batch\n"
        "micro_batches = 4\nsteps = 10\noptimizer = adam\nlr = 0.0003\nseed = 1\n";
    enum { CAP = 1 << 14 };
    unsigned char *buf = malloc(CAP + 1);
    Rng r = {12345};
    long runs = 0, accepted = 0;
    for (double end = now() + SECONDS_EACH; now() < end; runs++) {
        size_t n = sizeof valid - 1;
        memcpy(buf, valid, n);
        for (int e = rng_int(&r, 1, 8); e > 0; e--) mutate(&r, buf, &n, CAP, "= #\n-+.e0123456789abcdefglmnoprstuxy|_\t\r");
        buf[n] = 0;
        Config c;
        FgError err = {0};
        config_defaults(&c);
        int rc = config_load_text(&c, (const char *)buf, "fuzz", &err);
        if (!rc) rc = config_validate(&c, &err);
        if (rc != FG_OK && (rc != FG_ERR_INPUT || !err.msg[0]))
            fail_msg("run %ld: rc %d, message '%s' for config:\n%s", runs, rc, err.msg, buf);
        accepted += rc == FG_OK;
    }
    print_message("  %ld mutated configs, %ld accepted\n", runs, accepted);
    assert_true(runs > 100);
    free(buf);
}

// A valid gzip IDX pair of n images of 4 x 4, in memory as the files' bytes.
static size_t gzip_idx(const char *path, uint32_t magic, int ndims, const uint32_t *dims,
                       const unsigned char *data, size_t nbytes, unsigned char *out, size_t cap) {
    unsigned char hdr[16] = {0, 0, (unsigned char)(magic >> 8), (unsigned char)magic};
    for (int d = 0; d < ndims; d++)
        for (int b = 0; b < 4; b++) hdr[4 + 4 * d + b] = (unsigned char)(dims[d] >> (24 - 8 * b));
    gzFile f = gzopen(path, "wb");
    assert_non_null(f);
    gzwrite(f, hdr, (unsigned)(4 + 4 * ndims));
    gzwrite(f, data, (unsigned)nbytes);
    assert_int_equal(gzclose(f), Z_OK);
    FILE *in = fopen(path, "rb");
    size_t n = fread(out, 1, cap, in);
    fclose(in);
    return n;
}

static void write_bytes(const char *path, const unsigned char *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
}

static void test_idx_mutations(void **state) {
    (void)state;
    enum { CAP = 4096, COUNT = 6 };
    char img[300], lab[300];
    snprintf(img, sizeof img, "%s/images.gz", tmpdir);
    snprintf(lab, sizeof lab, "%s/labels.gz", tmpdir);
    unsigned char px[COUNT * 16], lb[COUNT], gz_img[CAP], gz_lab[CAP], buf[CAP];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)(i * 37);
    for (int i = 0; i < COUNT; i++) lb[i] = (unsigned char)(i % 10);
    uint32_t idims[3] = {COUNT, 4, 4}, ldims[1] = {COUNT};
    size_t n_img = gzip_idx(img, 0x803, 3, idims, px, sizeof px, gz_img, CAP);
    size_t n_lab = gzip_idx(lab, 0x801, 1, ldims, lb, sizeof lb, gz_lab, CAP);
    Rng r = {777};
    long runs = 0, accepted = 0;
    for (double end = now() + SECONDS_EACH; now() < end; runs++) {
        int images = rng_int(&r, 0, 1);  // which file of the pair is mutated
        size_t n = images ? n_img : n_lab;
        memcpy(buf, images ? gz_img : gz_lab, n);
        for (int e = rng_int(&r, 1, 3); e > 0; e--) mutate(&r, buf, &n, CAP, NULL);
        write_bytes(images ? img : lab, buf, n);
        write_bytes(images ? lab : img, images ? gz_lab : gz_img, images ? n_lab : n_img);
        Dataset ds;
        FgError err = {0};
        int rc = dataset_load_idx(&ds, img, lab, &err);
        if (rc != FG_OK && (rc != FG_ERR_INPUT || !err.msg[0]))
            fail_msg("run %ld: rc %d, message '%s'", runs, rc, err.msg);
        if (rc == FG_OK) {  // only a mutation that kept the file valid: sizes as the header's
            assert_int_equal(ds.count, COUNT);
            assert_int_equal(ds.features, 16);
            dataset_free(&ds);
            accepted++;
        }
    }
    print_message("  %ld mutated IDX files, %ld accepted\n", runs, accepted);
    assert_true(runs > 100);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_config_mutations),
                                       cmocka_unit_test(test_idx_mutations)};
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
