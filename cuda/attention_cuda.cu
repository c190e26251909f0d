// Causal attention on the GPU in FP32 (attention_math.h; layer_attention.c is the reference), tiled
// the flash-attention way on FP32 CUDA cores (explicit fmaf, no tensor cores, no atomics).
// A block of 256 threads (16 x 16) takes a 64-row query tile of one (b, h) and walks the key
// tiles up to the causal limit with Q, K and V staged in shared memory; a thread keeps a
// register micro-tile of scores (4 rows x 4 or 2 keys) and 4 rows of the output, with an
// online softmax (running max and sum, the accumulator rescaled when the max grows), never a
// T x T matrix anywhere. The JVP carries its tangent sums through the same loop.
// The backward (FlashAttention-2): a stats kernel (the forward again) keeps each row's max,
// sum and D_t = datt_t . att_t; then one kernel per query tile (dq) and one per key tile of a
// kv head (dk, dv, over the query tiles after it and the heads of its group, head after head),
// so every output has one writer. Head sizes up to 128 (kernels for 64 and 128 features, the
// rest zero); a larger one is refused with a note.
// Not the CPU's bits: the old kernel matched the CPU's score dots bit for bit, this one sums
// in tiles (a score's dot over the features in order, but softmax sums and weighted sums in
// another order), within the tests' 1e-4. Every sum still has a fixed order: the same bits run
// to run, and a model cut into pipeline stages gives the bits of the whole.
#include "attention_math.h"
#include "cuda_internal.h"

// Threads per block (16 x 16), query tile rows, floats of padding after each shared row
// (keeps float4 alignment, spreads the banks).
enum { ATT_THREADS = 256, ATT_BQ = 64, ATT_PAD = 4 };

// Key tile rows: 64 for heads up to 64 features, 32 up to 128 (shared memory under the
// A100's 163 KiB per block, and two blocks per H100 SM where registers allow).
static __host__ __device__ constexpr int key_tile(int D) { return D <= 64 ? 64 : 32; }
// Floats of a tile of `rows` rows and D features stored transposed ([D][rows + PAD]), plain
// ([rows][D + PAD]), or a buffer for either.
static __host__ __device__ constexpr int tile_t(int rows, int D) { return D * (rows + ATT_PAD); }
static __host__ __device__ constexpr int tile_n(int rows, int D) { return rows * (D + ATT_PAD); }
static __host__ __device__ constexpr int tile_tn(int rows, int D) {
    return tile_t(rows, D) > tile_n(rows, D) ? tile_t(rows, D) : tile_n(rows, D);
}

// Rows [r0, r0 + R) below T, features [0, hs), row r at g + r * ld, into t[d][r] (transposed;
// zero elsewhere). A warp takes 8 features of 4 rows: 4 sectors read, no bank conflict written.
template <int R, int D>
static __device__ __forceinline__ void load_t(float *t, const float *g, size_t ld, int r0, int T, int hs) {
    for (int i = threadIdx.x; i < R * D; i += ATT_THREADS) {
        int lane = i % 32, c = i / 32;
        int d = c % (D / 8) * 8 + lane % 8, r = c / (D / 8) * 4 + lane / 8;
        t[d * (R + ATT_PAD) + r] = r0 + r < T && d < hs ? g[(size_t)(r0 + r) * ld + d] : 0.0f;
    }
}

// The same rows into n[r][d] (not transposed).
template <int R, int D>
static __device__ __forceinline__ void load_n(float *n, const float *g, size_t ld, int r0, int T, int hs) {
    for (int i = threadIdx.x; i < R * D; i += ATT_THREADS) {
        int r = i / D, d = i % D;
        n[r * (D + ATT_PAD) + d] = r0 + r < T && d < hs ? g[(size_t)(r0 + r) * ld + d] : 0.0f;
    }
}

