/* The request of the reuse benchmarks (bench-reuse, bench-reuse-chain):
 * chunks generated from a seed, and the store filled with them. */
#ifndef RA_BENCH_REQUEST_H
#define RA_BENCH_REQUEST_H

#include "ra_core.h"
#include "reuse/request.h"
#include "reuse/store.h"
#include "vocab.h"

/* The request file PATH: N_CHUNKS chunks of CHUNK_TOKENS ids and a question,
 * from SEED. With a vocabulary V the chunks are text of sentences encoded and
 * cut at that length and the question a sentence (the model's chat template
 * renders it when loaded); without, random ids below VOCAB_SIZE and a
 * question of QUESTION_TOKENS ids. Exits with a line on failure. */
void bench_write_request(const char *path, int n_chunks, int chunk_tokens, int question_tokens,
                         unsigned long long seed, const struct ra_vocab *v, int vocab_size);

/* Every chunk of REQ computed in isolation behind its prefix, where ST lacks
 * it (not timed: the benchmarks' stores are full before they measure). */
void bench_fill_store(struct ra_store *st, struct ra_context *ctx, const struct ra_request *req);

#endif
