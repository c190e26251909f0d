// device_lanes.h on a pretend device (host memory, copies done at once, fences logged): the
// buffers land where the engine is told, lanes alternate, a dirty layer comes back into its
// host slot and a clean one does not, and every copy into a lane waits for the compute
// stream's release of that lane (the order a GPU needs; the GPU's own run is gpu_out_of_core);
// a BF16 slot crosses the link as it lies, 2 bytes a value, both ways.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "device_lanes.h"

enum { LOG_MAX = 256 };
typedef struct {
    char op;        // 'm' mark, 'w' wait, 's' sync, 'c' copy to, 'b' copy back
    void *fence;
    int stream;
    const void *dst;
    size_t bytes;   // of a copy
} Event;
static Event events[LOG_MAX];  // the test's own log of the pretend device's calls
static int n_events;

static void logged(char op, void *fence, int stream, const void *dst, size_t bytes) {
    assert_true(n_events < LOG_MAX);
    events[n_events++] = (Event){op, fence, stream, dst, bytes};
}

static void *fake_alloc(const Backend *be, size_t bytes) { (void)be; return calloc(1, bytes); }
static void fake_free(const Backend *be, void *p) { (void)be; free(p); }
static void fake_copy(const Backend *be, void *dst, const void *src, size_t bytes, int to_device) {
    (void)be;
    memcpy(dst, src, bytes);
    logged(to_device ? 'c' : 'b', NULL, BACKEND_COPY_STREAM, dst, bytes);
}
static void *fake_fence_new(const Backend *be) { (void)be; return malloc(1); }
static void fake_fence_mark(const Backend *be, void *f, int s) { (void)be; logged('m', f, s, NULL, 0); }
static void fake_fence_wait(const Backend *be, void *f, int s) { (void)be; logged('w', f, s, NULL, 0); }
static int fake_fence_sync(const Backend *be, void *f, FgError *err) {
    (void)be, (void)err;
    logged('s', f, -1, NULL, 0);
    return FG_OK;
}

static const Backend fake = {.name = "fake", .on_device = 1, .alloc = fake_alloc, .free = fake_free,
                             .copy_async = fake_copy, .fence_new = fake_fence_new,
                             .fence_free = fake_free, .fence_mark = fake_fence_mark,
                             .fence_wait = fake_fence_wait, .fence_sync = fake_fence_sync};

// A host view of n_bufs buffers of count floats, buffer b filled with value + b.
static LayerView view(float *mem, int n_bufs, size_t count, float value) {
    LayerView v = {.count = count, .n_bufs = n_bufs};
    for (int b = 0; b < n_bufs; b++) {
        v.buf[b] = mem + (size_t)b * count;
        for (size_t i = 0; i < count; i++) v.buf[b][i] = value + (float)b;
    }
    return v;
}

// Loads every buffer of v into the next lane; returns buffer 0's device copy.
static float *load(DeviceLanes *d, const LayerView *v) {
    float *first = NULL;
    device_lanes_begin(d);
    for (int b = 0; b < v->n_bufs; b++) {
        float *dev = device_lanes_in(d, v, b);
        if (!b) first = dev;
        assert_memory_equal(dev, v->buf[b], v->count * sizeof(float));
    }
    device_lanes_ready(d);
    return first;
}

// The last event before index `at` that is op on fence f (on stream s, -1: any), or -1.
static int last_before(int at, char op, void *f, int s) {
    for (int i = at - 1; i >= 0; i--)
        if (events[i].op == op && events[i].fence == f && (s < 0 || events[i].stream == s)) return i;
    return -1;
}

static void test_two_lanes_alternate_and_order(void **state) {
    (void)state;
    DeviceLanes d;
    float host[3][3 * 8];
    n_events = 0;
    device_lanes_open(&d, &fake, 2, 3 * 8);
    FgError err = {0};
    LayerView a = view(host[0], 3, 8, 1.0f), b = view(host[1], 2, 8, 10.0f), c = view(host[2], 3, 5, 20.0f);
    float *da = load(&d, &a);
    assert_int_equal(device_lanes_release(&d, &a, 0, &err), FG_OK);
    float *db = load(&d, &b);
    assert_ptr_not_equal(da, db);  // the second layer in the other lane
    db[3] = -7.0f;                 // the compute stream changed it: dirty
    assert_int_equal(device_lanes_release(&d, &b, 1, &err), FG_OK);
    assert_true(b.buf[0][3] == -7.0f);
    float *dc = load(&d, &c);
    assert_ptr_equal(dc, da);      // the third back in the first
    dc[0] = -1.0f;
    assert_int_equal(device_lanes_release(&d, &c, 0, &err), FG_OK);
    assert_true(c.buf[0][0] == 20.0f);  // clean: the host slot keeps its values
    // Every copy into a lane comes after a wait of the copy stream for that lane's release
    // mark (made on the compute stream) when the lane held a layer before.
    for (int i = 0; i < n_events; i++) {
        if (events[i].op != 'c') continue;
        int lane = (float *)events[i].dst >= d.lane[1] && (float *)events[i].dst < d.lane[1] + d.floats;
        int wait = last_before(i, 'w', d.freed[lane], BACKEND_COPY_STREAM);
        int mark = last_before(i, 'm', d.freed[lane], BACKEND_COMPUTE_STREAM);
        assert_true(wait >= 0);
        if (mark >= 0) assert_true(mark < wait);
    }
    // A clean release hands the slot back once its upload is done; a dirty one once the copy
    // back (made after the compute stream's mark) is.
    assert_true(d.bytes_in == (3 * 8 + 2 * 8 + 3 * 5) * sizeof(float));
    assert_true(d.bytes_out == 2 * 8 * sizeof(float));
    device_lanes_close(&d);
}