// N (4 or 2) consecutive floats of shared memory in one load.
template <int N>
static __device__ __forceinline__ void lds(float (&v)[N], const float *p) {
    if constexpr (N == 4) {
        float4 a = *(const float4 *)p;
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else {
        float2 a = *(const float2 *)p;
        v[0] = a.x, v[1] = a.y;
    }
}

// acc[i][j] += sum over d of a[d][RM ty + i] b[d][CN tx + j], d in order: a micro-tile of
// dots between the rows of two transposed tiles (16 RM and 16 CN rows).
template <int RM, int CN, int D>
static __device__ __forceinline__ void mm_tt(float (&acc)[RM][CN], const float *a, const float *b) {
    const float *pa = a + threadIdx.x / 16 * RM, *pb = b + threadIdx.x % 16 * CN;
#pragma unroll 8
    for (int d = 0; d < D; d++) {
        float va[RM], vb[CN];
        lds(va, pa + d * (16 * RM + ATT_PAD));
        lds(vb, pb + d * (16 * CN + ATT_PAD));
#pragma unroll
        for (int i = 0; i < RM; i++)
#pragma unroll
            for (int j = 0; j < CN; j++) acc[i][j] = fmaf(va[i], vb[j], acc[i][j]);
    }
}

// acc[i][4 g + j] += sum over k < NK of p[k][RM ty + i] v[k][64 g + 4 tx + j], k in order:
// weights p (transposed, 16 RM rows) times a plain tile v. A thread's features are
// 64 g + 4 tx + j, g < D / 64.
template <int RM, int NK, int D>
static __device__ __forceinline__ void mm_tn(float (&acc)[RM][D / 16], const float *p, const float *v) {
    const float *pp = p + threadIdx.x / 16 * RM, *pv = v + threadIdx.x % 16 * 4;
#pragma unroll 4
    for (int k = 0; k < NK; k++) {
        float w[RM];
        lds(w, pp + k * (16 * RM + ATT_PAD));
#pragma unroll
        for (int g = 0; g < D / 64; g++) {
            float4 a = *(const float4 *)(pv + k * (D + ATT_PAD) + 64 * g);
#pragma unroll
            for (int i = 0; i < RM; i++) {
                acc[i][4 * g] = fmaf(w[i], a.x, acc[i][4 * g]);
                acc[i][4 * g + 1] = fmaf(w[i], a.y, acc[i][4 * g + 1]);
                acc[i][4 * g + 2] = fmaf(w[i], a.z, acc[i][4 * g + 2]);
                acc[i][4 * g + 3] = fmaf(w[i], a.w, acc[i][4 * g + 3]);
            }
        }
    }
}

// buf[CN tx + j][RM ty + i] = m[i][j]: a micro-tile stored transposed, for mm_tn.
template <int RM, int CN>
static __device__ __forceinline__ void store_t(float *buf, const float (&m)[RM][CN]) {
    float *p = buf + threadIdx.x % 16 * CN * (16 * RM + ATT_PAD) + threadIdx.x / 16 * RM;
#pragma unroll
    for (int j = 0; j < CN; j++)
#pragma unroll
        for (int i = 0; i < RM; i++) p[j * (16 * RM + ATT_PAD) + i] = m[i][j];
}

// Max and sum over the 16 lanes of a row (tx); the butterfly leaves the same bits in each.
static __device__ __forceinline__ float row_max(float v) {
    for (int o = 1; o < 16; o *= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float row_sum(float v) {
    for (int o = 1; o < 16; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One key tile of the online softmax: the scores sc (dots) of rows r + i and keys c + j
// become weights exp(sc scale - m), 0 for a key after the row; m[i] the rows' running max
// (over the 16 lanes), l[i] this thread's part of the sum, alpha[i] the factor that rescales
// what was summed under the old max. Key 0 is in the first tile: m is finite after it.
template <int CN>
static __device__ __forceinline__ void softmax_step(float (&sc)[4][CN], float (&m)[4], float (&l)[4],
                                                    float (&alpha)[4], float scale, int r, int c) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float mx = m[i];
#pragma unroll
        for (int j = 0; j < CN; j++) {
            sc[i][j] = c + j <= r + i ? sc[i][j] * scale : -INFINITY;
            mx = fmaxf(mx, sc[i][j]);
        }
        mx = row_max(mx);
        alpha[i] = expf(m[i] - mx);
        m[i] = mx;
        l[i] *= alpha[i];
#pragma unroll
        for (int j = 0; j < CN; j++) {
            sc[i][j] = expf(sc[i][j] - mx);
            l[i] += sc[i][j];
        }
    }
}

template <int D>
static __device__ __forceinline__ void rescale(float (&acc)[4][D / 16], const float (&alpha)[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < D / 16; j++) acc[i][j] *= alpha[i];
}

// ---------------------------------------------------------------------------------------------
// Forward: one block per (query tile, b h); the last tiles (the most keys) first. STATS: the
// backward's pass, which keeps (max, sum, datt_t . att_t) of each row instead of att.
template <int D, bool STATS>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_forward_kernel(AttnShape s, const float *x, float *y, const float *dy, float4 *stats) {
    constexpr int BK = key_tile(D), CN = BK / 16;
    extern __shared__ float4 smem4[];
    float *qt = (float *)smem4, *kv = qt + tile_t(ATT_BQ, D), *pt = kv + tile_tn(BK, D);
    int b = blockIdx.y / s.H, h = blockIdx.y % s.H, r0 = (gridDim.x - 1 - blockIdx.x) * ATT_BQ;
    int tx = threadIdx.x % 16, r = r0 + threadIdx.x / 16 * 4;
    const float *k = x + attn_at_in(&s, b, 0, 2, h), *v = x + attn_at_in(&s, b, 0, 3, h);
    load_t<ATT_BQ, D>(qt, x + attn_at_in(&s, b, 0, 1, h), s.in, r0, s.T, s.hs);
    float acc[4][D / 16] = {}, m[4], l[4] = {}, alpha[4];
    for (int i = 0; i < 4; i++) m[i] = -INFINITY;
    int last = min(r0 + ATT_BQ, s.T) - 1;  // the tile's last row sees the keys up to it
    for (int c0 = 0; c0 <= last; c0 += BK) {
        __syncthreads();  // the last tile's pt and kv read
        load_t<BK, D>(kv, k, s.in, c0, s.T, s.hs);
        __syncthreads();
        float sc[4][CN] = {};
        mm_tt<4, CN, D>(sc, qt, kv);
        softmax_step(sc, m, l, alpha, s.scale, r, c0 + CN * tx);
        rescale<D>(acc, alpha);
        store_t(pt, sc);
        __syncthreads();  // the keys read: the values go in their place
        load_n<BK, D>(kv, v, s.in, c0, s.T, s.hs);
        __syncthreads();
        mm_tn<4, BK, D>(acc, pt, kv);
    }
    for (int i = 0; i < 4; i++) {
        float sum = row_sum(l[i]), dot = 0.0f;
        bool row = r + i < s.T;
        for (int j = 0; j < D / 16; j++) {
            int d = j / 4 * 64 + 4 * tx + j % 4;
            if (!row || d >= s.hs) continue;
            if (STATS) dot = fmaf(dy[attn_at_out(&s, b, r + i, h) + d], acc[i][j] / sum, dot);
            else y[attn_at_out(&s, b, r + i, h) + d] = acc[i][j] / sum;
        }
        if (!STATS) continue;
        dot = row_sum(dot);  // every lane of the row gets here
        if (row && tx == 0) stats[((size_t)b * s.H + h) * s.T + r + i] = make_float4(m[i], sum, dot, 0.0f);
    }
}

// Shared memory per block, set as the kernel's limit before each launch (the attribute is per
// device, and a process may drive several): a launch above the limit fails, noted.
template <int D>
static constexpr size_t forward_smem() {
    return sizeof(float) * (tile_t(ATT_BQ, D) + tile_tn(key_tile(D), D) + key_tile(D) * (ATT_BQ + ATT_PAD));
}

static unsigned query_tiles(const AttnShape &s) { return (unsigned)((s.T + ATT_BQ - 1) / ATT_BQ); }

template <int D, bool STATS>
static void forward_launch(const Backend *be, const AttnShape &s, const float *x, float *y,
                           const float *dy, float4 *stats, const char *what) {
    auto *f = attn_forward_kernel<D, STATS>;
    cuda_check(be, cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)forward_smem<D>()), what);
    dim3 grid(query_tiles(s), (unsigned)(s.B * s.H));
    f<<<grid, ATT_THREADS, forward_smem<D>(), cuda_ctx(be)->stream>>>(s, x, y, dy, stats);
    launch_check(be, what);
}

// False (noted) for a head size the kernels do not take (instantiated for up to 64 and 128).
static bool head_ok(const Backend *be, const AttnShape &s, const char *what) {
    if (s.hs <= 128) return true;
    cuda_note(be, what, "head size above 128: not supported by the attention kernels");
    return false;
}

static void tiled_forward(const Backend *be, const AttnShape *sp, const float *x, float *y) {
    const AttnShape &s = *sp;
    if (!head_ok(be, s, "attention")) return;
    if (s.hs <= 64) forward_launch<64, false>(be, s, x, y, NULL, NULL, "attention");
    else forward_launch<128, false>(be, s, x, y, NULL, NULL, "attention");
}

// ---------------------------------------------------------------------------------------------
// JVP, tangent blockIdx.z: sdot_u = (qdot_t . k_u + q_t . kdot_u) scale, weights e_u =
// exp(s_u - m): l = sum e_u, A0 = sum e_u v_u, A1 = sum e_u (sdot_u v_u + vdot_u),
// a2 = sum e_u sdot_u (all rescaled when m grows); attdot = A1 / l - (a2 / l) A0 / l.
template <int D>
static constexpr size_t jvp_smem() {
    return sizeof(float) * 2 * (tile_t(ATT_BQ, D) + tile_tn(key_tile(D), D) + key_tile(D) * (ATT_BQ + ATT_PAD));
}

// a0 += p v and a1 += e v + p vd over a key tile (mm_tn's maps, in one pass over it).
template <int NK, int D>
static __device__ __forceinline__ void jvp_sums(float (&a0)[4][D / 16], float (&a1)[4][D / 16], const float *p,
                                                const float *e, const float *v, const float *vd) {
    int at = threadIdx.x / 16 * 4, tx4 = threadIdx.x % 16 * 4;
#pragma unroll 2
    for (int k = 0; k < NK; k++) {
        float wp[4], we[4];
        lds(wp, p + k * (ATT_BQ + ATT_PAD) + at);
        lds(we, e + k * (ATT_BQ + ATT_PAD) + at);
#pragma unroll
        for (int g = 0; g < D / 64; g++) {
            float4 a = *(const float4 *)(v + k * (D + ATT_PAD) + 64 * g + tx4);
            float4 ad = *(const float4 *)(vd + k * (D + ATT_PAD) + 64 * g + tx4);
            float av[4] = {a.x, a.y, a.z, a.w}, adv[4] = {ad.x, ad.y, ad.z, ad.w};
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    a0[i][4 * g + j] = fmaf(wp[i], av[j], a0[i][4 * g + j]);
                    a1[i][4 * g + j] = fmaf(wp[i], adv[j], fmaf(we[i], av[j], a1[i][4 * g + j]));
                }
        }
    }
}

