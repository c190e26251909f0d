// Causal attention on the GPU (attention_math.h; layer_attention.c is the reference). Fused:
// one warp per query row computes its scores, the causal softmax and the weighted sum of
// values in one kernel (forward; the JVP likewise, with its tangent terms), keeping the row's
// probabilities in shared memory, never a T x T matrix in global memory. A lane computes a
// whole score (the CPU's dot, in order, the same bits); the weighted sums give each lane a
// few features and walk the tokens in the CPU's order. Only the softmax's sum and the JVP's
// and backward's row means are added in another (fixed) order.
// The backward has two kernels, neither with atomics: one warp per query row t (dq_t, and the
// row's max, sum and mean kept for the next), one warp per key row u of a kv head (dk_u,
// dv_u = sums over t >= u and over the query heads sharing it, with P[t, u] recomputed from
// the kept max and sum: the same bits as the first's).
// No tensor cores: a tiled (flash-attention style) kernel would be the next step for speed.
#include "attention_math.h"
#include "cuda_internal.h"

enum { ATT_MAX_WARPS = 4, ATT_SMEM = 48 * 1024 };

// A launch with one warp per item and `buffers` rows of T floats of shared memory per warp.
struct AttnGrid {
    unsigned blocks, threads;
    size_t smem;
};

// False (and the failure noted) when one warp's rows do not fit in shared memory.
static bool attn_grid(const Backend *be, const AttnShape *s, int buffers, size_t items,
                      const char *what, AttnGrid *g) {
    size_t per_warp = (size_t)buffers * s->T * sizeof(float), w = ATT_SMEM / per_warp;
    if (w > ATT_MAX_WARPS) w = ATT_MAX_WARPS;
    if (!w) {
        cuda_note(be, what, "ctx too long for the attention kernels' shared memory (at most 6144)");
        return false;
    }
    g->blocks = (unsigned)((items + w - 1) / w);
    g->threads = (unsigned)(32 * w);
    g->smem = w * per_warp;
    return true;
}

// The (b, h, t) of warp item `item` (t fastest: a block's warps share a head).
struct RowIdx {
    int b, h, t;
};
static __device__ inline RowIdx row_of(const AttnShape &s, size_t item) {
    RowIdx r = {(int)(item / ((size_t)s.H * s.T)), (int)(item / s.T % s.H), (int)(item % s.T)};
    return r;
}

// prob[0..t] = softmax over u <= t of q_t . k_u * scale (layer_attention.c's softmax_row).
// Returns the row's max and sum, with which P[t, u] = expf(score - max) / sum.
static __device__ float2 softmax_row(const AttnShape &s, const float *x, RowIdx r, float *prob) {
    int lane = threadIdx.x % 32;
    const float *q = x + attn_at_in(&s, r.b, r.t, 1, r.h);
    float m = -INFINITY, sum = 0.0f;
    for (int u = lane; u <= r.t; u += 32) {
        prob[u] = fg_dot_hs(q, x + attn_at_in(&s, r.b, u, 2, r.h), s.hs) * s.scale;
        m = fmaxf(m, prob[u]);
    }
    m = warp_max(m);
    for (int u = lane; u <= r.t; u += 32) sum += prob[u] = expf(prob[u] - m);
    sum = warp_sum(sum);
    for (int u = lane; u <= r.t; u += 32) prob[u] /= sum;
    __syncwarp();
    return make_float2(m, sum);
}

// out[i] (+)= sum over u in [lo, hi] of w[u - lo] src[u * stride + i], u in order; lanes
// take the features i.
static __device__ void weighted_sum(const float *src, size_t stride, int lo, int hi,
                                    const float *w, int hs, float *out, bool accumulate) {
    for (int i = threadIdx.x % 32; i < hs; i += 32) {
        float acc = accumulate ? out[i] : 0.0f;
        for (int u = lo; u <= hi; u++) acc += w[u - lo] * src[(size_t)u * stride + i];
        out[i] = acc;
    }
}

__global__ void attn_forward_kernel(AttnShape s, const float *x, float *y) {
    extern __shared__ float smem[];
    int warps = blockDim.x / 32, warp = threadIdx.x / 32;
    size_t item = (size_t)blockIdx.x * warps + warp;
    if (item >= (size_t)s.B * s.H * s.T) return;
    RowIdx r = row_of(s, item);
    float *prob = smem + (size_t)warp * s.T;
    softmax_row(s, x, r, prob);
    weighted_sum(x + attn_at_in(&s, r.b, 0, 3, r.h), s.in, 0, r.t, prob, s.hs,
                 y + attn_at_out(&s, r.b, r.t, r.h), false);
}

