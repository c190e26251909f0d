// Llama's and Qwen3's own layers on the GPU (layer_rmsnorm.c, layer_qk_norm.c, layer_rope.c,
// layer_swiglu.c are the reference): RMSNorm and the q/k norms one thread per normalised
// vector running rms_math.h's functions (the CPU's operations in the CPU's order: simple, not
// yet fast), their weight gradients one thread per weight summing the rows in the CPU's order;
// the rotation one thread per (token, head) with the CPU's table uploaded and rope_turn;
// SwiGLU one thread per feature with activation_math.h's silu. The embedding without
// positions is sequence_cuda.cu's, the grouped attention attention_cuda.cu's.
#include <stdlib.h>

#include "activation_math.h"
#include "cuda_internal.h"
#include "rms_math.h"

extern "C" {
#include "qkv_shape.h"  // rope_table: C, in layer_rope.c
}

#define GRID_LOOP(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

static unsigned grid(size_t n) { return grid_for(n, 256, 65535); }

// ---------------------------------------------------------------------------------------------
// RMSNorm over a token: [x,] w * rms(x).

struct RmsShape {
    size_t rows;
    int C, out, offset;  // features, output floats per token, where rms(x) starts in it
};

static RmsShape rms_shape(const Layer *L, int B) {
    RmsShape s = {(size_t)B * layer_tokens(L), layer_in_token(L), layer_out_token(L),
                  L->carry ? layer_in_token(L) : 0};
    return s;
}

__global__ void rms_forward_kernel(RmsShape s, const float *w, const float *x, float *y, float eps) {
    GRID_LOOP(r, s.rows) {
        const float *xr = x + r * s.C;
        float *yr = y + r * s.out;
        for (int i = 0; i < s.offset; i++) yr[i] = xr[i];
        fg_rms_forward(xr, w, s.C, eps, yr + s.offset);
    }
}

__global__ void rms_jvp_kernel(RmsShape s, const float *w, const float *pdot, size_t pstride,
                               const float *x, const float *xdot, float *ydot, float eps, int K) {
    GRID_LOOP(item, (size_t)K * s.rows) {
        size_t k = item / s.rows, r = item % s.rows;
        const float *xd = xdot ? xdot + item * s.C : NULL;
        float *yd = ydot + item * s.out;
        for (int i = 0; i < s.offset; i++) yd[i] = xd ? xd[i] : 0.0f;
        fg_rms_jvp(x + r * s.C, xd, w, pdot ? pdot + k * pstride : NULL, s.C, eps, yd + s.offset);
    }
}

__global__ void rms_dx_kernel(RmsShape s, const float *w, const float *x, const float *dy, float *dx,
                              float eps) {
    GRID_LOOP(r, s.rows) {
        const float *dyr = dy + r * s.out;
        float *dxr = dx + r * s.C;
        for (int i = 0; i < s.offset; i++) dxr[i] = dyr[i];
        fg_rms_backward_dx(x + r * s.C, w, dyr + s.offset, s.C, eps, dxr, s.offset != 0);
    }
}

// rstd[v] of vector v = (row v / per_row, j = v % per_row) at x + row * stride + first + j n.
__global__ void rstd_kernel(const float *x, size_t vectors, int per_row, size_t stride, int first,
                            int n, float eps, float *rstd) {
    GRID_LOOP(v, vectors) rstd[v] = fg_rms_rstd(x + v / per_row * stride + first + v % per_row * n, n, eps);
}

static const float *rstd_of(const Backend *be, const float *x, size_t vectors, int per_row,
                            size_t stride, int first, int n, float eps) {
    float *rstd = (float *)cuda_workspace(be, WORK_ROWS, vectors * sizeof(float));
    rstd_kernel<<<grid(vectors), 256, 0, cuda_ctx(be)->stream>>>(x, vectors, per_row, stride, first, n,
                                                                  eps, rstd);
    launch_check(be, "rms: rstd");
    return rstd;
}

// dw[c] += dy_norm[r, c] xhat[r, c] over the rows in order.
__global__ void rms_dw_kernel(RmsShape s, const float *x, const float *dy, const float *rstd, float *dw) {
    GRID_LOOP(c, (size_t)s.C) {
        float acc = dw[c];
        for (size_t r = 0; r < s.rows; r++)
            acc += fg_rms_dw_term(x[r * s.C + c], dy[r * s.out + s.offset + c], rstd[r]);
        dw[c] = acc;
    }
}