// For 64 features, two blocks per SM (ptxas spills a few bytes at 128 registers); for 128
// one (its shared memory).
template <int D>
__global__ void __launch_bounds__(ATT_THREADS, D <= 64 ? 2 : 1)
    attn_jvp_kernel(AttnShape s, const float *x, const float *xdot, float *ydot) {
    constexpr int BK = key_tile(D), CN = BK / 16;
    extern __shared__ float4 smem4[];
    float *qt = (float *)smem4, *qdt = qt + tile_t(ATT_BQ, D), *kv = qdt + tile_t(ATT_BQ, D);
    float *kvd = kv + tile_tn(BK, D), *pt = kvd + tile_tn(BK, D), *et = pt + BK * (ATT_BQ + ATT_PAD);
    int b = blockIdx.y / s.H, h = blockIdx.y % s.H, r0 = (gridDim.x - 1 - blockIdx.x) * ATT_BQ;
    int tx = threadIdx.x % 16, r = r0 + threadIdx.x / 16 * 4;
    const float *xd = xdot + (size_t)blockIdx.z * s.B * s.T * s.in;
    float *yd = ydot + (size_t)blockIdx.z * s.B * s.T * s.out;
    size_t ak = attn_at_in(&s, b, 0, 2, h), av = attn_at_in(&s, b, 0, 3, h), aq = attn_at_in(&s, b, 0, 1, h);
    load_t<ATT_BQ, D>(qt, x + aq, s.in, r0, s.T, s.hs);
    load_t<ATT_BQ, D>(qdt, xd + aq, s.in, r0, s.T, s.hs);
    float a0[4][D / 16] = {}, a1[4][D / 16] = {}, m[4], l[4] = {}, a2[4] = {}, alpha[4];
    for (int i = 0; i < 4; i++) m[i] = -INFINITY;
    int last = min(r0 + ATT_BQ, s.T) - 1;
    for (int c0 = 0; c0 <= last; c0 += BK) {
        __syncthreads();  // the last tile's pt, et, kv and kvd read
        load_t<BK, D>(kv, x + ak, s.in, c0, s.T, s.hs);
        load_t<BK, D>(kvd, xd + ak, s.in, c0, s.T, s.hs);
        __syncthreads();
        float sc[4][CN] = {}, sd[4][CN] = {};
        mm_tt<4, CN, D>(sc, qt, kv);
        softmax_step(sc, m, l, alpha, s.scale, r, c0 + CN * tx);
        rescale<D>(a0, alpha);
        rescale<D>(a1, alpha);
        store_t(pt, sc);  // read back below: sc's registers free for sd's dots
        mm_tt<4, CN, D>(sd, qdt, kv);
        mm_tt<4, CN, D>(sd, qt, kvd);
        const float *pe = pt + tx * CN * (ATT_BQ + ATT_PAD) + threadIdx.x / 16 * 4;
        for (int i = 0; i < 4; i++) {
            a2[i] *= alpha[i];
            for (int j = 0; j < CN; j++) {
                sd[i][j] = pe[j * (ATT_BQ + ATT_PAD) + i] * (sd[i][j] * s.scale);  // e_u sdot_u
                a2[i] += sd[i][j];
            }
        }
        store_t(et, sd);
        __syncthreads();  // the keys read: the values go in their place
        load_n<BK, D>(kv, x + av, s.in, c0, s.T, s.hs);
        load_n<BK, D>(kvd, xd + av, s.in, c0, s.T, s.hs);
        __syncthreads();
        jvp_sums<BK, D>(a0, a1, pt, et, kv, kvd);
    }
    for (int i = 0; i < 4; i++) {
        float sum = row_sum(l[i]), mean = row_sum(a2[i]) / sum;
        for (int j = 0; j < D / 16; j++) {
            int d = j / 4 * 64 + 4 * tx + j % 4;
            if (r + i < s.T && d < s.hs)
                yd[attn_at_out(&s, b, r + i, h) + d] = a1[i][j] / sum - mean * (a0[i][j] / sum);
        }
    }
}