void cuda_attention_forward(const Backend *be, const Layer *L, const float *x, float *y, int B) {
    AttnShape s = attn_shape(L, B);
    copy_rows(be, y, s.out, x, s.in, s.C, (size_t)B * s.T, "attention: carry");
    AttnGrid g;
    if (!attn_grid(be, &s, 1, (size_t)B * s.H * s.T, "attention", &g)) return;
    attn_forward_kernel<<<g.blocks, g.threads, g.smem, cuda_ctx(be)->stream>>>(s, x, y);
    launch_check(be, "attention");
}

// Tangent k of row (b, h, t): sdot[u] = (qdot_t . k_u + q_t . kdot_u) scale,
// Pdot = P (sdot - P . sdot), attdot_t = sum Pdot[u] v_u + P[u] vdot_u (layer_attention.c).
__global__ void attn_jvp_kernel(AttnShape s, const float *x, const float *xdot, float *ydot, int K) {
    extern __shared__ float smem[];
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t item = (size_t)blockIdx.x * warps + warp, rows = (size_t)s.B * s.H * s.T;
    if (item >= rows * K) return;
    size_t k = item / rows;
    RowIdx r = row_of(s, item % rows);
    const float *xd = xdot + k * s.B * s.T * s.in;
    float *prob = smem + (size_t)warp * 2 * s.T, *pdot = prob + s.T;
    softmax_row(s, x, r, prob);
    const float *q = x + attn_at_in(&s, r.b, r.t, 1, r.h), *qd = xd + attn_at_in(&s, r.b, r.t, 1, r.h);
    float mean = 0.0f;
    for (int u = lane; u <= r.t; u += 32) {
        pdot[u] = (fg_dot_hs(qd, x + attn_at_in(&s, r.b, u, 2, r.h), s.hs) +
                   fg_dot_hs(q, xd + attn_at_in(&s, r.b, u, 2, r.h), s.hs)) * s.scale;
        mean += prob[u] * pdot[u];
    }
    mean = warp_sum(mean);
    for (int u = lane; u <= r.t; u += 32) pdot[u] = prob[u] * (pdot[u] - mean);
    __syncwarp();
    float *out = ydot + k * s.B * s.T * s.out + attn_at_out(&s, r.b, r.t, r.h);
    weighted_sum(x + attn_at_in(&s, r.b, 0, 3, r.h), s.in, 0, r.t, pdot, s.hs, out, false);
    weighted_sum(xd + attn_at_in(&s, r.b, 0, 3, r.h), s.in, 0, r.t, prob, s.hs, out, true);
}

void cuda_attention_jvp(const Backend *be, const Layer *L, const float *x, const float *xdot,
                        float *ydot, int B, int K) {
    AttnShape s = attn_shape(L, B);
    if (!xdot) {
        zero_floats(be, ydot, (size_t)K * B * L->out, "attention jvp: zero");
        return;
    }
    copy_rows(be, ydot, s.out, xdot, s.in, s.C, (size_t)K * B * s.T, "attention jvp: carry");
    AttnGrid g;
    if (!attn_grid(be, &s, 2, (size_t)K * B * s.H * s.T, "attention jvp", &g)) return;
    attn_jvp_kernel<<<g.blocks, g.threads, g.smem, cuda_ctx(be)->stream>>>(s, x, xdot, ydot, K);
    launch_check(be, "attention jvp");
}

// ---------------------------------------------------------------------------------------------
// Backward (layer_attention.c's head_backward, rearranged so that every output has one writer):
// dP[t, u] = datt_t . v_u, ds = P (dP - P . dP) scale, dq_t = sum_u ds[t, u] k_u,
// dk_u = sum_t ds[t, u] q_t, dv_u = sum_t P[t, u] datt_t.

