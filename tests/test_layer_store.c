// Layer store and layer stream (io/): round trips, crash consistency, memory, errors, row blocks.
//
// Everything that needs no privileges (runs in a few seconds); disk full and a filesystem
// without O_DIRECT are test_layer_store_mounts.c's (root, loop mounts).
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

// ---- scratch directories ----

static char g_dir[1024];  // per-test scratch dir on the real disk (O_DIRECT path)

static int setup_dir(void **state) {
    (void)state;
    if (!scratch_dir(g_dir, sizeof g_dir, "./store")) return 0;
    fprintf(stderr, "mkdtemp %s: %s\n", g_dir, strerror(errno));
    return -1;
}

static int teardown_dir(void **state) {
    (void)state;
    if (remove_tree(g_dir)) fprintf(stderr, "could not remove %s\n", g_dir);
    return 0;
}

// params, m and v bit for bit through create, write, close and open; odd sizes (the last block
// of a layer is partial), and versions 0 -> 2. The file is a real HDF5 file: the slot datasets
// hold the data and sit on 1 MiB bounds.
static void test_roundtrip(void **state) {
    (void)state;
    const size_t count[3] = {1000, 7, 70001};
    StoreOptions o = opts(sizeof(long));
    LayerStore *s = make_store(g_dir, "stage0", 3, count, &o);
    expect_version(s, 0);
    layer_store_close(s);
    FgError err = {0};
    for (long v = 1; v <= 2; v++) {
        LayerStream ls = open_stream(g_dir, "stage0", 2, 0, 0);
        assert_int_equal(ls.version, v - 1);
        if (stream_step(&ls, NULL, 3, v, &err) || ls.close(&ls, &err)) fail_msg("%s", err.msg);
    }
    if (layer_store_open(&s, g_dir, "stage0", &err)) fail_msg("%s", err.msg);
    expect_version(s, 2);
    layer_store_close(s);
    char path[1100];
    snprintf(path, sizeof path, "%s/stage0.h5", g_dir);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    int found = 0;
    for (int k = 0; k < 2; k++) {
        char name[32];
        snprintf(name, sizeof name, "slot%d/2.fc2", k);  // the layer's index, then its name
        hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
        assert_true(d >= 0);
        assert_int_equal(H5Dget_offset(d) % (1 << 20), 0);
        float buf[3][1024];
        assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
        float *views[3] = {buf[0], buf[1], buf[2]};
        found += check(views, 3, 7, 1, 2) < 0;  // version 2 is in one of the two slots
        H5Dclose(d);
    }
    H5Fclose(f);
    assert_int_equal(found, 1);
}

// Layers whose names agree in the 15 characters a store keeps (Llama's
// "layers.0.self_attn.q_proj" and "...k_proj" did) are still distinct layers.
static void test_same_names(void **state) {
    (void)state;
    const size_t count[3] = {100, 7, 300};
    StoreOptions o = opts(sizeof(long));
    LayerStore *s = make_store_named(g_dir, "stage0", 3, count, &o, "layers.0.self_a");
    expect_version(s, 0);
    layer_store_close(s);
    FgError err = {0};
    if (layer_store_open(&s, g_dir, "stage0", &err)) fail_msg("%s", err.msg);
    expect_version(s, 0);
    layer_store_close(s);
}

