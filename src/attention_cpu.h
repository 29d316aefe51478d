#ifndef RA_ATTENTION_CPU_H
#define RA_ATTENTION_CPU_H

#include "backend.h"

#define RA_ATTN_MAX_HEAD_DIM 256

/* Causal attention on host buffers; see ra_backend_ops.attention. */
int ra_attention_cpu(float *out, const float *q, const float *k_cache, const float *v_cache,
                     int start, int n, const struct ra_attention_shape *s, int n_threads);

#endif
