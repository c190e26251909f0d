// Local losses for forward gradients (config local_groups = G; docs/design.md section 4).
//
// Every hidden layer of an MLP (a linear layer and its activation) gets G fixed random linear
// classifiers, one per group of S = width / G consecutive activation outputs: group g's loss of
// a sample is the cross-entropy of its logits h_g H_g, H_g [S, C] drawn once from the seed and
// never trained. The layer learns from these losses alone (Ren, Kornblith, Liao, Hinton, 2023):
// its activity tangent stops at the heads, so a group's directional derivative has S perturbed
// values behind it instead of every activation of the network, which is what makes forward
// gradients learn. The last linear layer still learns from the model's loss.
#ifndef FGPIPE_LOCAL_LOSS_H
#define FGPIPE_LOCAL_LOSS_H

#include <stdint.h>

#include "common.h"

#define LOCAL_MAX_CLASSES 256  // classes a head can have (the config refuses more)

// The heads of one layer: head [width, C], row j the weights of unit j in its group's
// classifier, ~ N(0, 2 / S) from (seed, layer): any stage regenerates the same heads.
void local_heads_fill(uint32_t seed, int layer, int width, int groups, int classes, float *head);

// For the rows of h [rows, width] (a layer's activation output) with labels, each group's mean
// loss is returned summed over the groups; with K tangents hdot [K, rows, width] (may be NULL
// for K = 0), d[(k * rows + r) * groups + g] = the directional derivative of row r's group-g
// loss (not divided by rows) along tangent k. The heads are linear, so the derivative
// e . (hdot_g H_g), e = softmax - onehot, is taken as (H_g e) . hdot_g: one C-vector product
// per row and group instead of one per tangent. `work` holds width floats.
double local_loss_jvp(const float *head, const float *h, const float *hdot,
                      const Label *labels, int rows, int width, int groups, int classes, int K,
                      float *work, float *d);

#endif
