// The GPT's per-token layers on the GPU: the token and position embedding, and LayerNorm
// (norm_math.h's formulas, the CPU's). Row statistics take one warp per token (sums in a
// fixed butterfly order); the parameter gradients are column sums in a fixed order, and the
// embedding's walks the tokens in the CPU's order, so its gradient has the CPU's bits.
#include <cub/device/device_radix_sort.cuh>

#include "cuda_internal.h"
#include "norm_math.h"

enum { ROW_THREADS = 256, ROW_WARPS = ROW_THREADS / 32 };

#define GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// Blocks for one warp per item.
static unsigned warp_grid(size_t items) { return (unsigned)((items + ROW_WARPS - 1) / ROW_WARPS); }

// ---------------------------------------------------------------------------------------------
// Embedding: y[r] = wte[id_r] + wpe[r % T] (no wpe with no_positions), tables of block k at
// table + k * stride (wpe after the vocab x C floats of wte).

// positions 0 (Llama): y[r] = wte[id_r] alone.
__global__ void lookup_kernel(const float *table, size_t stride, int vocab, const float *ids,
                              float *y, int rows, int T, int C, int K, int positions) {
    size_t block = (size_t)rows * C;
    GRID_LOOP(i, (size_t)K * block) {
        size_t k = i / block, r = i % block / C;
        int c = (int)(i % C), id = (int)ids[r];  // bytes as floats: 0 .. vocab-1 (text_data.c)
        const float *wte = table + k * stride, *wpe = wte + (size_t)vocab * C;
        y[i] = positions ? wte[(size_t)id * C + c] + wpe[(r % T) * C + c] : wte[(size_t)id * C + c];
    }
}

static void lookup(const Backend *be, const Layer *L, const float *table, size_t stride,
                   const float *ids, float *y, int B, int K) {
    int T = layer_tokens(L), C = layer_out_token(L);
    size_t n = (size_t)K * B * T * C;
    lookup_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(table, stride, L->vocab,
                                                                             ids, y, B * T, T, C, K,
                                                                             !L->no_positions);
    launch_check(be, "embedding");
}

void cuda_embedding_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                            float *y, int B) {
    lookup(be, L, p, 0, x, y, B, 1);
}

// Token ids have no tangent: ydot_k is the lookup in the parameter tangent k (0 without).
void cuda_embedding_jvp(const Backend *be, const Layer *L, const float *pdot, const float *x,
                        float *ydot, int B, int K) {
    if (pdot) lookup(be, L, pdot, L->param_count, x, ydot, B, K);
    else zero_floats(be, ydot, (size_t)K * B * L->out, "embedding jvp: zero");
}

// The token table's gradient, dwte[v, c] += dy[r, c] over the tokens r with id v in token
// order (the CPU's sums, so the CPU's bits): the tokens sorted by id with a stable radix sort
// (CUB's), then one block per run of equal ids adds its rows in order. Work in the tokens, not
// in the vocabulary (a block per id scanning every token took most of a Llama-3.2-1B step).
__global__ void token_keys_kernel(const float *ids, unsigned *keys, unsigned *pos, int rows) {
    GRID_LOOP(r, (size_t)rows) {
        keys[r] = (unsigned)ids[r];  // bytes as floats: 0 .. vocab-1 (text_data.c)
        pos[r] = (unsigned)r;
    }
}

// A block whose sorted token starts a run of its id (others return at once).
__global__ void token_runs_kernel(const unsigned *keys, const unsigned *pos, const float *dy,
                                  float *dwte, int rows, int C) {
    int i = blockIdx.x;
    if (i > 0 && keys[i] == keys[i - 1]) return;
    size_t v = keys[i];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = dwte[v * C + c];
        for (int j = i; j < rows && keys[j] == keys[i]; j++) acc += dy[(size_t)pos[j] * C + c];
        dwte[v * C + c] = acc;
    }
}