// Reacquiring a resident layer (bp's backward pass) and releasing clean: nothing is written,
// and a dirty release after a clean one writes exactly one new version.
static void test_stream_reacquire(void **state) {
    (void)state;
    const size_t count[4] = {5000, 5000, 5000, 5000};
    StoreOptions o = opts(0);
    layer_store_close(make_store(g_dir, "s", 4, count, &o));
    LayerStream ls = open_stream(g_dir, "s", 2, 0, 0);
    FgError err = {0};
    LayerView a, b;
    assert_int_equal(ls.acquire(&ls, 2, &a, &err), 0);
    assert_int_equal(ls.release(&ls, 2, 0, &err), 0);
    assert_int_equal(ls.acquire(&ls, 2, &b, &err), 0);
    assert_ptr_equal(a.buf[0], b.buf[0]);  // same slot, not read again
    fill(b.buf, b.n_bufs, b.count, 1, 1);
    assert_int_equal(ls.release(&ls, 2, 1, &err), 0);
    // Releasing what is not acquired, and acquiring a layer the stage does not own, are refused.
    assert_int_not_equal(ls.release(&ls, 2, 0, &err), 0);
    assert_non_null(strstr(err.msg, "not acquired"));
    assert_int_not_equal(ls.acquire(&ls, 1, &a, &err), 0);
    assert_non_null(strstr(err.msg, "not in the store"));
    assert_int_equal(ls.close(&ls, &err), 0);
    LayerStore *s;
    if (layer_store_open(&s, g_dir, "s", &err)) fail_msg("%s", err.msg);
    // A step is whole only when every layer has it: the lone version 1 of fc2 is dropped.
    assert_int_equal(layer_store_version(s), 0);
    assert_int_equal(layer_store_layer_version(s, 1), 0);
    assert_int_equal(layer_store_discarded(s), 1);
    layer_store_close(s);
}

// Steps back to back in one stream, with the read-ahead as deep as the slots allow: the read
// thread reads a layer while the write thread is still writing back the layer before, into the
// slot that layer just left, or rereads a layer whose write-back is still queued. Every read
// must see the previous version bit for bit (a read that overtook its write-back would not).
static void test_stream_overlap(void **state) {
    (void)state;
    const size_t count[3] = {300000, 7, 500000};
    StoreOptions o = opts(sizeof(long));
    layer_store_close(make_store(g_dir, "ov", 3, count, &o));
    FgError err = {0};
    // 2 and 3 slots of the largest layer, then 2 large and 2 small ones (the two smaller layers
    // cycle through the small slots, the largest through the large ones).
    for (int slots = 2; slots <= 4; slots++) {
        int n_small = slots == 4 ? 2 : 0;
        LayerStream ls = open_stream(g_dir, "ov", slots - n_small, n_small, count[0]);
        assert_int_equal(ls.n_slots, slots);
        assert_true(n_small ? ls.small_slot_bytes < ls.slot_bytes : ls.small_slot_bytes == 0);
        long v0 = ls.version;
        for (long v = v0 + 1; v <= v0 + 6; v++) {
            int rc = ls.write_aux(&ls, v, &v, &err);
            for (int i = 0; i < 3 && !rc; i++) {
                for (int k = 1; k < slots && !rc; k++) rc = ls.prefetch(&ls, 2 * ((i + k) % 3), &err);
                LayerView view;
                if (rc || (rc = ls.acquire(&ls, 2 * i, &view, &err))) break;
                if (view.version != v - 1 || check(view.buf, view.n_bufs, view.count, i, v - 1) >= 0)
                    fail_msg("%d slots, step %ld: layer %d holds version %ld, not %ld bit for bit",
                             slots, v, i, view.version, v - 1);
                fill(view.buf, view.n_bufs, view.count, i, v);
                rc = ls.release(&ls, 2 * i, 1, &err);
            }
            if (rc) fail_msg("%s", err.msg);
        }
        LayerStreamStats st;
        if (ls.flush(&ls, &err)) fail_msg("%s", err.msg);
        ls.stats(&ls, &st);
        // Busy time is the union of both threads' requests: at least each thread's own.
        assert_true(st.read_seconds > 0.0 && st.write_seconds > 0.0);
        assert_true(st.busy_seconds >= FG_MAX(st.read_seconds, st.write_seconds));
        if (ls.close(&ls, &err)) fail_msg("%s", err.msg);
    }
    LayerStore *s;
    if (layer_store_open(&s, g_dir, "ov", &err)) fail_msg("%s", err.msg);
    expect_version(s, 18);
    layer_store_close(s);
}

