#include "cv_scale.h"

#include <math.h>
#include <stdlib.h>

#include "common.h"

void cv_scale_init(CvScale *s, int n_layers) {
    s->n_layers = n_layers;
    s->sums = fg_alloc_bytes((size_t)2 * n_layers * sizeof(double));
    s->beta = fg_alloc_floats((size_t)n_layers);
    for (int l = 0; l < n_layers; l++) s->beta[l] = 1.0f;
}

void cv_scale_free(CvScale *s) {
    fg_free(s->sums);
    fg_free(s->beta);
    *s = (CvScale){0};
}

void cv_scale_set_betas(CvScale *s) {
    const double *cov = s->sums, *var = s->sums + s->n_layers;
    for (int l = 0; l < s->n_layers; l++) {
        // A layer without parameters, or no step with a reference yet, has var 0.
        double b = var[l] > 0 ? cov[l] / var[l] : 1.0;
        s->beta[l] = (float)(b < 0 ? 0 : b > 1 ? 1 : b);
    }
}

void cv_scale_observe(CvScale *s, const float *d, const double *layer_dots, int replicas,
                      int width, int skip) {
    int L = s->n_layers;
    double *cov = s->sums, *var = s->sums + L;
    for (int l = 0; l < L; l++) {
        double step_cov = 0, step_var = 0;
        for (int r = 0; r < replicas; r++)
            for (int i = skip; i < width; i++) {
                double a = layer_dots[((size_t)r * L + l) * width + i];
                step_cov += (double)d[(size_t)r * width + i] * a;
                step_var += a * a;
            }
        cov[l] = CV_SCALE_DECAY * cov[l] + step_cov;
        var[l] = CV_SCALE_DECAY * var[l] + step_var;
    }
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double cv_scale_median(const CvScale *s) {
    float *v = fg_alloc_floats((size_t)s->n_layers);
    int n = 0;
    for (int l = 0; l < s->n_layers; l++)
        if (s->sums[s->n_layers + l] > 0) v[n++] = s->beta[l];
    qsort(v, (size_t)n, sizeof(float), cmp_float);
    double m = n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + v[n / 2]);
    fg_free(v);
    return m;
}
