// The device code paths of a streamed stage run end to end on the CPU: a "staged" device is
// backend_cpu_create's backend with on_device = 1 and its memory kept apart (alloc, upload,
// download, the copy stream, fences and page-locked slots done with host memory and memcpy),
// so train_run takes every branch it takes on a GPU (device lanes, page-locked slots, the
// widened buffer and BF16 copy in backend memory, tied gradients kept in memory, host staging
// of a checkpoint's layers) while computing with the CPU's own functions. A tiny Llama trained
// a few steps must give the same losses and final weights bit for bit streamed on the staged
// device, streamed on the CPU, in memory on the CPU and in memory on the staged device, in fp32
// and in bf16 (skipped, saying why, on a CPU without avx512_bf16), and for LoRA over a base
// kept in BF16 (a pretend checkpoint, below). The staged device also checks that the ops that
// read weights (layers, head, optimizer, BF16 conversions) are handed its memory, never a host
// slot: a GPU can read a page-locked slot through unified addressing, slowly and silently.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bf16.h"
#include "config.h"
#include "layer_spill.h"
#include "stage_store.h"
#include "store_lock.h"
#include "train.h"

// ---------------------------------------------------------------------------------------------
// The staged device. Its state is the test's (the Backend's ctx is the CPU backend's).
enum { MAX_BLOCKS = 4096 };
static struct {
    Backend cpu;                 // what backend_cpu_create made: the ops the staged one calls
    const void *at[MAX_BLOCKS];  // the device's allocations, [at, at + bytes)
    size_t bytes[MAX_BLOCKS];
    int n;
    long bad;                    // ops handed memory that is not the device's
    char first_bad[200];
} dev;

static void on_device(const void *p, const char *what) {
    if (!p) return;
    for (int i = 0; i < dev.n; i++)
        if ((const char *)p >= (const char *)dev.at[i] && (const char *)p <= (const char *)dev.at[i] + dev.bytes[i])
            return;
    if (!dev.bad++) snprintf(dev.first_bad, sizeof dev.first_bad, "%s", what);
}

static void *staged_alloc(const Backend *be, size_t bytes) {
    (void)be;
    assert_true(dev.n < MAX_BLOCKS);
    void *p = fg_alloc_bytes(bytes);
    dev.at[dev.n] = p, dev.bytes[dev.n++] = bytes;
    return p;
}

static void staged_free(const Backend *be, void *p) {
    (void)be;
    if (!p) return;
    for (int i = 0; i < dev.n; i++)
        if (dev.at[i] == p) {
            dev.at[i] = dev.at[--dev.n], dev.bytes[i] = dev.bytes[dev.n];
            fg_free(p);
            return;
        }
    fail_msg("staged device: free of %p, which it did not allocate", p);
}

static void staged_upload(const Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    on_device(dst, "upload's destination"), memcpy(dst, src, bytes);
}

static void staged_download(const Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    on_device(src, "download's source"), memcpy(dst, src, bytes);
}

static void staged_copy(const Backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    on_device(dst, "copy's destination"), on_device(src, "copy's source");
    if (dst != src) memcpy(dst, src, bytes);
}

static void staged_zero(const Backend *be, void *dst, size_t bytes) {
    (void)be;
    on_device(dst, "zero"), memset(dst, 0, bytes);
}

// Page-locked host memory: 4 KiB-aligned (the stores' direct I/O), not the device's.
static void *staged_host_alloc(const Backend *be, size_t bytes) {
    (void)be;
    size_t n = (bytes + 4095) / 4096 * 4096;
    void *p = aligned_alloc(4096, n ? n : 4096);
    assert_non_null(p);
    return memset(p, 0, n);
}

static void staged_host_free(const Backend *be, void *p) { (void)be; free(p); }

static void staged_copy_async(const Backend *be, void *dst, const void *src, size_t bytes, int to_device) {
    (void)be;
    on_device(to_device ? dst : src, to_device ? "a lane's upload" : "a lane's download");
    memcpy(dst, src, bytes);
}