static void token_grad(const Backend *be, const float *ids, const float *dy, float *dwte, int rows,
                       int C, int vocab) {
    cudaStream_t st = cuda_ctx(be)->stream;
    int bits = 1;
    while (bits < 32 && (1u << bits) < (unsigned)vocab) bits++;
    size_t temp = 0, n = (size_t)rows;
    cub::DeviceRadixSort::SortPairs(NULL, temp, (unsigned *)NULL, (unsigned *)NULL, (unsigned *)NULL,
                                    (unsigned *)NULL, rows, 0, bits, st);
    size_t arrays = (4 * n * sizeof(unsigned) + 255) / 256 * 256;  // CUB's scratch 256-aligned after them
    unsigned *keys = (unsigned *)cuda_workspace(be, WORK_TOKENS, arrays + temp);
    if (!keys) return;  // noted by cuda_workspace
    unsigned *pos = keys + n, *keys_sorted = pos + n, *pos_sorted = keys_sorted + n;
    token_keys_kernel<<<grid_for(n, 256, 65535), 256, 0, st>>>(ids, keys, pos, rows);
    cuda_check(be, cub::DeviceRadixSort::SortPairs((char *)keys + arrays, temp, keys, keys_sorted, pos, pos_sorted,
                                                   rows, 0, bits, st), "embedding backward: sorting tokens");
    token_runs_kernel<<<rows, C < 256 ? 32 * ((C + 31) / 32) : 256, 0, st>>>(keys_sorted, pos_sorted, dy, dwte, rows, C);
}

// dwpe[t, c] += dy[b, t, c] over the samples b in order.
__global__ void position_grad_kernel(const float *dy, float *dwpe, int B, int T, int C) {
    GRID_LOOP(i, (size_t)T * C) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += dy[(size_t)b * T * C + i];
        dwpe[i] = acc;
    }
}

void cuda_embedding_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                             float *dx, float *dp, int B) {
    cudaStream_t st = cuda_ctx(be)->stream;
    if (dx) cuda_check(be, cudaMemsetAsync(dx, 0, (size_t)B * L->in * sizeof(float), st), "embedding backward: dx");
    if (!dp) return;
    int T = layer_tokens(L), C = layer_out_token(L);
    token_grad(be, x, dy, dp, B * T, C, L->vocab);
    launch_check(be, "embedding backward: wte");
    if (L->no_positions) return;
    position_grad_kernel<<<grid_for((size_t)T * C, 256, 65535), 256, 0, st>>>(dy, dp + (size_t)L->vocab * C, B, T, C);
    launch_check(be, "embedding backward: wpe");
}

// ---------------------------------------------------------------------------------------------
// LayerNorm (norm_math.h). Row statistics (mean, rstd) of each token into scratch first.

__global__ void norm_stats_kernel(const float *x, int rows, int C, float2 *stats) {
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + (size_t)r * C;
    float s = 0.0f;
    for (int i = lane; i < C; i += 32) s += xr[i];
    float mean = warp_sum(s) / (float)C, v = 0.0f;
    for (int i = lane; i < C; i += 32) v += (xr[i] - mean) * (xr[i] - mean);
    v = warp_sum(v);
    if (lane == 0) stats[r] = make_float2(mean, fg_norm_rstd(v, C));
}

static const float2 *norm_stats(const Backend *be, const NormShape *s, const float *x) {
    float2 *stats = (float2 *)cuda_workspace(be, WORK_ROWS, (size_t)s->rows * sizeof(float2));
    norm_stats_kernel<<<warp_grid(s->rows), ROW_THREADS, 0, cuda_ctx(be)->stream>>>(x, s->rows, s->C, stats);
    launch_check(be, "layernorm: statistics");
    return stats;
}

// y = [x,] gamma xhat + beta, one thread per feature.
__global__ void norm_forward_kernel(NormShape s, const float *p, const float *x, const float2 *stats,
                                    float *y) {
    GRID_LOOP(i, (size_t)s.rows * s.C) {
        size_t r = i / s.C;
        int c = (int)(i % s.C);
        float *yr = y + r * s.out;
        if (s.offset) yr[c] = x[i];
        yr[s.offset + c] = p[c] * fg_norm_xhat(x[i], stats[r].x, stats[r].y) + p[s.C + c];
    }
}

void cuda_norm_forward(const Backend *be, const Layer *L, const float *p, const float *x, float *y,
                       int B) {
    NormShape s = norm_shape(L, B);
    const float2 *stats = norm_stats(be, &s, x);
    size_t n = (size_t)s.rows * s.C;
    norm_forward_kernel<<<grid_for(n, 256, 65535), 256, 0, cuda_ctx(be)->stream>>>(s, p, x, stats, y);
    launch_check(be, "layernorm");
}

