// The GPT's head fused with its loss on the GPU (src/math/head_loss.h; the CPU's is
// head_loss.c): per block of HEAD_BLOCK_COLUMNS vocabulary columns one cuBLAS GEMM over all
// rows, then one warp per row with head_math.h's per-column formulas (the CPU's own): a lane
// takes columns lane, lane + 32, ... in order and the butterfly adds the lanes (in double, as
// the CPU's sums), so a row's sums differ from the CPU's in their last bits only, and repeat bit
// for bit. The rows' losses, hits and derivatives are summed on the host in order, as on the
// CPU. Row-major z = x W_blockᵀ is column-major zᵀ = W_block xᵀ (layers_cuda.cu's linear).
#include "cuda_internal.h"
#include "head_loss.h"
#include "head_math.h"

typedef struct {
    int rows, C, classes, block, n_blocks;
    const uint16_t *W16;  // the table's BF16 copy (Layer.params16 of a bf16 run), or NULL
} HeadShape;

static HeadShape head_shape(const Layer *L, int B) {
    HeadShape h = {B * layer_tokens(L), layer_in_token(L), L->classes, L->head_block, 0, L->params16};
    h.n_blocks = (h.classes + h.block - 1) / h.block;
    return h;
}

static int block_width(const HeadShape *h, int b) {
    return h->block < h->classes - b * h->block ? h->block : h->classes - b * h->block;
}

static int widest_block(const HeadShape *h) { return h->block < h->classes ? h->block : h->classes; }

// Rows [j0, ...) of the table W [vocab, C] as a GEMM operand, with the rows of its BF16 copy
// where the call has one (W16: Layer.params16 of a bf16 run; NULL: none, the tangents').
static GemmArg table_rows(const HeadShape *h, const float *W, const uint16_t *W16, int j0,
                          long long stride) {
    GemmArg A = {W + (size_t)j0 * h->C, h->C, stride, W16 ? W16 + (size_t)j0 * h->C : NULL};
    return A;
}

// z [rows, nb] (+)= x [rows, C] W[j0 .. j0 + nb)ᵀ for `batch` matrices (W's and z's strides).
static void block_gemm(const Backend *be, const HeadShape *h, const float *W, const uint16_t *W16,
                       long long w_stride, const float *x, int rows, int j0, int nb, float beta,
                       float *z, int batch, const char *what) {
    GemmArg A = table_rows(h, W, W16, j0, w_stride), X = {x, h->C, 0};
    cuda_gemm(be, what, CUBLAS_OP_T, CUBLAS_OP_N, nb, rows, h->C, A, X, beta, z, nb,
              (long long)rows * nb, batch);
}

// Rows (warps) per block of the row kernels.
enum { HEAD_WARPS = 8 };

static unsigned warp_row_blocks(int rows) { return (unsigned)((rows + HEAD_WARPS - 1) / HEAD_WARPS); }

static __device__ inline double warp_sum_double(double v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The block's largest logit and its column, the first on ties (fg_head_running's arg max):
// each lane's first largest in column order, then the larger, or the smaller column, by pairs.
static __device__ inline void warp_argmax(const float *z, int nb, float *value, int *column) {
    float bv = -INFINITY;
    int bj = -1;
    for (int j = threadIdx.x % 32; j < nb; j += 32)
        if (bj < 0 || z[j] > bv) bv = z[j], bj = j;
    for (int o = 16; o > 0; o /= 2) {
        float v = __shfl_xor_sync(0xffffffffu, bv, o);
        int j = __shfl_xor_sync(0xffffffffu, bj, o);
        if (j >= 0 && (bj < 0 || v > bv || (v == bv && j < bj))) bv = v, bj = j;
    }
    *value = bv, *column = bj;
}