// SIGKILL a writer child at assorted moments of its write-backs, then reopen: every layer holds
// the same version, bit for bit that version's contents, and the next run continues from it.
static void test_crash_consistency(void **state) {
    (void)state;
    enum { N = 6 };
    size_t count[N];
    for (int i = 0; i < N; i++) count[i] = 200000 + 1111 * (size_t)i;  // ~2.4 MiB per layer
    StoreOptions o = opts(sizeof(long));
    layer_store_close(make_store(g_dir, "crash", N, count, &o));
    long prev = 0;
    int torn = 0;
    const int delays_ms[] = {0, 4, 9, 15, 23, 31, 47, 5};
    for (size_t r = 0; r < sizeof delays_ms / sizeof *delays_ms; r++) {
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        if (pid == 0) {
            LayerStream ls = open_stream(g_dir, "crash", 2, 0, 0);
            FgError err = {0};
            char go = 1;  // the clock starts when the writer starts writing
            if (write(fds[1], &go, 1) != 1) _exit(4);
            for (long v = ls.version + 1;; v++) {
                if (stream_step(&ls, NULL, N, v, &err) || ls.flush(&ls, &err)) {
                    fprintf(stderr, "writer: %s\n", err.msg);
                    _exit(3);
                }
                if (write(fds[1], &go, 1) != 1) _exit(4);  // a whole step is on disk
            }
        }
        close(fds[1]);
        char go = 0;
        assert_int_equal(read(fds[0], &go, 1), 1);
        // The last round waits for a whole step, however slow the disk, so progress is tested.
        if (r + 1 == sizeof delays_ms / sizeof *delays_ms) assert_int_equal(read(fds[0], &go, 1), 1);
        struct timespec ts = {0, delays_ms[r] * 1000000L};
        nanosleep(&ts, NULL);
        close(fds[0]);
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status));  // killed while writing, not failed on its own
        LayerStore *s;
        FgError err = {0};
        if (layer_store_open(&s, g_dir, "crash", &err)) fail_msg("round %zu: %s", r, err.msg);
        long c = layer_store_version(s);
        assert_true(c >= prev);
        expect_version(s, c);
        printf("  kill %2d ms into writing: consistent at version %ld, %d layers of version "
               "%ld dropped\n", delays_ms[r], c, layer_store_discarded(s), c + 1);
        torn += layer_store_discarded(s) > 0;
        prev = c;
        layer_store_close(s);
    }
    assert_true(prev >= 1);  // the writers did get through whole steps
    assert_true(torn >= 1);  // and some kills did land in the middle of a step
}

// Peak RSS of a streaming pass over a store 8x the slot budget, measured for a child process
// (wait4's rusage): at most its RSS before opening + the slots + a fixed 6 MiB (the I/O thread's
// stack, HDF5's state at open, the stamp buffers).
static void test_stream_rss(void **state) {
    (void)state;
    enum { N = 16 };
    size_t count[N];
    for (int i = 0; i < N; i++) count[i] = 256 * 1024;  // 1 MiB per buffer, 3 MiB per layer
    StoreOptions o = opts(sizeof(long));
    layer_store_close(make_store(g_dir, "rss", N, count, &o));
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        long pages = 0, resident = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) _exit(4);
        fclose(f);
        long base_kib = resident * (sysconf(_SC_PAGESIZE) / 1024);
        LayerStream ls = open_stream(g_dir, "rss", 2, 0, 0);
        FgError err = {0};
        if (stream_step(&ls, NULL, N, 1, &err) || ls.close(&ls, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            _exit(3);
        }
        if (write(fds[1], &base_kib, sizeof base_kib) != sizeof base_kib) _exit(5);
        _exit(0);
    }
    close(fds[1]);
    int status;
    struct rusage ru;
    assert_int_equal(wait4(pid, &status, 0, &ru), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    long base_kib = 0;
    assert_int_equal(read(fds[0], &base_kib, sizeof base_kib), sizeof base_kib);
    close(fds[0]);
    long budget_kib = 2 * 3 * 1024, store_kib = N * 3 * 1024, overhead_kib = 6 * 1024;
    printf("  store %ld MiB, slots %ld MiB: peak RSS %ld MiB = %ld MiB before + %.1f MiB\n",
           store_kib / 1024, budget_kib / 1024, ru.ru_maxrss / 1024, base_kib / 1024,
           (ru.ru_maxrss - base_kib) / 1024.0);
    assert_true(ru.ru_maxrss <= base_kib + budget_kib + overhead_kib);
}