void cuda_rmsnorm_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                          float *y, int B) {
    RmsShape s = rms_shape(L, B);
    rms_forward_kernel<<<grid(s.rows), 256, 0, cuda_ctx(be)->stream>>>(s, p, x, y, L->eps);
    launch_check(be, "rmsnorm");
}

void cuda_rmsnorm_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                      const float *x, const float *xdot, float *ydot, int B, int K) {
    RmsShape s = rms_shape(L, B);
    rms_jvp_kernel<<<grid((size_t)K * s.rows), 256, 0, cuda_ctx(be)->stream>>>(
        s, p, pdot, L->param_count, x, xdot, ydot, L->eps, K);
    launch_check(be, "rmsnorm jvp");
}

void cuda_rmsnorm_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                           const float *dy, float *dx, float *dp, int B) {
    RmsShape s = rms_shape(L, B);
    cudaStream_t st = cuda_ctx(be)->stream;
    if (dx) {
        rms_dx_kernel<<<grid(s.rows), 256, 0, st>>>(s, p, x, dy, dx, L->eps);
        launch_check(be, "rmsnorm backward: dx");
    }
    if (!dp) return;
    const float *rstd = rstd_of(be, x, s.rows, 1, (size_t)s.C, 0, s.C, L->eps);
    rms_dw_kernel<<<grid((size_t)s.C), 256, 0, st>>>(s, x, dy, rstd, dp);
    launch_check(be, "rmsnorm backward: dw");
}

// ---------------------------------------------------------------------------------------------
// The q/k norms: each q head by q_norm, each k head by k_norm; x and v pass through.

static void qkv_pass_rest(const Backend *be, const QkvShape *s, size_t rows, const float *from,
                          float *to, const char *what) {
    size_t v_at = (size_t)qkv_head_at(s, s->H + s->Hkv);
    copy_rows(be, to, s->width, from, s->width, s->C, rows, what);
    copy_rows(be, to + v_at, s->width, from + v_at, s->width, s->width - v_at, rows, what);
}

__device__ static size_t weight_at(const QkvShape &s, int j) { return j < s.H ? 0 : (size_t)s.d; }

__global__ void qk_forward_kernel(QkvShape s, const float *w, const float *x, float *y, float eps) {
    int heads = s.H + s.Hkv;
    GRID_LOOP(v, s.rows * heads) {
        int j = (int)(v % heads);
        size_t at = v / heads * s.width + qkv_head_at(&s, j);
        fg_rms_forward(x + at, w + weight_at(s, j), s.d, eps, y + at);
    }
}

__global__ void qk_jvp_kernel(QkvShape s, const float *w, const float *pdot, size_t pstride,
                              const float *x, const float *xdot, float *ydot, float eps, int K) {
    int heads = s.H + s.Hkv;
    size_t block = s.rows * s.width, per_k = s.rows * heads;
    GRID_LOOP(v, (size_t)K * per_k) {
        size_t k = v / per_k, vr = v % per_k;
        int j = (int)(vr % heads);
        size_t at = vr / heads * s.width + qkv_head_at(&s, j);
        const float *wd = pdot ? pdot + k * pstride + weight_at(s, j) : NULL;
        fg_rms_jvp(x + at, xdot ? xdot + k * block + at : NULL, w + weight_at(s, j), wd, s.d, eps,
                   ydot + k * block + at);
    }
}

__global__ void qk_dx_kernel(QkvShape s, const float *w, const float *x, const float *dy, float *dx,
                             float eps) {
    int heads = s.H + s.Hkv;
    GRID_LOOP(v, s.rows * heads) {
        int j = (int)(v % heads);
        size_t at = v / heads * s.width + qkv_head_at(&s, j);
        fg_rms_backward_dx(x + at, w + weight_at(s, j), dy + at, s.d, eps, dx + at, 0);
    }
}