// fg_head_running by a warp: every lane returns the new state, lane 0 stores it.
static __device__ RunningRow head_running_warp(RunningRow *run, const float *z, int j0, int nb, int label) {
    float bv;
    int bj;
    warp_argmax(z, nb, &bv, &bj);
    RunningRow s = *run;
    if (j0 == 0) {
        s.zmax = bv, s.zlabel = 0.0f, s.sum = 0.0, s.best = bj;
    } else if (bv > s.zmax) {
        s.sum *= exp((double)s.zmax - (double)bv);
        s.zmax = bv;
        s.best = j0 + bj;
    }
    double part = 0.0;
    for (int j = threadIdx.x % 32; j < nb; j += 32) part += expf(z[j] - s.zmax);
    s.sum += warp_sum_double(part);
    if (label >= j0 && label < j0 + nb) s.zlabel = z[label - j0];
    if (threadIdx.x % 32 == 0) *run = s;
    return s;
}

__global__ void head_running_kernel(RunningRow *run, const float *z, const Label *labels, int rows,
                                    int j0, int nb) {
    int r = blockIdx.x * HEAD_WARPS + threadIdx.x / 32;
    if (r < rows) head_running_warp(&run[r], z + (size_t)r * nb, j0, nb, labels[r]);
}

// out[r] = row r's loss, out[rows + r] = its hit; rec its record.
__global__ void head_record_kernel(const RunningRow *run, const Label *labels, int rows,
                                   float weight, float *rec, double *out) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    int hit;
    out[r] = fg_head_record(&run[r], labels[r], weight, rec + (size_t)r * HEAD_RECORD, &hit);
    out[rows + r] = hit;
}

// fg_head_jvp_block by a warp per row: row_d [K, rows] += sum_j (p_j - [j == label]) zd_k,j.
__global__ void head_jvp_kernel(const float *rec, const float *z, const float *zd, int rows,
                                int j0, int nb, int K, double *row_d) {
    int r = blockIdx.x * HEAD_WARPS + threadIdx.x / 32;
    if (r >= rows) return;
    int label;
    SoftmaxRow s = fg_head_row(rec + (size_t)r * HEAD_RECORD, &label);
    const float *zr = z + (size_t)r * nb;
    for (int k = 0; k < K; k++) {
        const float *zk = zd + ((size_t)k * rows + r) * nb;
        double part = 0.0;
        for (int j = threadIdx.x % 32; j < nb; j += 32) part += (double)fg_xent_grad(s, zr, label - j0, j) * zk[j];
        part = warp_sum_double(part);
        if (threadIdx.x % 32 == 0) row_d[(size_t)k * rows + r] += part;
    }
}

// dz of a block in place, a block of threads per row (no division per element).
__global__ void head_adjoint_kernel(const float *rec, int rows, int j0, int nb, float *z) {
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const float *q = rec + (size_t)r * HEAD_RECORD;
        float *zr = z + (size_t)r * nb;
        for (int j = threadIdx.x; j < nb; j += blockDim.x) zr[j] = fg_head_adjoint(q, zr[j], j0, j, rows);
    }
}

static unsigned row_blocks(int rows) { return (unsigned)((rows + 127) / 128); }

// Pass one (head_loss.c's head_pass_stats): records, and the loss and hits summed on the host;
// the last block's logits stay in z.
static float pass_stats(const Backend *be, const HeadShape *h, const float *W, const float *x,
                        const Label *labels, float weight, float *rec, float *z, int *correct) {
    cudaStream_t stream = cuda_ctx(be)->stream;
    RunningRow *run = (RunningRow *)cuda_workspace(be, WORK_HEAD_ROWS, (size_t)h->rows * sizeof(RunningRow));
    for (int b = 0; b < h->n_blocks; b++) {
        int j0 = b * h->block, nb = block_width(h, b);
        block_gemm(be, h, W, h->W16, 0, x, h->rows, j0, nb, 0.0f, z, 1, "fused head: logits");
        head_running_kernel<<<warp_row_blocks(h->rows), 32 * HEAD_WARPS, 0, stream>>>(run, z, labels, h->rows, j0, nb);
        launch_check(be, "fused head: running softmax");
    }
    double *out = cuda_partials(be, 2 * (size_t)h->rows);
    head_record_kernel<<<row_blocks(h->rows), 128, 0, stream>>>(run, labels, h->rows, weight, rec, out);
    launch_check(be, "fused head: records");
    const double *host = cuda_download_partials(be, 2 * (size_t)h->rows);
    double loss = 0.0;
    int hits = 0;
    for (int r = 0; r < h->rows; r++) loss += (float)host[r], hits += host[h->rows + r] != 0.0;
    if (correct) *correct = hits;
    return (float)(loss / h->rows);
}

