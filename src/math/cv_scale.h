// The control variate's scale per layer, estimated online (config cv_scale = auto; docs/design.md
// section 4). cv's estimate with a scale beta_l on layer l's part of c,
//
//     g = sum_l beta_l c_l + 1/(N K) sum_{b,k} (d_{b,k} - sum_l beta_l c_l.v_{l,b,k}) v_{b,k},
//
// is unbiased for any beta that does not depend on this step's tangents. Its variance is
// smallest at beta_l = g_l.c_l / |c_l|^2 = E[d (c_l.v_l)] / E[(c_l.v_l)^2] (Gaussian tangents,
// independent across layers): estimated from moving averages of those sums over earlier steps
// only, so the estimate stays unbiased. Every rank holds the same summed d and per-layer dots,
// so every rank computes every layer's beta, with the same bits on any stage layout.
#ifndef FGPIPE_CV_SCALE_H
#define FGPIPE_CV_SCALE_H

// Each step the moving averages keep this share of their history (a memory of about 10 steps).
#define CV_SCALE_DECAY 0.9

typedef struct {
    int n_layers;
    double *sums;  // [2][n_layers]: moving averages of sum d (c_l.v_l), then of sum (c_l.v_l)^2
                   // (a checkpoint keeps them: a resumed run goes on with the same betas)
    float *beta;   // [n_layers]: this step's scales (cv_scale_set_betas)
} CvScale;

// No history: zero sums, every beta 1.
void cv_scale_init(CvScale *s, int n_layers);
void cv_scale_free(CvScale *s);

// beta[l] = clamp(cov_l / var_l, 0, 1) from the sums so far; 1 for a layer without history.
void cv_scale_set_betas(CvScale *s);

// Adds one step: d [R][width] and the per-layer reference dots layer_dots [R][n_layers][width]
// (width = Nr * K; the step's scalars), skipping the first `skip` entries of each replica's
// width (micro-batches whose exact gradient is inside c). The averages decay first.
void cv_scale_observe(CvScale *s, const float *d, const double *layer_dots, int replicas,
                      int width, int skip);

// The median of the betas of layers with history (the log's cv_beta_median); NaN if none.
double cv_scale_median(const CvScale *s);

#endif
