/* Picking the next token on the device (decode): greedy argmax, or
 * temperature + top-p exactly as ra_sampler_sample (src/sampler.c) does it,
 * with the random draw ("coin") taken on the host by the caller so that a
 * seed gives the same tokens on both backends. */
#ifndef RA_CUDA_SAMPLING_CUH
#define RA_CUDA_SAMPLING_CUH

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

struct ra_cuda_sampler;

/* Device scratch for a vocabulary of VOCAB ids (on the current device). */
int ra_cuda_sampler_init(struct ra_cuda_sampler **out, int vocab);
void ra_cuda_sampler_free(struct ra_cuda_sampler *s);

/* *token = the id sampled from device LOGITS[vocab] (left unchanged):
 * temperature 0 takes the first largest logit; otherwise softmax(logits /
 * temperature), then the nucleus of probability top_p (1: all ids) and COIN
 * in [0, 1) pick one. Waits for STREAM. */
int ra_cuda_sample(struct ra_cuda_sampler *s, const float *logits, float temperature, float top_p, float coin,
                   cudaStream_t stream, int *token);

#ifdef __cplusplus
}
#endif
#endif