// q_norm's and k_norm's gradients: one thread per weight, rows then heads in order (the CPU's).
__global__ void qk_dw_kernel(QkvShape s, const float *x, const float *dy, const float *rstd, float *dw) {
    int heads = s.H + s.Hkv;
    GRID_LOOP(i, 2 * (size_t)s.d) {
        int c = (int)(i % s.d), first = i < (size_t)s.d ? 0 : s.H, last = i < (size_t)s.d ? s.H : heads;
        float acc = dw[i];
        for (size_t r = 0; r < s.rows; r++)
            for (int j = first; j < last; j++) {
                size_t at = r * s.width + qkv_head_at(&s, j);
                acc += fg_rms_dw_term(x[at + c], dy[at + c], rstd[r * heads + j]);
            }
        dw[i] = acc;
    }
}

void cuda_qknorm_forward(const Backend *be, const Layer *L, const float *p, const float *x,
                         float *y, int B) {
    QkvShape s = qkv_shape(L, B);
    qkv_pass_rest(be, &s, s.rows, x, y, "qk norm: x and v");
    qk_forward_kernel<<<grid(s.rows * (s.H + s.Hkv)), 256, 0, cuda_ctx(be)->stream>>>(s, p, x, y, L->eps);
    launch_check(be, "qk norm");
}

void cuda_qknorm_jvp(const Backend *be, const Layer *L, const float *p, const float *pdot,
                     const float *x, const float *xdot, float *ydot, int B, int K) {
    QkvShape s = qkv_shape(L, B);
    if (xdot) qkv_pass_rest(be, &s, (size_t)K * s.rows, xdot, ydot, "qk norm jvp: x and v");
    else zero_floats(be, ydot, (size_t)K * s.rows * s.width, "qk norm jvp: zero");
    qk_jvp_kernel<<<grid((size_t)K * s.rows * (s.H + s.Hkv)), 256, 0, cuda_ctx(be)->stream>>>(
        s, p, pdot, L->param_count, x, xdot, ydot, L->eps, K);
    launch_check(be, "qk norm jvp");
}

void cuda_qknorm_backward(const Backend *be, const Layer *L, const float *p, const float *x,
                          const float *dy, float *dx, float *dp, int B) {
    QkvShape s = qkv_shape(L, B);
    cudaStream_t st = cuda_ctx(be)->stream;
    if (dx) {
        qkv_pass_rest(be, &s, s.rows, dy, dx, "qk norm backward: x and v");
        qk_dx_kernel<<<grid(s.rows * (s.H + s.Hkv)), 256, 0, st>>>(s, p, x, dy, dx, L->eps);
        launch_check(be, "qk norm backward: dx");
    }
    if (!dp) return;
    const float *rstd = rstd_of(be, x, s.rows * (s.H + s.Hkv), s.H + s.Hkv, (size_t)s.width, s.C, s.d, L->eps);
    qk_dw_kernel<<<grid(2 * (size_t)s.d), 256, 0, st>>>(s, x, dy, rstd, dp);
    launch_check(be, "qk norm backward: dw");
}

// ---------------------------------------------------------------------------------------------
// The rotary embedding: q and k heads turned by the table's angles (sign -1: back).

__global__ void rope_kernel(QkvShape s, const float *cs, const float *x, float *y, size_t rows,
                            float sign) {
    int heads = s.H + s.Hkv, half = s.d / 2;
    GRID_LOOP(v, rows * heads) {
        size_t r = v / heads;
        const float *c = cs + (r % (size_t)s.T) * half * 2;
        size_t at = r * s.width + qkv_head_at(&s, (int)(v % heads));
        for (int i = 0; i < half; i++)
            rope_turn(x[at + i], x[at + i + half], c[2 * i], sign * c[2 * i + 1], &y[at + i],
                      &y[at + i + half]);
    }
}

static void rope_apply(const Backend *be, const Layer *L, const float *x, float *y, size_t blocks,
                       int B, float sign) {
    QkvShape s = qkv_shape(L, B);
    size_t n = (size_t)s.T * s.d;  // T x d/2 (cos, sin) pairs
    float *host = rope_table(L, s.T, s.d);
    float *cs = (float *)cuda_workspace(be, WORK_TEMP, n * sizeof(float));
    be->upload(be, cs, host, n * sizeof(float));  // read before it returns: host may go
    free(host);
    qkv_pass_rest(be, &s, blocks * s.rows, x, y, "rope: x and v");
    rope_kernel<<<grid(blocks * s.rows * (s.H + s.Hkv)), 256, 0, cuda_ctx(be)->stream>>>(
        s, cs, x, y, blocks * s.rows, sign);
    launch_check(be, "rope");
}