// As root the permission bits do not stop us, so the attempt runs as nobody in a child.
static void test_unwritable_dir(void **state) {
    (void)state;
    char dir[1100];
    snprintf(dir, sizeof dir, "%s/readonly", g_dir);
    assert_int_equal(chmod(g_dir, 0755), 0);  // nobody may reach it, but not write in it
    assert_int_equal(mkdir(dir, 0555), 0);
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) || setuid(65534))) _exit(4);
        StoreLayer l = {"fc1", 0, 100, 0, 0, 0};
        StoreOptions o = opts(0);
        LayerStore *s;
        FgError err = {0};
        int rc = layer_store_create(&s, dir, "stage0", 1, &l, &o, &err);
        if (write(fds[1], err.msg, sizeof err.msg) != sizeof err.msg) _exit(5);
        _exit(rc ? 1 : 0);
    }
    close(fds[1]);
    char msg[sizeof((FgError){0}.msg)] = "";
    int status;
    waitpid(pid, &status, 0);
    assert_int_equal(read(fds[0], msg, sizeof msg), sizeof msg);
    close(fds[0]);
    printf("  %s\n", msg);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_non_null(strstr(msg, dir));
    assert_non_null(strstr(msg, "not writable: Permission denied"));
}

// Missing, truncated and corrupted stores are refused with the file and the cause.
static void test_bad_stores(void **state) {
    (void)state;
    LayerStore *s;
    FgError err = {0};
    assert_int_not_equal(layer_store_open(&s, g_dir, "nothing", &err), 0);
    assert_non_null(strstr(err.msg, "no layer store"));
    const size_t count[2] = {3000, 3000};
    StoreOptions o = opts(0);
    layer_store_close(make_store(g_dir, "bad", 2, count, &o));
    char path[1100];
    snprintf(path, sizeof path, "%s/bad.h5", g_dir);
    // A stamp overwritten with garbage: that layer has no version left. The stamps are the
    // 4 KiB records of /headers, (layer, slot) at record 2 * layer + slot.
    hid_t h5 = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(h5, "headers", H5P_DEFAULT);
    off_t headers = (off_t)H5Dget_offset(d);
    H5Dclose(d), H5Fclose(h5);
    int fd = open(path, O_WRONLY);
    char junk[64];
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(pwrite(fd, junk, sizeof junk, headers + 2 * DIO_ALIGN), sizeof junk);  // layer 1, slot 0
    close(fd);
    assert_int_not_equal(layer_store_open(&s, g_dir, "bad", &err), 0);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "no complete version"));
    // Truncated.
    assert_int_equal(truncate(path, 1 << 20), 0);
    assert_int_not_equal(layer_store_open(&s, g_dir, "bad", &err), 0);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "truncated"));
    // Not an HDF5 file.
    FILE *f = fopen(path, "w");
    fputs("not hdf5", f);
    fclose(f);
    assert_int_not_equal(layer_store_open(&s, g_dir, "bad", &err), 0);
    assert_non_null(strstr(err.msg, "not an HDF5 file"));
}

// Writes out of order are refused: a version may only be written once all layers have the one
// before (else a crash could leave no whole step behind).
// Writes `version` of store layer i (its own buffers: a frozen layer's parameters alone).
static int write_layer(LayerStore *s, int i, long version, FgError *err) {
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    float *buf[3];
    slot_views(s, i, mem, buf);
    fill(buf, layer_store_layer_bufs(s, i), layer_store_layer(s, i)->count, i, version);
    int rc = layer_store_write(s, i, version, mem, err);
    fg_free(mem);
    return rc;
}

// Whether the store file DIR/NAME.h5 has the dataset `path`; and its stamp record `rec` zeroed
// (what a write of a one-copy layer leaves on disk between clearing the stamp and the new one).
static int has_dataset(const char *name, const char *path) {
    char file[1100];
    snprintf(file, sizeof file, "%s/%s.h5", g_dir, name);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT);
    int yes = f >= 0 && H5Lexists(f, "slot0", H5P_DEFAULT) > 0 && H5Lexists(f, path, H5P_DEFAULT) > 0;
    if (f >= 0) H5Fclose(f);
    return yes;
}