float cuda_head_forward(const Backend *be, const Layer *L, const float *W, const float *x,
                        const Label *labels, int B, float weight, float *rec, int *correct) {
    HeadShape h = head_shape(L, B);
    float *z = (float *)cuda_workspace(be, WORK_HEAD_Z, (size_t)h.rows * widest_block(&h) * sizeof(float));
    return pass_stats(be, &h, W, x, labels, weight, rec, z, correct);
}

// zd [K, rows, nb] = xdot_k W_blockᵀ + x Wdot_k,blockᵀ: one GEMM over the K blocks of xdot,
// one strided batched GEMM over the K weight tangents (x shared); low-rank terms P_k At_k / sqrt(r)
// one GEMM per tangent.
static void block_tangents(const Backend *be, const Layer *L, const HeadShape *h, const float *W,
                           const HeadTangents *t, const float *x, const float *xdot, int K, int j0,
                           int nb, float *zd) {
    if (xdot) block_gemm(be, h, W, h->W16, 0, xdot, K * h->rows, j0, nb, 0.0f, zd, 1, "fused head: xdot's logits");
    else zero_floats(be, zd, (size_t)K * h->rows * nb, "fused head: zero tangents");
    if (t && t->Wdot)
        block_gemm(be, h, t->Wdot, NULL, (long long)L->param_count, x, h->rows, j0, nb, 1.0f, zd, K,
                   "fused head: Wdot's logits");
    for (int k = 0; t && t->At && k < K; k++)
        cuda_matmul(be, 0, 0, h->rows, nb, t->rank, 1.0f / sqrtf((float)t->rank),
                    t->P + (size_t)k * h->rows * t->rank, t->rank,
                    t->At + (size_t)k * t->rank * L->vocab + j0, L->vocab, 1.0f,
                    zd + (size_t)k * h->rows * nb, nb);
}


// One block (head_loss.c's jvp_one_block): the records, then d from them, the logits still in z.
static float jvp_one_block(const Backend *be, const Layer *L, const HeadShape *h, const float *W,
                           const float *x, const float *xdot, const Label *labels, int K,
                           float weight, const HeadTangents *t, float *rec, float *z, float *zd,
                           float *d) {
    cudaStream_t stream = cuda_ctx(be)->stream;
    float loss = pass_stats(be, h, W, x, labels, weight, rec, z, NULL);
    int nb = block_width(h, 0);
    block_tangents(be, L, h, W, t, x, xdot, K, 0, nb, zd);
    if (t && t->activity)
        cuda_tangent_add_columns(be, *t->activity, K, h->rows, (size_t)L->vocab, 0, nb, NULL, 0, 1, zd,
                                 (size_t)h->rows * nb);
    double *row_d = cuda_partials(be, (size_t)K * h->rows);  // after pass_stats read its own
    cuda_check(be, cudaMemsetAsync(row_d, 0, (size_t)K * h->rows * sizeof(double), stream), "fused head: zero d");
    head_jvp_kernel<<<warp_row_blocks(h->rows), 32 * HEAD_WARPS, 0, stream>>>(rec, z, zd, h->rows, 0, nb, K, row_d);
    launch_check(be, "fused head: derivatives");
    fg_head_derivatives(cuda_download_partials(be, (size_t)K * h->rows), h->rows, K, t && t->activity, d);
    return loss;
}