// The copies are done at once: the fences order nothing, their calls are the engine's.
static void *staged_fence_new(const Backend *be) { (void)be; return malloc(1); }
static void staged_fence_free(const Backend *be, void *f) { (void)be; free(f); }
static void staged_fence_mark(const Backend *be, void *f, int s) { (void)be, (void)f, (void)s; }
static void staged_fence_wait(const Backend *be, void *f, int s) { (void)be, (void)f, (void)s; }
static int staged_fence_sync(const Backend *be, void *f, FgError *err) {
    (void)be, (void)f, (void)err;
    return FG_OK;
}

// The ops that read weights, checked, then the CPU's.
static void staged_narrow16(const Backend *be, const float *x, uint16_t *y, size_t n, int how) {
    on_device(x, "narrow16's floats"), on_device(y, "narrow16's BF16 values");
    dev.cpu.narrow16(be, x, y, n, how);
}

static void staged_widen16(const Backend *be, const uint16_t *h, float *x, size_t n) {
    on_device(h, "widen16's BF16 values"), on_device(x, "widen16's floats");
    dev.cpu.widen16(be, h, x, n);
}

static void weights_on_device(const Layer *L, const float *p, const char *op) {
    char what[160];
    snprintf(what, sizeof what, "%s of layer %s: its parameters", op, L->name);
    on_device(p, what);
    snprintf(what, sizeof what, "%s of layer %s: its BF16 copy", op, L->name);
    on_device(L->params16, what);
}

static void staged_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y, int B) {
    weights_on_device(L, p, "forward");
    dev.cpu.forward(be, L, p, x, y, B);
}

static void staged_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot, const float *x,
                       const float *xdot, float *y, float *ydot, int B, int K) {
    weights_on_device(L, p, "jvp");
    dev.cpu.jvp(be, L, p, pdot, x, xdot, y, ydot, B, K);
}

static void staged_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                            const float *dy, float *dx, float *dp, int B) {
    weights_on_device(L, p, "backward");
    dev.cpu.backward(be, L, p, x, dy, dx, dp, B);
}

static float staged_head_forward(const Backend *be, const Layer *L, const float *W, const float *x,
                                 const Label *labels, int B, float weight, float *rec, int *correct) {
    weights_on_device(L, W, "head_forward");
    return dev.cpu.head_forward(be, L, W, x, labels, B, weight, rec, correct);
}

static float staged_head_jvp(const Backend *be, const Layer *L, const float *W, const float *x,
                             const float *xdot, const Label *labels, int B, int K, float weight,
                             const HeadTangents *t, float *rec, float *d) {
    weights_on_device(L, W, "head_jvp");
    return dev.cpu.head_jvp(be, L, W, x, xdot, labels, B, K, weight, t, rec, d);
}

static void staged_optimizer_step(const Backend *be, const OptimizerConfig *c, long step, double lr,
                                  float *params, const float *from, const float *g, float g_scale,
                                  float *state, size_t state_stride, size_t n) {
    on_device(params, "optimizer_step's parameters"), on_device(from, "optimizer_step's from");
    on_device(g, "optimizer_step's gradient"), on_device(state, "optimizer_step's state");
    dev.cpu.optimizer_step(be, c, step, lr, params, from, g, g_scale, state, state_stride, n);
}

// backend_cpu_create's backend as a device (*cpu: the CPU backend itself, to destroy).
static int staged_create(int precision, Backend *cpu, Backend *out) {
    FgError err = {0};
    if (backend_cpu_create(precision, cpu, &err)) fail_msg("backend_cpu_create: %s", err.msg);
    dev.cpu = *cpu, dev.n = 0, dev.bad = 0, dev.first_bad[0] = 0;
    *out = *cpu;
    out->name = "staged", out->on_device = 1;
    out->alloc = staged_alloc, out->free = staged_free, out->upload = staged_upload;
    out->download = staged_download, out->copy = staged_copy, out->zero = staged_zero;
    out->host_alloc = staged_host_alloc, out->host_free = staged_host_free;
    out->copy_async = staged_copy_async, out->fence_new = staged_fence_new;
    out->fence_free = staged_fence_free, out->fence_mark = staged_fence_mark;
    out->fence_wait = staged_fence_wait, out->fence_sync = staged_fence_sync;
    out->narrow16 = staged_narrow16, out->widen16 = staged_widen16;
    out->forward = staged_forward, out->jvp = staged_jvp, out->backward = staged_backward;
    out->head_forward = staged_head_forward, out->head_jvp = staged_head_jvp;
    out->optimizer_step = staged_optimizer_step;
    return FG_OK;
}