static void clear_record(const char *name, int rec) {
    char file[1100];
    snprintf(file, sizeof file, "%s/%s.h5", g_dir, name);
    hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "headers", H5P_DEFAULT);
    haddr_t at = H5Dget_offset(d);
    H5Dclose(d), H5Fclose(f);
    char zero[DIO_ALIGN] = {0};
    int fd = open(file, O_WRONLY);
    assert_int_equal(pwrite(fd, zero, sizeof zero, (off_t)at + (off_t)rec * DIO_ALIGN), (ssize_t)sizeof zero);
    close(fd);
}

// A frozen layer (a LoRA base) holds one buffer in one copy and is written by loads only: steps
// write the other layers past it, a load writes it at the version being made (first, before
// the trained layers). A load that did not finish leaves it newer than the store's version, or,
// cut short while writing it, with no version: either store opens refused by name, as it has
// no older copy of the layer to go back to.
static void test_frozen_layer(void **state) {
    (void)state;
    StoreLayer layers[3] = {{"fc1", 0, 1000, 0, 0, 0}, {"base", 2, 5000, 1, 0, 0}, {"fc3", 4, 300, 0, 0, 0}};
    StoreOptions o = opts(sizeof(long));
    LayerStore *s;
    FgError err = {0};
    if (layer_store_create(&s, g_dir, "frozen", 3, layers, &o, &err)) fail_msg("%s", err.msg);
    assert_int_equal(layer_store_layer_bufs(s, 1), 1);
    assert_int_equal(layer_store_slot_bytes(s, 1), layer_store_buf_stride(s, 1));
    assert_true(has_dataset("frozen", "slot0/2.base") && !has_dataset("frozen", "slot1/2.base"));
    assert_true(has_dataset("frozen", "slot1/0.fc1") && has_dataset("frozen", "slot1/4.fc3"));
    for (long v = 0; v <= 3; v++) {  // 0: made; 1, 2: steps; 3: a load (every layer)
        if (layer_store_write_aux(s, v, &v, &err)) fail_msg("%s", err.msg);
        for (int i = 0; i < 3; i++)
            if ((v % 3 == 0 || i != 1) && write_layer(s, i, v, &err)) fail_msg("%s", err.msg);
    }
    assert_int_equal(layer_store_version(s), 3);
    assert_int_not_equal(layer_store_write(s, 1, 3, NULL, &err), FG_OK);  // not again at 3
    layer_store_close(s);
    if (layer_store_open(&s, g_dir, "frozen", &err)) fail_msg("%s", err.msg);
    assert_int_equal(layer_store_version(s), 3);
    assert_true(layer_store_layer(s, 1)->frozen);
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    for (int i = 0; i < 3; i++) {
        float *buf[3];
        slot_views(s, i, mem, buf);
        if (layer_store_read(s, i, mem, &err)) fail_msg("%s", err.msg);
        assert_int_equal(check(buf, layer_store_layer_bufs(s, i), layers[i].count, i, 3), -1);
    }
    fg_free(mem);
    long v = 4;  // a load that crashed after the frozen layer, before the trained ones
    if (layer_store_write_aux(s, v, &v, &err) || write_layer(s, 1, 4, &err)) fail_msg("%s", err.msg);
    layer_store_close(s);
    assert_int_not_equal(layer_store_open(&s, g_dir, "frozen", &err), FG_OK);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "frozen layer base holds version 4, newer than the store's consistent version 3"));
    clear_record("frozen", 2 * 1 + 0);  // ... and one cut short while writing it
    assert_int_not_equal(layer_store_open(&s, g_dir, "frozen", &err), FG_OK);
    printf("  %s\n", err.msg);
    assert_non_null(strstr(err.msg, "frozen layer base has no complete version (creation or a load was cut short"));
}