// fg_head_running and fg_head_running_jvp by a warp per row.
__global__ void head_online_kernel(RunningRow *run, double *S, float *zl, const float *z,
                                   const float *zd, const Label *labels, int rows, int j0, int nb,
                                   int K) {
    int r = blockIdx.x * HEAD_WARPS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *zr = z + (size_t)r * nb;
    float old = run[r].zmax;
    int label = labels[r];
    RunningRow s = head_running_warp(&run[r], zr, j0, nb, label);
    double rescale = j0 > 0 && s.zmax > old ? exp((double)old - (double)s.zmax) : 1.0;
    for (int k = 0; k < K; k++) {
        const float *zk = zd + (size_t)k * rows * nb + (size_t)r * nb;
        double part = 0.0;
        for (int j = lane; j < nb; j += 32) part += (double)expf(zr[j] - s.zmax) * zk[j];
        part = warp_sum_double(part);
        size_t at = (size_t)k * rows + r;
        if (lane == 0) S[at] = (j0 > 0 ? S[at] * rescale : 0.0) + part;
        if (lane == 0 && label >= j0 && label < j0 + nb) zl[at] = zk[label - j0];
    }
}

__global__ void head_online_d_kernel(const RunningRow *run, const double *S, const float *zl,
                                     int rows, int K, double *out) {
    size_t n = (size_t)K * rows;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = fg_head_online_d(&run[i % rows], S[i], zl[i]);
}

// More blocks (head_loss.c's jvp_online): one pass, d accumulated with the running rescaling.
static float jvp_online(const Backend *be, const Layer *L, const HeadShape *h, const float *W,
                        const float *x, const float *xdot, const Label *labels, int K,
                        float weight, const HeadTangents *t, float *rec, float *z, float *zd,
                        float *d) {
    cudaStream_t stream = cuda_ctx(be)->stream;
    size_t rows_bytes = (size_t)h->rows * sizeof(RunningRow), kr = (size_t)K * h->rows;
    char *state = (char *)cuda_workspace(be, WORK_HEAD_ROWS, rows_bytes + kr * (sizeof(double) + sizeof(float)));
    RunningRow *run = (RunningRow *)state;
    double *S = (double *)(state + rows_bytes);
    float *zl = (float *)(S + kr);
    for (int b = 0; b < h->n_blocks; b++) {
        int j0 = b * h->block, nb = block_width(h, b);
        block_gemm(be, h, W, h->W16, 0, x, h->rows, j0, nb, 0.0f, z, 1, "fused head: logits");
        block_tangents(be, L, h, W, t, x, xdot, K, j0, nb, zd);
        if (t && t->activity)
            cuda_tangent_add_columns(be, *t->activity, K, h->rows, (size_t)L->vocab, j0, nb, NULL, 0, 1, zd,
                                     (size_t)h->rows * nb);
        head_online_kernel<<<warp_row_blocks(h->rows), 32 * HEAD_WARPS, 0, stream>>>(run, S, zl, z, zd, labels,
                                                                                     h->rows, j0, nb, K);
        launch_check(be, "fused head: online softmax and derivatives");
    }
    double *out = cuda_partials(be, 2 * (size_t)h->rows + kr);
    head_record_kernel<<<row_blocks(h->rows), 128, 0, stream>>>(run, labels, h->rows, weight, rec, out);
    head_online_d_kernel<<<grid_for(kr, 128, 65535), 128, 0, stream>>>(run, S, zl, h->rows, K, out + 2 * h->rows);
    launch_check(be, "fused head: records and derivatives");
    const double *host = cuda_download_partials(be, 2 * (size_t)h->rows + kr);
    double loss = 0.0;
    for (int r = 0; r < h->rows; r++) loss += (float)host[r];
    fg_head_derivatives(host + 2 * h->rows, h->rows, K, t && t->activity, d);
    return (float)(loss / h->rows);
}