template <int D>
static void jvp_launch(const Backend *be, const AttnShape &s, const float *x, const float *xdot,
                       float *ydot, int K) {
    auto *f = attn_jvp_kernel<D>;
    cuda_check(be, cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)jvp_smem<D>()),
               "attention jvp");
    dim3 grid(query_tiles(s), (unsigned)(s.B * s.H), (unsigned)K);
    f<<<grid, ATT_THREADS, jvp_smem<D>(), cuda_ctx(be)->stream>>>(s, x, xdot, ydot);
    launch_check(be, "attention jvp");
}

static void tiled_jvp(const Backend *be, const AttnShape *sp, const float *x, const float *xdot,
                      float *ydot, int K) {
    const AttnShape &s = *sp;
    if (!head_ok(be, s, "attention jvp")) return;
    if (s.hs <= 64) jvp_launch<64>(be, s, x, xdot, ydot, K);
    else jvp_launch<128>(be, s, x, xdot, ydot, K);
}

// ---------------------------------------------------------------------------------------------
// Backward (layer_attention.c's head_backward, rearranged so that every output has one writer):
// P[t, u] = exp(s - m_t) / l_t, dP[t, u] = datt_t . v_u, ds = P (dP - D_t) scale with
// D_t = datt_t . att_t, dq_t = sum_u ds[t, u] k_u, dk_u = sum_t ds[t, u] q_t,
// dv_u = sum_t P[t, u] datt_t. stats[(b H + h) T + t] = (m_t, l_t, D_t) from the stats pass.