static void test_write_order(void **state) {
    (void)state;
    const size_t count[2] = {100, 100};
    StoreOptions o = opts(0);
    LayerStore *s = make_store(g_dir, "order", 2, count, &o);
    unsigned char *mem = dio_alloc(layer_store_max_slot_bytes(s));
    FgError err = {0};
    assert_int_equal(layer_store_write(s, 0, 1, mem, &err), 0);
    assert_int_not_equal(layer_store_write(s, 0, 2, mem, &err), 0);
    assert_non_null(strstr(err.msg, "before layer fc2 has version 1"));
    assert_int_not_equal(layer_store_write(s, 1, 3, mem, &err), 0);
    fg_free(mem);
    layer_store_close(s);
}

// ---- row blocks (io/layer_store_blocks.c, docs/out-of-core.md "Row blocks of the token table"):
// a layer written block by block is the next version once its last block is on flash, and a
// crash before that leaves it whole at the version before; blocks out of order, blocks that
// are not whole pages and a whole acquire of a layer in blocks are refused.

enum { BLOCK = 4096, TABLE = 2 * BLOCK + 1808, SMALL = 2000 };  // the table: 3 blocks, the last short

// The pattern of layer idx's floats [first, first + n) at a version, filled or checked (-1: equal).
static long block_pattern(float *const *buf, int n_bufs, size_t first, size_t n, int idx, long version,
                          int write) {
    for (int b = 0; b < n_bufs; b++)
        for (size_t j = 0; j < n; j++) {
            uint32_t want = pattern(idx, b, first + j, version), *u = (uint32_t *)buf[b] + j;
            if (write) *u = want;
            else if (*u != want) return (long)j;
        }
    return -1;
}

static LayerStore *blocked_store(const char *name) {
    const size_t count[2] = {TABLE, SMALL};
    StoreOptions o = opts(0);
    LayerStore *s = make_store(g_dir, name, 2, count, &o);
    FgError err = {0};
    if (layer_store_set_block(s, 0, BLOCK, &err)) fail_msg("%s", err.msg);
    return s;
}

// A step through the stream: the table's blocks, then the small layer, each checked at version 0
// and rewritten with version 1's pattern; reopened, the store holds version 1 whole.
static void test_block_step(void **state) {
    (void)state;
    LayerStore *s = blocked_store("step");
    assert_int_equal(layer_store_n_blocks(s, 0), 3);
    assert_int_equal(layer_store_block_floats(s, 0, 2), 1808);
    LayerStream ls;
    FgError err = {0};
    if (layer_stream_store_open(&ls, s, 2, 0, 0, &err)) fail_msg("%s", err.msg);
    LayerView v;
    assert_int_not_equal(ls.acquire(&ls, 0, &v, &err), 0);  // the table is only had by blocks
    assert_non_null(strstr(err.msg, "read in 3 row blocks"));
    for (int b = 0; b < 3; b++) {
        if (b + 1 < 3) assert_int_equal(ls.prefetch_block(&ls, 0, b + 1, 0, &err), 0);
        if (ls.acquire_block(&ls, 0, b, 0, &v, &err)) fail_msg("%s", err.msg);
        assert_int_equal(v.first, (size_t)b * BLOCK);
        assert_int_equal(v.version, 0);
        assert_int_equal(block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 0, 0), -1);
        block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 1, 1);
        if (ls.release_block(&ls, 0, b, 1, &err)) fail_msg("%s", err.msg);
    }
    if (ls.acquire(&ls, 2, &v, &err)) fail_msg("%s", err.msg);  // store layer 1 is model layer 2
    block_pattern(v.buf, v.n_bufs, 0, v.count, 1, 1, 1);
    if (ls.release(&ls, 2, 1, &err) || ls.close(&ls, &err)) fail_msg("%s", err.msg);
    if (layer_store_open(&s, g_dir, "step", &err)) fail_msg("%s", err.msg);
    expect_version(s, 1);  // whole-layer reads of both layers: the file's layout is the same
    layer_store_close(s);
}