float cuda_head_jvp(const Backend *be, const Layer *L, const float *W, const float *x,
                    const float *xdot, const Label *labels, int B, int K, float weight,
                    const HeadTangents *t, float *rec, float *d) {
    HeadShape h = head_shape(L, B);
    int width = widest_block(&h);
    float *z = (float *)cuda_workspace(be, WORK_HEAD_Z, (size_t)h.rows * width * sizeof(float));
    float *zd = (float *)cuda_workspace(be, WORK_HEAD_ZD, (size_t)K * h.rows * width * sizeof(float));
    return (h.n_blocks == 1 ? jvp_one_block : jvp_online)(be, L, &h, W, x, xdot, labels, K, weight, t,
                                                          rec, z, zd, d);
}

void cuda_head_backward(const Backend *be, const Layer *L, const float *W, const float *x,
                        const float *rec, float *dx, float *dW, int B) {
    HeadShape h = head_shape(L, B);
    float *dz = (float *)cuda_workspace(be, WORK_HEAD_Z, (size_t)h.rows * widest_block(&h) * sizeof(float));
    for (int b = 0; b < h.n_blocks && (dx || dW); b++) {
        int j0 = b * h.block, nb = block_width(&h, b);
        block_gemm(be, &h, W, h.W16, 0, x, h.rows, j0, nb, 0.0f, dz, 1, "fused head backward: logits");
        head_adjoint_kernel<<<grid_for((size_t)h.rows, 1, 65535), 256, 0, cuda_ctx(be)->stream>>>(rec, h.rows, j0, nb, dz);
        launch_check(be, "fused head backward: dz");
        if (dx) {  // dxᵀ [C, rows] (+)= W_blockᵀ dzᵀ
            GemmArg A = table_rows(&h, W, h.W16, j0, 0), G = {dz, nb, 0};
            cuda_gemm(be, "fused head backward: dx", CUBLAS_OP_N, CUBLAS_OP_N, h.C, h.rows, nb, A, G,
                      b ? 1.0f : 0.0f, dx, h.C, 0, 1);
        }
        if (dW) {  // dW_blockᵀ [C, nb] += xᵀ dz
            GemmArg X = {x, h.C, 0}, G = {dz, nb, 0};
            cuda_gemm(be, "fused head backward: dW", CUBLAS_OP_N, CUBLAS_OP_T, h.C, nb, h.rows, X, G,
                      1.0f, dW + (size_t)j0 * h.C, h.C, 0, 1);
        }
    }
}

// head_loss_activity_grad on the GPU: G block by block (coeff per sample, on its token rows),
// dW_blockᵀ [C, nb] += xᵀ G.
void cuda_head_activity_grad(const Backend *be, const Layer *L, TangentKey key, int K, int n_mb,
                             int B, const float *coeff, const float *x, float *dW) {
    HeadShape h = head_shape(L, n_mb * B);
    int T = layer_tokens(L), mb_rows = B * T;
    const float *c = cuda_upload_coeff(be, coeff, (size_t)n_mb * K * B);
    float *G = (float *)cuda_workspace(be, WORK_HEAD_ZD, (size_t)h.rows * widest_block(&h) * sizeof(float));
    uint32_t mb0 = key.microbatch;
    for (int b = 0; b < h.n_blocks; b++) {
        int j0 = b * h.block, nb = block_width(&h, b);
        zero_floats(be, G, (size_t)h.rows * nb, "fused head activity: zero G");
        for (int m = 0; m < n_mb; m++) {
            key.microbatch = mb0 + (uint32_t)m;
            cuda_tangent_add_columns(be, key, K, mb_rows, (size_t)L->vocab, j0, nb, c + (size_t)m * K * B, B, T,
                                     G + (size_t)m * mb_rows * nb, 0);
        }
        GemmArg X = {x, h.C, 0}, Gb = {G, nb, 0};
        cuda_gemm(be, "fused head activity: dW", CUBLAS_OP_N, CUBLAS_OP_T, h.C, nb, h.rows, X, Gb, 1.0f,
                  dW + (size_t)j0 * h.C, h.C, 0, 1);
    }
}