void cuda_rope_forward(const Backend *be, const Layer *L, const float *x, float *y, int B) {
    rope_apply(be, L, x, y, 1, B, 1.0f);
}

void cuda_rope_jvp(const Backend *be, const Layer *L, const float *xdot, float *ydot, int B, int K) {
    if (xdot) rope_apply(be, L, xdot, ydot, (size_t)K, B, 1.0f);
    else zero_floats(be, ydot, (size_t)K * B * L->out, "rope jvp: zero");
}

void cuda_rope_backward(const Backend *be, const Layer *L, const float *dy, float *dx, int B) {
    rope_apply(be, L, dy, dx, 1, B, -1.0f);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU: [x, g, u] -> [x, silu(g) u].

struct GluShape {
    size_t rows;
    int C, I, in, out;
};

static GluShape glu_shape(const Layer *L, int B) {
    GluShape s = {(size_t)B * layer_tokens(L), L->carry, 0, layer_in_token(L), layer_out_token(L)};
    s.I = s.out - s.C;
    return s;
}

__global__ void glu_forward_kernel(GluShape s, const float *x, float *y) {
    GRID_LOOP(i, s.rows * s.I) {
        size_t r = i / s.I, c = i % s.I;
        const float *g = x + r * s.in + s.C;
        y[r * s.out + s.C + c] = fg_silu(g[c]) * g[s.I + c];
    }
}

// rows: K x the tokens (the tangents' rows); x's row is the tangent row's mod `tokens`.
__global__ void glu_jvp_kernel(GluShape s, const float *x, const float *xdot, float *ydot, size_t rows) {
    GRID_LOOP(i, rows * s.I) {
        size_t item = i / s.I, c = i % s.I;
        const float *g = x + item % s.rows * s.in + s.C, *gd = xdot + item * s.in + s.C;
        ydot[item * s.out + s.C + c] = fg_silu_grad(g[c]) * gd[c] * g[s.I + c] + fg_silu(g[c]) * gd[s.I + c];
    }
}

__global__ void glu_backward_kernel(GluShape s, const float *x, const float *dy, float *dx) {
    GRID_LOOP(i, s.rows * s.I) {
        size_t r = i / s.I, c = i % s.I;
        const float *g = x + r * s.in + s.C;
        float d = dy[r * s.out + s.C + c], *dg = dx + r * s.in + s.C;
        dg[c] = d * g[s.I + c] * fg_silu_grad(g[c]);
        dg[s.I + c] = d * fg_silu(g[c]);
    }
}

void cuda_swiglu_forward(const Backend *be, const Layer *L, const float *x, float *y, int B) {
    GluShape s = glu_shape(L, B);
    copy_rows(be, y, s.out, x, s.in, s.C, s.rows, "swiglu: carry");
    glu_forward_kernel<<<grid(s.rows * s.I), 256, 0, cuda_ctx(be)->stream>>>(s, x, y);
    launch_check(be, "swiglu");
}

void cuda_swiglu_jvp(const Backend *be, const Layer *L, const float *x, const float *xdot,
                     float *ydot, int B, int K) {
    GluShape s = glu_shape(L, B);
    size_t rows = (size_t)K * s.rows;
    if (!xdot) {
        zero_floats(be, ydot, rows * s.out, "swiglu jvp: zero");
        return;
    }
    copy_rows(be, ydot, s.out, xdot, s.in, s.C, rows, "swiglu jvp: carry");
    glu_jvp_kernel<<<grid(rows * s.I), 256, 0, cuda_ctx(be)->stream>>>(s, x, xdot, ydot, rows);
    launch_check(be, "swiglu jvp");
}

void cuda_swiglu_backward(const Backend *be, const Layer *L, const float *x, const float *dy,
                          float *dx, int B) {
    GluShape s = glu_shape(L, B);
    copy_rows(be, dx, s.in, dy, s.out, s.C, s.rows, "swiglu backward: carry");
    glu_backward_kernel<<<grid(s.rows * s.I), 256, 0, cuda_ctx(be)->stream>>>(s, x, dy, dx);
    launch_check(be, "swiglu backward");
}