// One warp per query row t: dq_t, and the row's (max, sum, P . dP) into stats.
__global__ void attn_dq_kernel(AttnShape s, const float *x, const float *dy, float *dx, float4 *stats) {
    extern __shared__ float smem[];
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t item = (size_t)blockIdx.x * warps + warp;
    if (item >= (size_t)s.B * s.H * s.T) return;
    RowIdx r = row_of(s, item);
    float *prob = smem + (size_t)warp * 2 * s.T, *ds = prob + s.T;
    float2 ms = softmax_row(s, x, r, prob);
    const float *datt = dy + attn_at_out(&s, r.b, r.t, r.h);
    float mean = 0.0f;
    for (int u = lane; u <= r.t; u += 32) {
        ds[u] = fg_dot_hs(datt, x + attn_at_in(&s, r.b, u, 3, r.h), s.hs);
        mean += prob[u] * ds[u];
    }
    mean = warp_sum(mean);
    for (int u = lane; u <= r.t; u += 32) ds[u] = prob[u] * (ds[u] - mean) * s.scale;
    __syncwarp();
    weighted_sum(x + attn_at_in(&s, r.b, 0, 2, r.h), s.in, 0, r.t, ds, s.hs,
                 dx + attn_at_in(&s, r.b, r.t, 1, r.h), false);
    if (lane == 0) stats[item] = make_float4(ms.x, ms.y, mean, 0.0f);
}

// One warp per key row u of kv head g: for each query head h sharing it (Llama's grouped
// heads; the GPT's: h = g), P[t, u] and ds[t, u] for t >= u (a lane per t), then h's terms of
// dk_u and dv_u, added head after head as the CPU does.
__global__ void attn_dkv_kernel(AttnShape s, const float *x, const float *dy, float *dx,
                                const float4 *stats) {
    extern __shared__ float smem[];
    int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t item = (size_t)blockIdx.x * warps + warp;
    if (item >= (size_t)s.B * s.Hkv * s.T) return;
    int b = (int)(item / ((size_t)s.Hkv * s.T)), g = (int)(item / s.T % s.Hkv), u = (int)(item % s.T);
    float *prob = smem + (size_t)warp * 2 * s.T, *ds = prob + s.T;
    for (int h = g * s.group; h < (g + 1) * s.group; h++) {
        const float *k = x + attn_at_in(&s, b, u, 2, h), *v = x + attn_at_in(&s, b, u, 3, h);
        const float4 *row_stats = stats + ((size_t)b * s.H + h) * s.T;
        for (int t = u + lane; t < s.T; t += 32) {
            float4 st = row_stats[t];
            float p = expf(fg_dot_hs(x + attn_at_in(&s, b, t, 1, h), k, s.hs) * s.scale - st.x);
            p /= st.y;
            float dp = fg_dot_hs(dy + attn_at_out(&s, b, t, h), v, s.hs);
            prob[t - u] = p;
            ds[t - u] = p * (dp - st.z) * s.scale;
        }
        __syncwarp();
        bool more = h > g * s.group;  // the group's later heads add to the first's
        weighted_sum(dy + attn_at_out(&s, b, 0, h), s.out, u, s.T - 1, prob, s.hs,
                     dx + attn_at_in(&s, b, u, 3, h), more);
        weighted_sum(x + attn_at_in(&s, b, 0, 1, h), s.in, u, s.T - 1, ds, s.hs,
                     dx + attn_at_in(&s, b, u, 2, h), more);
        __syncwarp();
    }
}

void cuda_attention_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                             float *dx, int B) {
    AttnShape s = attn_shape(L, B);
    size_t rows = (size_t)B * s.H * s.T;
    cudaStream_t st = cuda_ctx(be)->stream;
    copy_rows(be, dx, s.in, dy, s.out, s.C, (size_t)B * s.T, "attention backward: carry");
    float4 *stats = (float4 *)cuda_workspace(be, WORK_ROWS, rows * sizeof(float4));
    AttnGrid g;
    if (!attn_grid(be, &s, 2, rows, "attention backward", &g)) return;
    attn_dq_kernel<<<g.blocks, g.threads, g.smem, st>>>(s, x, dy, dx, stats);
    launch_check(be, "attention backward: dq");
    AttnGrid gk;  // one warp per kv head's key row
    if (!attn_grid(be, &s, 2, (size_t)B * s.Hkv * s.T, "attention backward", &gk)) return;
    attn_dkv_kernel<<<gk.blocks, gk.threads, gk.smem, st>>>(s, x, dy, dx, stats);
    launch_check(be, "attention backward: dk, dv");
}