template <int D>
static constexpr size_t dq_smem() {
    return sizeof(float) * (2 * tile_t(ATT_BQ, D) + 2 * tile_tn(key_tile(D), D) + key_tile(D) * (ATT_BQ + ATT_PAD));
}

// One block per (query tile, b h): dq of its rows, over the key tiles up to the causal limit.
template <int D>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_dq_kernel(AttnShape s, const float *x, const float *dy, float *dx, const float4 *stats) {
    constexpr int BK = key_tile(D), CN = BK / 16;
    extern __shared__ float4 smem4[];
    float *qt = (float *)smem4, *ot = qt + tile_t(ATT_BQ, D), *k0 = ot + tile_t(ATT_BQ, D);
    float *vt = k0 + tile_tn(BK, D), *dst = vt + tile_tn(BK, D);
    int b = blockIdx.y / s.H, h = blockIdx.y % s.H, r0 = (gridDim.x - 1 - blockIdx.x) * ATT_BQ;
    int tx = threadIdx.x % 16, r = r0 + threadIdx.x / 16 * 4;
    const float *k = x + attn_at_in(&s, b, 0, 2, h), *v = x + attn_at_in(&s, b, 0, 3, h);
    load_t<ATT_BQ, D>(qt, x + attn_at_in(&s, b, 0, 1, h), s.in, r0, s.T, s.hs);
    load_t<ATT_BQ, D>(ot, dy + attn_at_out(&s, b, 0, h), s.out, r0, s.T, s.hs);
    float4 st[4];
    for (int i = 0; i < 4; i++)
        st[i] = r + i < s.T ? stats[((size_t)b * s.H + h) * s.T + r + i] : make_float4(0.0f, 1.0f, 0.0f, 0.0f);
    float acc[4][D / 16] = {};
    int last = min(r0 + ATT_BQ, s.T) - 1;
    for (int c0 = 0; c0 <= last; c0 += BK) {
        __syncthreads();  // the last tile's dst and k0 read
        load_t<BK, D>(k0, k, s.in, c0, s.T, s.hs);
        load_t<BK, D>(vt, v, s.in, c0, s.T, s.hs);
        __syncthreads();
        float sc[4][CN] = {}, dp[4][CN] = {};
        mm_tt<4, CN, D>(sc, qt, k0);
        mm_tt<4, CN, D>(dp, ot, vt);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < CN; j++) {
                float p = c0 + CN * tx + j <= r + i ? expf(sc[i][j] * s.scale - st[i].x) / st[i].y : 0.0f;
                sc[i][j] = p * (dp[i][j] - st[i].z) * s.scale;
            }
        store_t(dst, sc);
        __syncthreads();  // the keys (transposed) read: the plain ones go in their place
        load_n<BK, D>(k0, k, s.in, c0, s.T, s.hs);
        __syncthreads();
        mm_tn<4, BK, D>(acc, dst, k0);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < D / 16; j++) {
            int d = j / 4 * 64 + 4 * tx + j % 4;
            if (r + i < s.T && d < s.hs) dx[attn_at_in(&s, b, r + i, 1, h) + d] = acc[i][j];
        }
}

