/* Sampling as llama2.c does it: argmax, or temperature + top-p with an
 * xorshift generator, so a seed reproduces a run. */
#include "sampler.h"
#include "status.h"

#include <math.h>
#include <stdlib.h>

struct ra_prob_index {
    float prob;
    int index;
};

int ra_sampler_init(struct ra_sampler *s, int vocab_size, float temperature, float top_p, uint64_t seed)
{
    if (!(temperature >= 0) || !isfinite(temperature))
        return ra_error_set(RA_EINVAL, "temperature %g must be >= 0", temperature);
    if (!(top_p > 0 && top_p <= 1))
        return ra_error_set(RA_EINVAL, "top-p %g must be in (0, 1]", top_p);
    s->vocab_size = vocab_size;
    s->temperature = temperature;
    s->top_p = top_p;
    s->rng_state = seed ? seed : 0x9e3779b97f4a7c15ull; /* xorshift must not start at 0 */
    s->scratch = malloc((size_t)vocab_size * sizeof *s->scratch);
    if (!s->scratch)
        return ra_error_set(RA_ENOMEM, "sampler: out of memory");
    return RA_OK;
}

void ra_sampler_free(struct ra_sampler *s)
{
    free(s->scratch);
    s->scratch = NULL;
}

int ra_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static float random_f32(uint64_t *state)
{
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (float)((*state * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

static void softmax(float *x, int n)
{
    float mx = x[ra_argmax(x, n)], sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

/* x = softmax(x / temperature). When the largest x / temperature overflows (a
 * temperature near the smallest float), inf - inf would make every
 * probability NaN; the distribution is then, to float precision, all on the
 * argmax, which is the limit of the softmax as the temperature goes to 0. */
static void softmax_scaled(float *x, int n, float temperature)
{
    const int top = ra_argmax(x, n); /* a positive temperature keeps the order */
    if (!isfinite(x[top] / temperature) || !isfinite(x[top])) {
        for (int i = 0; i < n; i++)
            x[i] = 0.0f;
        x[top] = 1.0f;
        return;
    }
    for (int i = 0; i < n; i++)
        x[i] /= temperature;
    softmax(x, n);
}

static int sample_mult(const float *p, int n, float coin)
{
    float cdf = 0;
    for (int i = 0; i < n; i++) {
        cdf += p[i];
        if (coin < cdf)
            return i;
    }
    return n - 1;
}

static int by_prob_desc(const void *a, const void *b)
{
    const struct ra_prob_index *x = a, *y = b;
    return (x->prob < y->prob) - (x->prob > y->prob);
}

/* Nucleus sampling: the smallest set of tokens whose probability exceeds top_p. */
static int sample_top_p(const float *p, int n, float top_p, struct ra_prob_index *tmp, float coin)
{
    /* Tokens below (1-top_p)/(n-1) can never be in the nucleus: drop them before sorting. */
    const float cutoff = (1.0f - top_p) / (float)(n - 1 > 0 ? n - 1 : 1);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (p[i] >= cutoff)
            tmp[m++] = (struct ra_prob_index){ p[i], i };
    if (m == 0) /* only NaN probabilities (non-finite logits): nothing to rank */
        return ra_argmax(p, n);
    qsort(tmp, (size_t)m, sizeof *tmp, by_prob_desc);
    float cum = 0;
    int last = m - 1;
    for (int i = 0; i < m; i++) {
        cum += tmp[i].prob;
        if (cum > top_p) {
            last = i;
            break;
        }
    }
    const float r = coin * cum;
    float cdf = 0;
    for (int i = 0; i <= last; i++) {
        cdf += tmp[i].prob;
        if (r < cdf)
            return tmp[i].index;
    }
    return tmp[last].index;
}

int ra_sampler_sample(struct ra_sampler *s, float *logits)
{
    if (s->temperature == 0.0f)
        return ra_argmax(logits, s->vocab_size);
    softmax_scaled(logits, s->vocab_size, s->temperature);
    const float coin = random_f32(&s->rng_state);
    if (s->top_p >= 1.0f)
        return sample_mult(logits, s->vocab_size, coin);
    return sample_top_p(logits, s->vocab_size, s->top_p, s->scratch, coin);
}