static void test_one_lane(void **state) {
    (void)state;
    DeviceLanes d;
    float host[2][8];
    n_events = 0;
    device_lanes_open(&d, &fake, 1, 8);
    FgError err = {0};
    LayerView a = view(host[0], 1, 8, 1.0f), b = view(host[1], 1, 8, 2.0f);
    float *da = load(&d, &a);
    assert_int_equal(device_lanes_release(&d, &a, 0, &err), FG_OK);
    assert_ptr_equal(load(&d, &b), da);
    assert_int_equal(device_lanes_release(&d, &b, 0, &err), FG_OK);
    assert_int_equal(device_lanes_release(&d, &b, 0, &err), FG_OK);  // nothing held: a no-op
    device_lanes_close(&d);
}

// The copies (to the device: 'c', back: 'b') logged so far, and their bytes.
static size_t copied(char op, int *n) {
    size_t bytes = 0;
    *n = 0;
    for (int i = 0; i < n_events; i++)
        if (events[i].op == op) bytes += events[i].bytes, ++*n;
    return bytes;
}

// A BF16 slot (LayerView.bf16: buffer 0 holds count BF16 values, half the floats' bytes) crosses
// as it lies: 2 bytes a value to the lane and back, nothing of the host slot past them touched;
// an FP32 layer after it in the same lane still crosses 4 bytes a value.
static void test_bf16_view_crosses_as_two_bytes(void **state) {
    (void)state;
    enum { N = 12 };
    DeviceLanes d;
    uint16_t slot[2 * N];  // the values, then what must stay untouched
    float host[N];
    for (int i = 0; i < 2 * N; i++) slot[i] = (uint16_t)(i < N ? 0x3f80 + i : 0xdead);
    n_events = 0;
    device_lanes_open(&d, &fake, 1, N);
    FgError err = {0};
    LayerView v = {.count = N, .n_bufs = 1, .bf16 = 1, .buf = {(float *)slot}};
    device_lanes_begin(&d);
    uint16_t *dev = (uint16_t *)device_lanes_in(&d, &v, 0);
    device_lanes_ready(&d);
    int n;
    assert_int_equal(copied('c', &n), N * sizeof(uint16_t));
    assert_int_equal(n, 1);
    assert_memory_equal(dev, slot, N * sizeof(uint16_t));
    dev[3] = 0x4000;  // the compute stream wrote it (a load narrowed into the lane): dirty
    for (int i = N; i < 2 * N; i++) dev[i] = 0xbeef;  // past the values: never copied back
    assert_int_equal(device_lanes_release(&d, &v, 1, &err), FG_OK);
    assert_int_equal(copied('b', &n), N * sizeof(uint16_t));
    assert_int_equal(n, 1);
    assert_true(slot[3] == 0x4000);
    for (int i = N; i < 2 * N; i++) assert_true(slot[i] == 0xdead);
    assert_true(d.bytes_in == N * sizeof(uint16_t) && d.bytes_out == N * sizeof(uint16_t));
    LayerView f = view(host, 1, N, 5.0f);  // FP32 in the same lane
    assert_true(load(&d, &f)[N - 1] == 5.0f);
    assert_int_equal(device_lanes_release(&d, &f, 1, &err), FG_OK);
    assert_int_equal(copied('c', &n), N * (sizeof(uint16_t) + sizeof(float)));
    assert_int_equal(copied('b', &n), N * (sizeof(uint16_t) + sizeof(float)));
    assert_true(d.bytes_in == N * (sizeof(uint16_t) + sizeof(float)));
    assert_true(d.bytes_out == N * (sizeof(uint16_t) + sizeof(float)));
    device_lanes_close(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_lanes_alternate_and_order),
        cmocka_unit_test(test_one_lane),
        cmocka_unit_test(test_bf16_view_crosses_as_two_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
