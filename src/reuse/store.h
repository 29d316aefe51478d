/* The chunk store: the K and V rows of text chunks, each computed in
 * isolation behind a declared leading prefix (BOS, or a rendered system
 * prompt), kept in one directory that every rank of a job can share (a
 * parallel file system in production).
 *
 * DIRECTORY. DIR/store.json names the model the store serves (its identity
 * below) and the capacity in bytes; a store of another model is refused, one
 * line naming store.json and both models. DIR/index holds one line per chunk
 * (key, bytes, last use, uses), rewritten through a temporary file under the
 * fcntl lock DIR/lock (filelock.h), so concurrent writers on several nodes
 * lose nothing. DIR/chunks/KK/KEY.rachunk holds one chunk, written through
 * outfile.h (temporary file, then rename): a reader never sees half a chunk.
 * Past the capacity, ra_store_put evicts the least recently used chunks.
 *
 * KEY. SHA-256 (OpenSSL) of the chunk's identity: the model's identity
 * (configuration and a fingerprint of every tensor), the tokenizer's (its
 * pieces; zeros for token ids without a tokenizer), the KV dtype, the RoPE
 * convention, base and scaling, the leading prefix's ids and the chunk's ids.
 * A file found under a key is used only when its header repeats that whole
 * identity, token by token: a hash collision is a miss, never another chunk.
 *
 * FILE. A header (the identity, the sizes, a SHA-256 per layer), then per
 * layer the K rows [n][kv_dim] and the V rows [n][kv_dim] in the KV dtype, K
 * after RoPE at positions n_prefix + i (where the isolated pass put them),
 * each layer at a 4 KiB boundary. Files are memory-mapped; a layer's checksum
 * is verified when the layer is read, so a corrupted file is an error naming
 * the file and the layer, never reused rows. */
#ifndef RA_REUSE_STORE_H
#define RA_REUSE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"
#include "kvcache.h"
#include "model.h"

struct ra_vocab;
struct ra_store; /* an open store */
struct ra_chunk; /* a chunk found in it: a read-only mapping */

#define RA_STORE_HASH_BYTES 32

/* The identity of what computed the rows: every chunk of a store shares it. */
struct ra_store_identity {
    uint8_t model[RA_STORE_HASH_BYTES];     /* ra_store_model_identity */
    uint8_t tokenizer[RA_STORE_HASH_BYTES]; /* ra_store_vocab_identity, or zeros */
    enum ra_dtype kv_dtype;
};

/* SHA-256 of the configuration (RoPE included) and of every tensor's dtype,
 * shape and sampled bytes (its first, middle and last 64 KiB): the same file
 * gives the same identity on every node, another model another one. */
int ra_store_model_identity(const struct ra_model *m, uint8_t out[RA_STORE_HASH_BYTES]);
/* SHA-256 of the vocabulary's pieces and scores; V NULL: zeros. */
int ra_store_vocab_identity(const struct ra_vocab *v, uint8_t out[RA_STORE_HASH_BYTES]);

/* The store's directory when --store is not given: $RA_STORE, else
 * $HOME/.cache/runahead/chunks. */
int ra_store_default_dir(char *buf, size_t len);

enum {
    RA_STORE_CREATE = 1,   /* create DIR (and its parents) and store.json when absent */
    RA_STORE_READONLY = 2, /* never write: lookups only, uses not recorded */
    RA_STORE_USES = 4,     /* a reader: READONLY where DIR cannot be written, else its
                              uses are recorded in the index (LRU) as a writer's are */
};

/* Opens the store in DIR for chunks of model M (its config gives the RoPE
 * part of every key) under identity ID. capacity: bytes, 0 keeps the
 * store's (default 16 GiB when created). Errors name DIR or the file and the
 * cause: not a store, not writable, another model's store. A writable store
 * sets SIGXFSZ to ignored where its action is the default, so that a file
 * size limit is a write error naming the chunk (EFBIG), not a kill. */
int ra_store_open(struct ra_store **st, const char *dir, const struct ra_model *m, const struct ra_store_identity *id,
                  uint64_t capacity, unsigned flags);
/* Writes the uses recorded since the last call (LRU order) to the index,
 * under the lock; ra_store_close does it too. */
int ra_store_sync(struct ra_store *st);
void ra_store_close(struct ra_store *st);
const char *ra_store_dir(const struct ra_store *st);
/* The store's capacity in bytes (store.json's, or the one given to open). */
uint64_t ra_store_capacity(const struct ra_store *st);