template <int D>
static constexpr size_t dkv_smem() {
    return sizeof(float) * (2 * tile_t(key_tile(D), D) + 2 * tile_tn(ATT_BQ, D) +
                            2 * ATT_BQ * (key_tile(D) + ATT_PAD) + 4 * ATT_BQ);
}

// One block per (key tile, b g) of kv head g: dk and dv of its keys, over the query heads of
// the group (head after head) and the query tiles from the key tile's on. Here a thread's
// micro-tile rows are keys (RM of them), its columns queries (4).
template <int D>
__global__ void __launch_bounds__(ATT_THREADS)
    attn_dkv_kernel(AttnShape s, const float *x, const float *dy, float *dx, const float4 *stats) {
    constexpr int BK = key_tile(D), RM = BK / 16;
    extern __shared__ float4 smem4[];
    float *kt = (float *)smem4, *vt = kt + tile_t(BK, D), *q0 = vt + tile_t(BK, D);
    float *q1 = q0 + tile_tn(ATT_BQ, D), *ps = q1 + tile_tn(ATT_BQ, D), *dss = ps + ATT_BQ * (BK + ATT_PAD);
    float4 *st = (float4 *)(dss + ATT_BQ * (BK + ATT_PAD));
    int b = blockIdx.y / s.Hkv, h0 = blockIdx.y % s.Hkv * s.group, c0 = blockIdx.x * BK;
    int tx = threadIdx.x % 16, c = c0 + threadIdx.x / 16 * RM;
    load_t<BK, D>(kt, x + attn_at_in(&s, b, 0, 2, h0), s.in, c0, s.T, s.hs);
    load_t<BK, D>(vt, x + attn_at_in(&s, b, 0, 3, h0), s.in, c0, s.T, s.hs);
    float dk[RM][D / 16] = {}, dv[RM][D / 16] = {};
    for (int h = h0; h < h0 + s.group; h++) {
        const float *q = x + attn_at_in(&s, b, 0, 1, h), *o = dy + attn_at_out(&s, b, 0, h);
        const float4 *hst = stats + ((size_t)b * s.H + h) * s.T;
        for (int r0 = c0 / ATT_BQ * ATT_BQ; r0 < s.T; r0 += ATT_BQ) {
            __syncthreads();  // the last tile's ps, dss, q0, q1 and st read
            load_t<ATT_BQ, D>(q0, q, s.in, r0, s.T, s.hs);
            load_t<ATT_BQ, D>(q1, o, s.out, r0, s.T, s.hs);
            if (threadIdx.x < ATT_BQ)
                st[threadIdx.x] = r0 + (int)threadIdx.x < s.T ? hst[r0 + threadIdx.x] : make_float4(0.0f, 1.0f, 0.0f, 0.0f);
            __syncthreads();
            float sc[RM][4] = {}, dp[RM][4] = {};
            mm_tt<RM, 4, D>(sc, kt, q0);
            mm_tt<RM, 4, D>(dp, vt, q1);
            for (int j = 0; j < 4; j++) {
                int t = r0 + 4 * tx + j;
                float4 w = st[4 * tx + j];
                for (int i = 0; i < RM; i++) {
                    float p = c + i <= t && t < s.T ? expf(sc[i][j] * s.scale - w.x) / w.y : 0.0f;
                    sc[i][j] = p;
                    dp[i][j] = p * (dp[i][j] - w.z) * s.scale;
                }
            }
            store_t(ps, sc);  // [query][key]
            store_t(dss, dp);
            __syncthreads();  // q and datt (transposed) read: the plain ones go in their place
            load_n<ATT_BQ, D>(q0, o, s.out, r0, s.T, s.hs);
            load_n<ATT_BQ, D>(q1, q, s.in, r0, s.T, s.hs);
            __syncthreads();
            mm_tn<RM, ATT_BQ, D>(dv, ps, q0);
            mm_tn<RM, ATT_BQ, D>(dk, dss, q1);
        }
    }
    for (int i = 0; i < RM; i++)
        for (int j = 0; j < D / 16; j++) {
            int d = j / 4 * 64 + 4 * tx + j % 4;
            if (c + i >= s.T || d >= s.hs) continue;
            dx[attn_at_in(&s, b, c + i, 2, h0) + d] = dk[i][j];
            dx[attn_at_in(&s, b, c + i, 3, h0) + d] = dv[i][j];
        }
}