// Three slot classes: each layer takes the smallest slot it fits, so a large, a small and a
// tiny layer stay resident side by side, one slot each, and going round them reads each once.
static void test_stream_classes(void **state) {
    (void)state;
    const size_t count[3] = {500000, 100000, 7};
    StoreOptions o = opts(sizeof(long));
    LayerStore *s = make_store(g_dir, "cl", 3, count, &o);
    double once = 0.0;
    for (int i = 0; i < 3; i++) once += (double)layer_store_block_bytes(s, i, 0);
    SlotClasses slots = {.n = {1, 1, 1}, .count = {0, count[1], count[2]}};
    LayerStream ls;
    FgError err = {0};
    if (layer_stream_store_open_in(&ls, s, &slots, NULL, 0, &err)) fail_msg("%s", err.msg);
    assert_int_equal(ls.n_slots, 3);
    assert_true(ls.small_slot_bytes < ls.slot_bytes);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 3; i++) {
            LayerView v;
            if (ls.acquire(&ls, 2 * i, &v, &err) || ls.release(&ls, 2 * i, 0, &err)) fail_msg("%s", err.msg);
            assert_int_equal(check(v.buf, v.n_bufs, v.count, i, 0), -1);
        }
    LayerStreamStats st;
    ls.stats(&ls, &st);
    assert_true(st.read_bytes == once);
    if (ls.close(&ls, &err)) fail_msg("%s", err.msg);
}

// A read-ahead that names a resident layer keeps it: a wave's layers come back in a cycle, and
// the least recently used slot is otherwise the very layer the wave acquires next.
static void test_stream_keeps_named(void **state) {
    (void)state;
    const size_t count[3] = {1000, 1000, 1000};
    StoreOptions o = opts(sizeof(long));
    LayerStream ls;
    FgError err = {0};
    if (layer_stream_store_open(&ls, make_store(g_dir, "kp", 3, count, &o), 2, 0, 0, &err)) fail_msg("%s", err.msg);
    LayerView v;
    for (int i = 0; i < 2; i++)  // layers 0 and 2 resident, 0 the least recently used
        if (ls.acquire(&ls, 2 * i, &v, &err) || ls.release(&ls, 2 * i, 0, &err)) fail_msg("%s", err.msg);
    if (ls.prefetch(&ls, 0, &err) || ls.prefetch(&ls, 4, &err) || ls.flush(&ls, &err)) fail_msg("%s", err.msg);
    // Both slots read ahead: a third layer finds none, and says so (a read-ahead stops there).
    if (ls.prefetch(&ls, 2, &err)) fail_msg("%s", err.msg);
    assert_true(ls.in_slot(&ls, 0, 0) && ls.in_slot(&ls, 4, 0) && !ls.in_slot(&ls, 2, 0));
    LayerStreamStats before, after;
    ls.stats(&ls, &before);
    if (ls.acquire(&ls, 0, &v, &err) || ls.release(&ls, 0, 0, &err)) fail_msg("%s", err.msg);
    if (ls.acquire(&ls, 4, &v, &err) || ls.release(&ls, 4, 0, &err)) fail_msg("%s", err.msg);
    ls.stats(&ls, &after);
    assert_true(after.read_bytes == before.read_bytes);  // 4 went where 2 was
    if (ls.close(&ls, &err)) fail_msg("%s", err.msg);
}

