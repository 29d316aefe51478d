/* Picks the next token from logits: greedy, temperature, nucleus (top-p). */
#ifndef RA_SAMPLER_H
#define RA_SAMPLER_H

#include <stdint.h>

struct ra_sampler {
    int vocab_size;
    float temperature; /* 0 = greedy (argmax) */
    float top_p;       /* in (0, 1]; 1 = no truncation */
    uint64_t rng_state;
    struct ra_prob_index *scratch;
};

int ra_sampler_init(struct ra_sampler *s, int vocab_size, float temperature, float top_p, uint64_t seed);
void ra_sampler_free(struct ra_sampler *s);
/* Samples one id from logits[vocab_size] (modified in place when temperature > 0). */
int ra_sampler_sample(struct ra_sampler *s, float *logits);
int ra_argmax(const float *x, int n);

#endif