// ---------------------------------------------------------------------------------------------
// A pretend checkpoint for --init-from: a base model whose frozen layers it holds in BF16
// (Storage.mark_bf16), their values a function of where they lie (the same in every run,
// whatever the run held before), the adapters absent (left at their initial values).
static int pretend_config(Storage *io, const char *path, char **text, FgError *err) {
    (void)path, (void)err;
    size_t n;
    FILE *f = open_memstream(text, &n);
    config_write(io->ctx, f);  // the run's own: the same model
    fclose(f);
    return FG_OK;
}

static int pretend_mark_bf16(Storage *io, const char *path, Model *m, FgError *err) {
    (void)io, (void)path, (void)err;
    for (int l = 0; l < m->n_layers; l++) m->layers[l].stored_bf16 = m->layers[l].frozen && m->layers[l].param_count;
    return FG_OK;
}

static int base_in_bf16(void *arg, const Layer *L, size_t first, size_t count, float *const *bufs, FgError *err) {
    (void)err;
    const Model *m = arg;
    // The tied copies of the token table hold the same values (a store may keep them once).
    size_t at = L == &m->layers[m->tied_last] ? m->layers[m->tied_first].param_offset : L->param_offset;
    for (size_t i = 0; L->frozen && i < count; i++) {
        uint32_t h = (uint32_t)(at + first + i) * 2654435761u;
        float v = ((float)(h >> 16) / 65536.0f - 0.5f) * 0.2f;
        bufs[0][i] = bf16_to_f32(bf16_round_keep(v));
    }
    return FG_OK;
}

static int pretend_load(Storage *io, CheckpointState *st, const char *path, FgError *err) {
    (void)io, (void)path;
    return st->visit_layers(st->source, 1, base_in_bf16, (void *)st->model, err);
}

// ---------------------------------------------------------------------------------------------
// The runs.
static char tmp[64];  // the test's directory

// A corpus of words: enough windows for a few steps.
static void write_corpus(const char *path) {
    static const char *words[] = {"the ", "light ", "and ", "of ", "darkness ", "was ", "upon ",
                                  "face ", "deep ", "spirit ", "waters.\n", "said, "};
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    uint32_t s = 7;
    for (int i = 0; i < 6000; i++) s = s * 1103515245u + 12345u, fputs(words[(s >> 16) % 12], f);
    fclose(f);
}

typedef struct {
    const char *name;
    const char *sets;   // key=value;...
    int lora;           // LoRA over the pretend checkpoint's BF16 base
} Case;

typedef struct {
    char *loss;         // loss.csv's step, loss and lr columns
    char *params;       // --save-params
    size_t params_bytes;
    int streamed;
} Outcome;

static void set_all(Config *c, const char *list) {
    char copy[512];
    snprintf(copy, sizeof copy, "%s", list);
    FgError err = {0};
    for (char *save = NULL, *kv = strtok_r(copy, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(kv, '=');
        *eq = 0;
        if (config_set(c, kv, eq + 1, &err)) fail_msg("%s=%s: %s", kv, eq + 1, err.msg);
    }
}

static const char *LLAMA = "model=llama;n_layer=2;n_embd=32;n_head=4;n_kv_head=2;head_dim=12;"
                           "intermediate_size=64;ctx=16;vocab=256;qk_norm=1;tie_embeddings=1;"
                           "micro_batch=2;micro_batches=2;steps=3;optimizer=adam;lr=0.003;"
                           "warmup_steps=0;eval_every=0;print_every=1000000;seed=1;mem_runtime=0";

static char *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&buf, &n);
    int ch;
    while ((ch = fgetc(f)) != EOF) fputc(ch, m);
    fclose(f), fclose(m);
    if (size) *size = n;
    return buf;
}

