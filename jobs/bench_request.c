/* The generated request of the reuse benchmarks: see bench_request.h. */
#include "bench_request.h"
#include "bench_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long long rng_next(unsigned long long *s) /* splitmix64 */
{
    unsigned long long z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static const char *const words[] = {
    "the", "river", "council", "archive", "measured", "northern", "engine", "harbour", "seven", "report",
    "village", "copper", "winter", "station", "library", "signal", "orchard", "bridge", "quiet", "mineral",
    "painter", "census", "valley", "market", "ancient", "record", "island", "tower", "garden", "machine",
    "forty", "season", "traveller", "lantern", "granite", "festival", "ledger", "canal", "meadow", "observatory",
};

/* A chunk's text of sentences of words, at least `ids` tokens' worth (a word is one or two). */
static char *chunk_text(int ids, unsigned long long *seed)
{
    const size_t cap = (size_t)ids * 16 + 64;
    char *t = malloc(cap);
    size_t len = 0;
    if (!t)
        return NULL;
    t[0] = 0;
    for (int w = 0; w < ids; w++) /* sentences of 12 words */
        len += (size_t)snprintf(t + len, cap - len, "%s%s", words[rng_next(seed) % (sizeof words / sizeof words[0])],
                                w % 12 == 11 ? ". " : " ");
    return t;
}

void bench_write_request(const char *path, int n_chunks, int chunk_tokens, int question_tokens,
                         unsigned long long seed, const struct ra_vocab *v, int vocab_size)
{
    json_t *root = json_object(), *chunks = json_array();
    for (int c = 0; c < n_chunks; c++) {
        json_t *ids = json_array();
        int32_t *enc = NULL;
        int n = 0;
        if (v) {
            char *text = chunk_text(chunk_tokens, &seed);
            int rc = text ? ra_request_encode_chunk(v, text, &enc, &n) : RA_ENOMEM;
            free(text);
            if (rc != RA_OK)
                bench_die("encoding a chunk", rc);
            if (n < chunk_tokens) {
                fprintf(stderr, "%s: a chunk's text gave %d ids, fewer than %d\n", bench_name, n, chunk_tokens);
                exit(1);
            }
        }
        for (int i = 0; i < chunk_tokens; i++)
            json_array_append_new(ids, json_integer(v ? enc[i] : (json_int_t)(rng_next(&seed) % (unsigned)vocab_size)));
        free(enc);
        json_t *chunk = json_object();
        json_object_set_new(chunk, "ids", ids);
        json_array_append_new(chunks, chunk);
    }
    json_object_set_new(root, "chunks", chunks);
    if (v) {
        json_object_set_new(root, "question", json_string("Which of the documents above mentions the observatory "
                                                          "first, and what is said about it?"));
    } else {
        json_t *q = json_object(), *ids = json_array();
        for (int i = 0; i < question_tokens; i++)
            json_array_append_new(ids, json_integer((json_int_t)(rng_next(&seed) % (unsigned)vocab_size)));
        json_object_set_new(q, "ids", ids);
        json_object_set_new(root, "question", q);
    }
    if (json_dump_file(root, path, JSON_COMPACT) != 0) {
        fprintf(stderr, "%s: cannot write the request %s\n", bench_name, path);
        exit(1);
    }
    json_decref(root);
}

void bench_fill_store(struct ra_store *st, struct ra_context *ctx, const struct ra_request *req)
{
    for (int c = 0; c < req->n_chunks; c++) {
        struct ra_chunk *ch = NULL;
        const int32_t *tok = req->ids + req->chunk_start[c];
        int rc = ra_store_get(st, req->ids, req->n_prefix, tok, req->chunk_len[c], &ch);
        if (rc == RA_OK && ch)
            ra_chunk_close(ch);
        else if (rc == RA_OK)
            rc = ra_store_add(st, ctx, req->ids, req->n_prefix, tok, req->chunk_len[c]);
        if (rc != RA_OK)
            bench_die("filling the store", rc);
    }
    if (ra_store_sync(st) != RA_OK)
        bench_die("filling the store", RA_EIO);
}