/* Looks up the chunk TOKENS[n] computed behind PREFIX[n_prefix]. A hit: *c
 * set (close it with ra_chunk_close), its use recorded. A miss: *c NULL and
 * RA_OK; a file under the key whose header disagrees (a collision, another
 * model's file put there) is a miss too, with one warning line on stderr
 * naming the file. Errors: an unreadable or truncated file. */
int ra_store_get(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                 struct ra_chunk **c);

/* A chunk's rows: n tokens computed at positions [n_prefix, n_prefix + n). */
int ra_chunk_tokens(const struct ra_chunk *c);
int ra_chunk_n_prefix(const struct ra_chunk *c);
const char *ra_chunk_path(const struct ra_chunk *c);
/* The chunk's key (its file's name: a variant's, not its base's). */
const uint8_t *ra_chunk_key(const struct ra_chunk *c);
size_t ra_chunk_layer_bytes(const struct ra_chunk *c); /* of K and V together */
/* Layer LAYER's K and V rows (host pointers into the mapping, the KV
 * dtype), after checking the layer's SHA-256 on first use: RA_EFORMAT naming
 * the file and the layer when it does not match. Thread-safe for distinct
 * layers (the reuse engine's loader verifies while the pass computes). */
int ra_chunk_layer(struct ra_chunk *c, int layer, const void **k, const void **v);
void ra_chunk_close(struct ra_chunk *c);

/* Stores rows [n_prefix, n_prefix + n) of every layer of KV (a cache of the
 * store's KV dtype holding PREFIX followed by TOKENS, computed causally from
 * position 0, as ra_store_add does) as the chunk TOKENS behind PREFIX: the file first,
 * then the index under the lock, then eviction past the capacity. An existing
 * chunk under the key is kept (RA_OK). KV is read through its backend. */
int ra_store_put(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                 const struct ra_kvcache *kv);

/* Computes the chunk TOKENS behind PREFIX in isolation on CTX, on a fresh
 * cache: the prefix as one span from 0, then the chunk as one span (the rows
 * equal those of that recomputation bit for bit; one span of both may differ
 * in the last bits, the kernels blocking rows differently), and puts it. For `runahead-chunks add` and
 * for misses written back after a request (--store-write). */
int ra_store_add(struct ra_store *st, struct ra_context *ctx, const int32_t *prefix, int n_prefix,
                 const int32_t *tokens, int n);

/* The index: one entry per chunk, least recently used first. */
struct ra_store_entry {
    char key[2 * RA_STORE_HASH_BYTES + 1]; /* hex */
    uint64_t bytes;
    double last_use; /* seconds since the epoch */
    uint64_t uses;
    int n_tokens, n_prefix;
    char base[2 * RA_STORE_HASH_BYTES + 1]; /* hex key of the chunk behind its leading prefix alone (a
                                             * variant's base, craft.h); "" where the index names none */
    double impact;   /* the chunk's cache-context impact in [0, 1] (craft.h); < 0: no record */
};

/* The eviction policy (ra_store_set_policy; LRU by default).
 *   RA_STORE_EVICT_LRU    the least recently used chunk first
 *   RA_STORE_EVICT_CRAFT  the chunk of least value first, value = (uses + 1) x
 *                         n_tokens x (1 - impact / 2) / bytes: the rows a hit
 *                         saves, per byte, weighed by use frequency (impact
 *                         unknown: 0); ties to the least recently used.
 * Either way the uses recorded in memory are merged into the index before a
 * put evicts, so the order follows this process's hits too. */
enum ra_store_policy { RA_STORE_EVICT_LRU = 0, RA_STORE_EVICT_CRAFT = 1 };
void ra_store_set_policy(struct ra_store *st, enum ra_store_policy policy);
/* "lru" or "craft"; RA_EINVAL naming OPT otherwise. */
int ra_store_policy_parse(const char *s, const char *opt, enum ra_store_policy *policy);

/* The key of the chunk TOKENS[n] behind PREFIX[n_prefix] in this store (the
 * file's name; a variant's base key is the one behind the leading prefix). */
int ra_store_chunk_key(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                       uint8_t out[RA_STORE_HASH_BYTES]);
/* Reads the index into a malloc'ed array (*n entries); it needs no lock (the
 * index is replaced whole by a rename), so a read-only store lists too. */
int ra_store_list(struct ra_store *st, struct ra_store_entry **entries, int *n);
/* Evicts least recently used chunks until the store holds at most
 * target_bytes; *evicted (may be NULL) counts them. */
int ra_store_evict(struct ra_store *st, uint64_t target_bytes, int *evicted);
/* Checks every chunk file (header, identity, every layer's checksum) and the
 * index against the files; each fault one line on stderr. *bad counts them. */
int ra_store_verify(struct ra_store *st, int *bad);

#endif
