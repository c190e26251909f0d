// Token and position embedding, the GPT's first layer: a sample is `tokens` token ids (bytes,
// as floats) and its output y[t] = wte[id_t] + wpe[t], with wte [vocab, C] then wpe [tokens, C]
// in the flat buffer; with no_positions (Llama: positions enter by rotary embedding) wte only,
// y[t] = wte[id_t]. Token ids are not differentiable: tangents come from the parameters
// only, and the input adjoint is zero.
#include <string.h>

#include "embedding_rows.h"
#include "layer.h"

static size_t embedding_param_count(const Layer *L) {
    return ((size_t)L->vocab + (L->no_positions ? 0 : layer_tokens(L))) * layer_out_token(L);
}

// y [rows, C] = table rows of the ids, plus the position rows (of wte and wpe, or of their
// tangents; wpe NULL: none).
static void lookup(const Layer *L, const float *wte, const float *wpe, const float *ids, float *y,
                   int B) {
    const int T = layer_tokens(L), C = layer_out_token(L);
#pragma omp parallel for collapse(2) if ((size_t)B * T * C > 65536)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int id = (int)ids[(size_t)b * T + t];  // bytes: 0 .. vocab-1 (text_data.c)
            const float *e = wte + (size_t)id * C;
            float *yr = y + ((size_t)b * T + t) * C;
            if (!wpe) {
                memcpy(yr, e, (size_t)C * sizeof(float));
                continue;
            }
            const float *pos = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) yr[i] = e[i] + pos[i];
        }
    }
}

// The position table of a table (of the parameters or of a tangent), or NULL.
static const float *positions(const Layer *L, const float *table) {
    return L->no_positions ? NULL : table + (size_t)L->vocab * layer_out_token(L);
}

static void embedding_forward(const Layer *L, const float *p, const float *x, float *y, int B) {
    lookup(L, p, positions(L, p), x, y, B);
}

static void embedding_jvp(const Layer *L, const float *p, const float *pdot, const float *x,
                          const float *xdot, float *y, float *ydot, int B, int K) {
    (void)xdot;
    embedding_forward(L, p, x, y, B);
    size_t block = (size_t)B * L->out;
    for (int k = 0; k < K; k++) {
        if (!pdot) {
            memset(ydot + k * block, 0, block * sizeof(float));
            continue;
        }
        const float *wte_dot = pdot + k * L->param_count;
        lookup(L, wte_dot, positions(L, wte_dot), x, ydot + k * block, B);
    }
}

// dwte[id_t] += dy[t], dwpe[t] += dy[t], over the rows in order (ids repeat: no parallel
// scatter, so the sums are reproducible).
static void embedding_backward(const Layer *L, const float *p, const float *x, const float *dy,
                               float *dx, float *dp, int B) {
    (void)p;
    if (dx) memset(dx, 0, (size_t)B * L->in * sizeof(float));
    if (!dp) return;
    const int T = layer_tokens(L), C = layer_out_token(L);
    float *dwte = dp, *dwpe = dp + (size_t)L->vocab * C;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int id = (int)x[(size_t)b * T + t];
            const float *g = dy + ((size_t)b * T + t) * C;
            float *de = dwte + (size_t)id * C;
            for (int i = 0; i < C; i++) de[i] += g[i];
            for (int i = 0; !L->no_positions && i < C; i++) dwpe[(size_t)t * C + i] += g[i];
        }
    }
}

const LayerOps embedding_ops = {"embedding", embedding_param_count, embedding_forward,
                                embedding_jvp, embedding_backward};

// Rows [lo, hi) of wte that the block [r0, r0 + n) holds, and of wpe (as position indices).
static void block_rows(const Layer *L, int r0, int n, int *wte_hi, int *pos_lo, int *pos_hi) {
    int V = L->vocab, T = L->no_positions ? 0 : layer_tokens(L);
    *wte_hi = FG_MIN(r0 + n, V);
    *pos_lo = FG_MAX(r0, V) - V, *pos_hi = FG_MIN(r0 + n, V + T) - V;
}

int embedding_rows_read(const Layer *L, int r0, int n, const float *ids, int B) {
    int wte_hi, pos_lo, pos_hi;
    block_rows(L, r0, n, &wte_hi, &pos_lo, &pos_hi);
    if (r0 == 0 || pos_lo < pos_hi) return 1;
    for (size_t r = 0; r < (size_t)B * layer_tokens(L); r++)
        if ((int)ids[r] >= r0 && (int)ids[r] < wte_hi) return 1;
    return 0;
}

void embedding_rows_forward(const Layer *L, const float *P, int r0, int n, const float *ids,
                            float *y, int B) {
    const int T = layer_tokens(L), C = layer_out_token(L);
    int wte_hi, pos_lo, pos_hi;
    block_rows(L, r0, n, &wte_hi, &pos_lo, &pos_hi);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        int id = (int)ids[r], t = (int)(r % T);
        float *yr = y + r * C;
        if (id >= r0 && id < wte_hi) memcpy(yr, P + (size_t)(id - r0) * C, (size_t)C * sizeof(float));
        if (t < pos_lo || t >= pos_hi) continue;
        const float *pos = P + (size_t)(L->vocab + t - r0) * C;
        for (int i = 0; i < C; i++) yr[i] = yr[i] + pos[i];
    }
}

void embedding_rows_backward(const Layer *L, int r0, int n, const float *ids, const float *dy,
                             float *dP, int B) {
    const int T = layer_tokens(L), C = layer_out_token(L);
    int wte_hi, pos_lo, pos_hi;
    block_rows(L, r0, n, &wte_hi, &pos_lo, &pos_hi);
    for (size_t r = 0; r < (size_t)B * T; r++) {
        int id = (int)ids[r], t = (int)(r % T);
        const float *g = dy + r * C;
        if (id >= r0 && id < wte_hi) {
            float *de = dP + (size_t)(id - r0) * C;
            for (int i = 0; i < C; i++) de[i] += g[i];
        }
        if (t < pos_lo || t >= pos_hi) continue;
        float *dpos = dP + (size_t)(L->vocab + t - r0) * C;
        for (int i = 0; i < C; i++) dpos[i] += g[i];
    }
}
