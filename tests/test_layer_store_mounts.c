// Layer store tests that need root (loop mounts): disk full (a loop-mounted 32 MiB ext4) and a
// filesystem without O_DIRECT (ramfs); exits 77 (skipped) when mounting is not allowed.

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <hdf5.h>

#include "direct_io.h"
#include "layer_store.h"
#include "layer_stream_store.h"
#include "layer_store_fixtures.h"
#include "test_util.h"

// ---- with mounts (root): disk full, no O_DIRECT ----

static char g_mnt[1024], g_img[1100];

static int sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

// Too big for the disk: creation fails (blocks are reserved up front), naming file and cause,
// and leaves nothing behind. Disk filling up mid-run (a store made without reservation): the
// write-back fails with ENOSPC, the store stays at the last whole step, and once space is back
// the run continues from it.
static void test_disk_full(void **state) {
    (void)state;
    FgError err = {0};
    StoreLayer big[4];
    for (int i = 0; i < 4; i++) big[i] = (StoreLayer){.layer = 2 * i, .count = 1 << 20};
    for (int i = 0; i < 4; i++) snprintf(big[i].name, sizeof big[i].name, "fc%d", i + 1);
    StoreOptions o = opts(sizeof(long));
    LayerStore *s;
    assert_int_not_equal(layer_store_create(&s, g_mnt, "big", 4, big, &o, &err), 0);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, g_mnt));
    assert_non_null(strstr(err.msg, "No space left on device"));
    char path[1200];
    snprintf(path, sizeof path, "%s/big.h5", g_mnt);
    assert_int_not_equal(access(path, F_OK), 0);

    const size_t count[4] = {1 << 17, 1 << 17, 1 << 17, 1 << 17};  // 1.5 MiB per layer
    o.preallocate = 0;
    layer_store_close(make_store(g_mnt, "small", 4, count, &o));
    sh("dd if=/dev/zero of=%s/filler bs=1M 2>/dev/null; sync", g_mnt);  // stops at ENOSPC
    LayerStream ls = open_stream(g_mnt, "small", 2, 0, 0);
    int rc = stream_step(&ls, NULL, 4, 1, &err);
    if (!rc) rc = ls.flush(&ls, &err);
    assert_int_not_equal(rc, 0);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "small.h5"));
    assert_non_null(strstr(err.msg, "No space left on device"));
    assert_int_not_equal(ls.close(&ls, &err), 0);
    if (layer_store_open(&s, g_mnt, "small", &err)) fail_msg("%s", err.msg);
    expect_version(s, 0);
    layer_store_close(s);
    sh("rm -f %s/filler", g_mnt);
    ls = open_stream(g_mnt, "small", 2, 0, 0);
    if (stream_step(&ls, NULL, 4, 1, &err) || ls.close(&ls, &err)) fail_msg("%s", err.msg);
    if (layer_store_open(&s, g_mnt, "small", &err)) fail_msg("%s", err.msg);
    expect_version(s, 1);
    layer_store_close(s);
}

// ramfs refuses O_DIRECT (EINVAL): the store says so and works through the page cache.
static void test_no_odirect(void **state) {
    (void)state;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s-ramfs", g_mnt);
    if (mkdir(dir, 0755) || sh("mount -t ramfs ramfs %s 2>/dev/null", dir)) {
        rmdir(dir);
        skip();
    }
    const size_t count[2] = {1000, 2000};
    StoreOptions o = opts(sizeof(long));
    LayerStore *s = make_store(dir, "r", 2, count, &o);
    printf("  %s\n", layer_store_note(s));
    assert_non_null(strstr(layer_store_note(s), "O_DIRECT"));
    layer_store_close(s);
    LayerStream ls = open_stream(dir, "r", 2, 0, 0);
    assert_non_null(strstr(ls.note, "buffered"));
    FgError err = {0};
    if (stream_step(&ls, NULL, 2, 1, &err) || ls.close(&ls, &err)) fail_msg("%s", err.msg);
    if (layer_store_open(&s, dir, "r", &err)) fail_msg("%s", err.msg);
    expect_version(s, 1);
    layer_store_close(s);
    sh("umount %s", dir);
    rmdir(dir);
}

int main(void) {
    char cwd[900];
    if (!getcwd(cwd, sizeof cwd)) return 1;
    snprintf(g_mnt, sizeof g_mnt, "%s/mnt-XXXXXX", cwd);
    if (!mkdtemp(g_mnt)) return 1;
    snprintf(g_img, sizeof g_img, "%s.img", g_mnt);
    if (sh("truncate -s 32M %s && mkfs.ext4 -q -F -b 4096 %s >/dev/null 2>&1 && "
           "mount -o loop %s %s 2>/dev/null", g_img, g_img, g_img, g_mnt)) {
        fprintf(stderr, "SKIP: cannot make and loop-mount a 32 MiB ext4 here (needs root and "
                        "loop devices): disk-full and no-O_DIRECT tests not run\n");
        rmdir(g_mnt);
        unlink(g_img);
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_no_odirect),
    };
    int rc = cmocka_run_group_tests_name("layer_store_mounts", tests, NULL, NULL);
    sh("umount %s", g_mnt);
    rmdir(g_mnt);
    unlink(g_img);
    return rc;
}