template <int D>
static void backward_launch(const Backend *be, const AttnShape &s, const float *x, const float *dy,
                            float *dx, float4 *stats) {
    cudaStream_t stream = cuda_ctx(be)->stream;
    forward_launch<D, true>(be, s, x, NULL, dy, stats, "attention backward: stats");
    auto *fq = attn_dq_kernel<D>;
    cuda_check(be, cudaFuncSetAttribute(fq, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dq_smem<D>()),
               "attention backward: dq");
    fq<<<dim3(query_tiles(s), (unsigned)(s.B * s.H)), ATT_THREADS, dq_smem<D>(), stream>>>(s, x, dy, dx, stats);
    launch_check(be, "attention backward: dq");
    auto *fkv = attn_dkv_kernel<D>;
    cuda_check(be, cudaFuncSetAttribute(fkv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dkv_smem<D>()),
               "attention backward: dk, dv");
    unsigned key_tiles = (unsigned)((s.T + key_tile(D) - 1) / key_tile(D));
    fkv<<<dim3(key_tiles, (unsigned)(s.B * s.Hkv)), ATT_THREADS, dkv_smem<D>(), stream>>>(s, x, dy, dx, stats);
    launch_check(be, "attention backward: dk, dv");
}

static void tiled_backward(const Backend *be, const AttnShape *sp, const float *x, const float *dy,
                           float *dx) {
    const AttnShape &s = *sp;
    if (!head_ok(be, s, "attention backward")) return;
    size_t rows = (size_t)s.B * s.H * s.T;
    float4 *stats = (float4 *)cuda_workspace(be, WORK_ROWS, rows * sizeof(float4));
    if (!stats) return;  // noted by cuda_workspace
    if (s.hs <= 64) backward_launch<64>(be, s, x, dy, dx, stats);
    else backward_launch<128>(be, s, x, dy, dx, stats);
}