// loss.csv's first three columns (the rest are times).
static char *losses(const char *path) {
    char *text = read_all(path, NULL), *out = NULL, *save = NULL;
    size_t n;
    FILE *m = open_memstream(&out, &n);
    for (char *line = text ? strtok_r(text, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        char *c = line;
        for (int k = 0; k < 3 && (c = strchr(c, ',')); k++) c++;
        fprintf(m, "%.*s\n", c ? (int)(c - line) : (int)strlen(line), line);
    }
    fclose(m);
    free(text);
    return out;
}

// Whether dir holds a stage's layer store (the run streamed).
static int has_store(const char *dir) {
    char path[256];
    for (int last = 1; last < 64; last++) {
        snprintf(path, sizeof path, "%s/stage-0-%d.h5", dir, last);
        if (access(path, F_OK) == 0) return 1;
    }
    return 0;
}

// The case's config in precision (streamed: through weights_dir, at budget; 0: in memory).
static void case_config(Config *c, const Case *k, const char *precision, int gpu, const char *wdir, double budget) {
    char sets[512];
    config_defaults(c);
    set_all(c, LLAMA);
    snprintf(sets, sizeof sets, "data=text;text_file=%s/corpus.txt;precision=%s;device=%s", tmp,
             precision, gpu ? "cuda" : "cpu");  // cuda: what the engine plans for a GPU (no row blocks)
    set_all(c, sets);
    set_all(c, k->sets);
    if (k->lora) set_all(c, "lora_rank=2;lora_alpha=4;lora_targets=q,k,v,o,gate,up,down");
    if (!wdir) return;
    snprintf(sets, sizeof sets, "stream=1;weights_dir=%s;mem_budget=%.0f", wdir, budget);
    set_all(c, sets);
}

// One run of the case on be; streamed (scale > 0) at scale times its floor (found as the
// refusal of a 1-byte budget names it), else in memory.
static Outcome run(const Case *k, const char *precision, const Backend *be, double scale, const char *tag) {
    char wdir[128], out_dir[128], params[160];
    snprintf(wdir, sizeof wdir, "%s/%s-%s-%s.w", tmp, k->name, precision, tag);
    snprintf(out_dir, sizeof out_dir, "%s/%s-%s-%s", tmp, k->name, precision, tag);
    snprintf(params, sizeof params, "%s.bin", out_dir);
    assert_int_equal(mkdir(wdir, 0755), 0);
    Config c;
    Storage pretend = {.ctx = &c, .load = pretend_load, .load_config = pretend_config,
                       .mark_bf16 = pretend_mark_bf16};
    Transport local = transport_local();
    LayerStreams streams = {.open = stage_store_open, .open_spill = layer_spill_open,
                            .lock = store_lock_take, .unlock = store_lock_release};
    TrainEnv env = {be, &local, k->lora ? &pretend : NULL, &streams};
    TrainInputs in = {.init_from = k->lora ? "pretend.h5" : NULL};
    TrainOutputs out = {.out_dir = out_dir, .params_path = params};
    TrainResult r;
    FgError err = {0};
    double budget = 0;
    if (scale > 0) {  // the floor
        case_config(&c, k, precision, be->on_device, wdir, 1);
        assert_int_not_equal(train_run(&c, &env, &in, NULL, &r, &err), FG_OK);
        const char *at = strstr(err.msg, "at least ");
        if (!at) fail_msg("%s %s: no floor in '%s'", k->name, tag, err.msg);
        budget = scale * strtod(at + 9, NULL);
    }
    case_config(&c, k, precision, be->on_device, scale > 0 ? wdir : NULL, budget);
    dev.bad = 0;
    if (train_run(&c, &env, &in, &out, &r, &err)) fail_msg("%s %s %s: %s", k->name, precision, tag, err.msg);
    if (dev.bad && be->on_device)
        fail_msg("%s %s %s: %ld ops were handed memory that is not the device's, the first: %s",
                 k->name, precision, tag, dev.bad, dev.first_bad);
    char csv[160];
    snprintf(csv, sizeof csv, "%s/loss.csv", out_dir);
    Outcome o = {.loss = losses(csv), .streamed = has_store(wdir)};
    o.params = read_all(params, &o.params_bytes);
    assert_non_null(o.params);
    printf("# %s %s %-14s %s (%.0f bytes): loss %.6f -> %.6f\n", k->name, precision, tag,
           scale > 0 ? "streamed" : "in memory", budget, r.first_loss, r.final_loss);
    return o;
}

static void same(const Outcome *a, const Outcome *b, const char *what) {
    if (strcmp(a->loss, b->loss)) fail_msg("%s: the losses differ:\n%s---\n%s", what, a->loss, b->loss);
    if (a->params_bytes != b->params_bytes || memcmp(a->params, b->params, a->params_bytes))
        fail_msg("%s: the final weights differ", what);
}

// The case in precision: streamed on the staged device at its floor (one lane) and at twice
// it (two lanes, more slots) = streamed on the CPU at its floor = in memory on the CPU = in
// memory on the staged device, losses and weights bit for bit.
static void check_case(const Case *k, const char *precision, int p) {
    Backend cpu, staged, plain;
    FgError err = {0};
    if (backend_cpu_create(p, &plain, &err)) fail_msg("backend_cpu_create: %s", err.msg);
    staged_create(p, &cpu, &staged);
    Outcome o[5] = {run(k, precision, &staged, 1, "staged-ooc"), run(k, precision, &plain, 1, "cpu-ooc"),
                    run(k, precision, &plain, 0, "cpu-mem"), run(k, precision, &staged, 0, "staged-mem"),
                    run(k, precision, &staged, 2, "staged-ooc-2x")};
    assert_true(o[0].streamed && o[1].streamed && o[4].streamed);
    assert_false(o[2].streamed || o[3].streamed);
    assert_true(strchr(o[0].loss, '\n') && strlen(o[0].loss) > 40);  // a header and the steps
    same(&o[0], &o[1], "streamed on the staged device against streamed on the CPU");
    same(&o[0], &o[2], "streamed on the staged device against in memory on the CPU");
    same(&o[0], &o[3], "streamed on the staged device against in memory on it");
    same(&o[0], &o[4], "streamed on the staged device at its floor against at twice it");
    for (int i = 0; i < 5; i++) free(o[i].loss), free(o[i].params);
    assert_int_equal(dev.n, 0);  // every device buffer freed
    backend_cpu_destroy(&cpu);
    backend_cpu_destroy(&plain);
}

static const Case CASES[] = {
    {"bp", "mode=bp", 0},
    {"fgbp-lag1", "mode=fg+bp;perturb=activity;estimator=mix;shrink=0.5;select=1;lag=1", 0},
    {"lora-bp", "mode=bp", 1},
    {"lora-fgbp-lag1", "mode=fg+bp;perturb=weight;estimator=mix;shrink=0.5;select=1;lag=1", 1},
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

static void test_fp32(void **state) {
    (void)state;
    for (int i = 0; i < N_CASES; i++) check_case(&CASES[i], "fp32", PRECISION_FP32);
}

static void test_bf16(void **state) {
    (void)state;
    const char *missing = cpu_bf16_missing();
    if (missing) {
        printf("# SKIPPED: bf16 on the staged device needs %s, which this CPU lacks\n", missing);
        skip();
    }
    for (int i = 0; i < N_CASES; i++) check_case(&CASES[i], "bf16", PRECISION_BF16);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmp, sizeof tmp, "/tmp/fgpipe-staged-XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    char path[96];
    snprintf(path, sizeof path, "%s/corpus.txt", tmp);
    write_corpus(path);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