// A block read again while its layer's version is half written (evicted after its write-back,
// its later blocks not yet written) is the new version's, and labelled so; the blocks not yet
// written are the old version's; the last block makes the version the layer's.
static void test_block_pending(void **state) {
    (void)state;
    LayerStore *s = blocked_store("pending");
    LayerStream ls;
    FgError err = {0};
    if (layer_stream_store_open(&ls, s, 2, 0, 0, &err)) fail_msg("%s", err.msg);
    LayerView v;
    for (int b = 0; b < 2; b++) {  // blocks 0 and 1 of version 1, written back
        if (ls.acquire_block(&ls, 0, b, 0, &v, &err)) fail_msg("%s", err.msg);
        block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 1, 1);
        if (ls.release_block(&ls, 0, b, 1, &err)) fail_msg("%s", err.msg);
    }
    if (ls.acquire(&ls, 2, &v, &err) || ls.release(&ls, 2, 0, &err)) fail_msg("%s", err.msg);  // evicts block 0
    LayerStreamStats before, after;
    ls.stats(&ls, &before);
    if (ls.acquire_block(&ls, 0, 0, 0, &v, &err)) fail_msg("%s", err.msg);  // read again, from flash
    ls.stats(&ls, &after);
    assert_true(after.read_bytes - before.read_bytes == (double)layer_store_block_bytes(s, 0, 0));
    assert_int_equal(v.version, 1);
    assert_int_equal(block_pattern(v.buf, v.n_bufs, 0, BLOCK, 0, 1, 0), -1);
    if (ls.release_block(&ls, 0, 0, 0, &err)) fail_msg("%s", err.msg);
    if (ls.acquire_block(&ls, 0, 2, 0, &v, &err)) fail_msg("%s", err.msg);
    assert_int_equal(v.version, 0);
    assert_int_equal(block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 0, 0), -1);
    block_pattern(v.buf, v.n_bufs, v.first, v.count, 0, 1, 1);
    if (ls.release_block(&ls, 0, 2, 1, &err)) fail_msg("%s", err.msg);
    if (ls.acquire(&ls, 2, &v, &err)) fail_msg("%s", err.msg);  // the small layer to version 1
    block_pattern(v.buf, v.n_bufs, 0, v.count, 1, 1, 1);
    if (ls.release(&ls, 2, 1, &err) || ls.close(&ls, &err)) fail_msg("%s", err.msg);
    if (layer_store_open(&s, g_dir, "pending", &err)) fail_msg("%s", err.msg);
    expect_version(s, 1);
    layer_store_close(s);
}

// Two of the table's three blocks of version 1 written, then a crash (the store closed without
// the last block): the written blocks read back as version 1 before, and reopened the table
// and the store are whole at version 0. Blocks out of order are refused.
static void test_block_crash(void **state) {
    (void)state;
    LayerStore *s = blocked_store("crash");
    unsigned char *mem = dio_alloc(layer_store_max_block_slot_bytes(s));
    float *buf[3];
    for (int b = 0; b < 3; b++) buf[b] = (float *)(mem + (size_t)b * layer_store_block_stride(s, 0));
    FgError err = {0};
    assert_int_not_equal(layer_store_write_block(s, 0, 1, 1, mem, &err), 0);
    assert_non_null(strstr(err.msg, "out of order"));
    for (int b = 0; b < 2; b++) {
        block_pattern(buf, 3, (size_t)b * BLOCK, BLOCK, 0, 1, 1);
        if (layer_store_write_block(s, 0, b, 1, mem, &err)) fail_msg("%s", err.msg);
    }
    assert_int_equal(layer_store_layer_version(s, 0), 0);  // not before its last block
    if (layer_store_read_block(s, 0, 0, mem, &err)) fail_msg("%s", err.msg);
    assert_int_equal(block_pattern(buf, 3, 0, BLOCK, 0, 1, 0), -1);
    if (layer_store_read_block(s, 0, 2, mem, &err)) fail_msg("%s", err.msg);
    assert_int_equal(block_pattern(buf, 3, 2 * BLOCK, 1808, 0, 0, 0), -1);
    assert_int_not_equal(layer_store_write_block(s, 0, 0, 2, mem, &err), 0);  // version 2 before 1 is whole
    layer_store_close(s);  // the crash
    if (layer_store_open(&s, g_dir, "crash", &err)) fail_msg("%s", err.msg);
    expect_version(s, 0);
    assert_int_not_equal(layer_store_set_block(s, 0, 1000, &err), 0);  // not whole 4 KiB pages
    assert_non_null(strstr(err.msg, "are not whole 4096-byte pages"));
    fg_free(mem);
    layer_store_close(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_same_names, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stream_reacquire, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stream_overlap, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stream_classes, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stream_keeps_named, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_write_order, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_frozen_layer, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_bad_stores, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_unwritable_dir, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_crash_consistency, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_stream_rss, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_block_step, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_block_pending, setup_dir, teardown_dir),
        cmocka_unit_test_setup_teardown(test_block_crash, setup_dir, teardown_dir),
    };
    return cmocka_run_group_tests_name("layer_store", tests, NULL, NULL);
}