const AttentionKernels attention_tiled = {tiled_forward, tiled_jvp, tiled_backward};

// ---------------------------------------------------------------------------------------------
// The layer's entry points: the carried columns, then the kernels the precision chose
// (backend_cuda_set_precision: these tiles for FP32, attention_gemm.cu's tensor cores else).

void cuda_attention_forward(const Backend *be, const Layer *L, const float *x, float *y, int B) {
    AttnShape s = attn_shape(L, B);
    copy_rows(be, y, s.out, x, s.in, s.C, (size_t)B * s.T, "attention: carry");
    if (B && s.T) cuda_ctx(be)->attention->forward(be, &s, x, y);
}

void cuda_attention_jvp(const Backend *be, const Layer *L, const float *x, const float *xdot,
                        float *ydot, int B, int K) {
    AttnShape s = attn_shape(L, B);
    if (!xdot) {
        zero_floats(be, ydot, (size_t)K * B * L->out, "attention jvp: zero");
        return;
    }
    copy_rows(be, ydot, s.out, xdot, s.in, s.C, (size_t)K * B * s.T, "attention jvp: carry");
    if (B && s.T && K) cuda_ctx(be)->attention->jvp(be, &s, x, xdot, ydot, K);
}

void cuda_attention_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                             float *dx, int B) {
    AttnShape s = attn_shape(L, B);
    copy_rows(be, dx, s.in, dy, s.out, s.C, (size_t)B * s.T, "attention backward: carry");
    if (B && s.T) cuda_ctx(be)->attention->backward(be, &s, x, dy, dx);
}