// One warp per (k, token): ydot = [xdot,] gamma xhat' + gammadot xhat + betadot (xd, gd may be
// NULL: zero), as norm_token_jvp in layer_norm.c.
__global__ void norm_jvp_kernel(NormShape s, const float *gamma, const float *pdot, size_t pstride,
                                const float *x, const float *xdot, const float2 *stats, float *ydot,
                                int K) {
    size_t item = (size_t)blockIdx.x * ROW_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (item >= (size_t)K * s.rows) return;
    size_t k = item / s.rows, r = item % s.rows;
    const float *xr = x + r * s.C, *xd = xdot ? xdot + item * s.C : NULL;
    const float *gd = pdot ? pdot + k * pstride : NULL;
    float *yd = ydot + item * s.out, mean = stats[r].x, rstd = stats[r].y;
    float md = 0.0f, mhd = 0.0f;
    for (int i = lane; xd && i < s.C; i += 32) {
        md += xd[i];
        mhd += fg_norm_xhat(xr[i], mean, rstd) * xd[i];
    }
    md = warp_sum(md) / (float)s.C;
    mhd = warp_sum(mhd) / (float)s.C;
    for (int i = lane; i < s.C; i += 32) {
        float xhat = fg_norm_xhat(xr[i], mean, rstd), v = 0.0f;
        if (s.offset) yd[i] = xd ? xd[i] : 0.0f;
        if (xd) v = fg_norm_jvp(gamma[i], rstd, xd[i], md, xhat, mhd);
        if (gd) v += gd[i] * xhat + gd[s.C + i];
        yd[s.offset + i] = v;
    }
}

void cuda_norm_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                   const float *x, const float *xdot, float *ydot, int B, int K) {
    NormShape s = norm_shape(L, B);
    const float2 *stats = norm_stats(be, &s, x);
    norm_jvp_kernel<<<warp_grid((size_t)K * s.rows), ROW_THREADS, 0, cuda_ctx(be)->stream>>>(
        s, p, pdot, L->param_count, x, xdot, stats, ydot, K);
    launch_check(be, "layernorm jvp");
}

// One warp per token: dx = [dy's carry +] rstd (g - mean(g) - xhat mean(g xhat)), g = gamma dy.
__global__ void norm_dx_kernel(NormShape s, const float *gamma, const float *x, const float *dy,
                               const float2 *stats, float *dx) {
    int r = blockIdx.x * ROW_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= s.rows) return;
    const float *xr = x + (size_t)r * s.C, *dyr = dy + (size_t)r * s.out;
    float mean = stats[r].x, rstd = stats[r].y, mg = 0.0f, mgh = 0.0f;
    for (int i = lane; i < s.C; i += 32) {
        float g = gamma[i] * dyr[s.offset + i];
        mg += g;
        mgh += g * (xr[i] - mean) * rstd;
    }
    mg = warp_sum(mg) / (float)s.C;
    mgh = warp_sum(mgh) / (float)s.C;
    for (int i = lane; i < s.C; i += 32) {
        float xhat = fg_norm_xhat(xr[i], mean, rstd);
        float v = fg_norm_dx(rstd, gamma[i] * dyr[s.offset + i], mg, xhat, mgh);
        dx[(size_t)r * s.C + i] = s.offset ? dyr[i] + v : v;
    }
}

__global__ void norm_xhat_kernel(NormShape s, const float *x, const float2 *stats, float *xhat) {
    GRID_LOOP(i, (size_t)s.rows * s.C) xhat[i] = fg_norm_xhat(x[i], stats[i / s.C].x, stats[i / s.C].y);
}

// dgamma += column sums of dy_ln xhat, dbeta += column sums of dy_ln.
void cuda_norm_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                        const float *dy, float *dx, float *dp, int B) {
    NormShape s = norm_shape(L, B);
    cudaStream_t st = cuda_ctx(be)->stream;
    const float2 *stats = norm_stats(be, &s, x);
    if (dx) {
        norm_dx_kernel<<<warp_grid(s.rows), ROW_THREADS, 0, st>>>(s, p, x, dy, stats, dx);
        launch_check(be, "layernorm backward: dx");
    }
    if (!dp) return;
    size_t n = (size_t)s.rows * s.C;
    float *xhat = (float *)cuda_workspace(be, WORK_TEMP, n * sizeof(float));
    norm_xhat_kernel<<<grid_for(n, 256, 65535), 256, 0, st>>>(s, x, stats, xhat);
    launch_check(be, "layernorm backward: xhat");
    const float *dy_ln = dy + s.offset;
    cuda_column_sums(be, dy_ln, s.out, xhat, s.C, s.rows, s.C, dp, "layernorm backward: dgamma");
    cuda_column_sums(be, dy_ln, s.out, NULL, 0, s.rows, s.C, dp + s.C, "layernorm backward: dbeta");
}
