/* The chunk store's internals, shared by its sources (store.c: open, get,
 * put; store_file.c: identities and the chunk file format; store_index.c: the
 * index, its lock, LRU and eviction; store_verify.c: the check) and by the
 * tests and the header parser's fuzz harness.
 *
 * A CHUNK FILE (little-endian):
 *   struct ra_chunk_header           fixed part, RA_CHUNK_HEADER_BYTES
 *   int32 prefix[n_prefix]            the leading prefix's ids
 *   int32 tokens[n_tokens]            the chunk's ids
 *   uint8 layer_sha[n_layers][32]     SHA-256 of each layer's K and V bytes
 *   zeros up to data_offset           a multiple of RA_CHUNK_ALIGN
 *   per layer l, at data_offset + l * layer_stride:
 *     K [n_tokens][kv_dim], V [n_tokens][kv_dim] in kv_dtype, zeros to the stride
 * The file's size is data_offset + n_layers * layer_stride exactly. */
#ifndef RA_REUSE_STORE_IMPL_H
#define RA_REUSE_STORE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "filelock.h"
#include "mapped_file.h"
#include "reuse/store.h"

#define RA_CHUNK_MAGIC "RACHUNK\0"
#define RA_CHUNK_VERSION 1
#define RA_CHUNK_ALIGN 4096
#define RA_CHUNK_HEADER_BYTES 192
/* Bounds a header must respect before any size is computed from it. */
#define RA_CHUNK_MAX_TOKENS (1 << 24)
#define RA_CHUNK_MAX_LAYERS 4096
#define RA_CHUNK_MAX_KV_DIM (1 << 20)

/* The fixed part, as read from (or to be written to) a file. */
struct ra_chunk_header {
    uint32_t version;
    uint32_t kv_dtype;  /* enum ra_dtype: f32 or bf16 */
    uint32_t n_layers, kv_dim;
    uint32_t n_prefix, n_tokens;
    uint8_t key[RA_STORE_HASH_BYTES];
    uint8_t model[RA_STORE_HASH_BYTES];
    uint8_t tokenizer[RA_STORE_HASH_BYTES];
    uint8_t rope[RA_STORE_HASH_BYTES]; /* ra_store_rope_identity */
    uint64_t data_offset, layer_stride, layer_bytes, file_bytes;
};

/* What a chunk file's header says, checked against the file's size. */
struct ra_chunk_layout {
    struct ra_chunk_header h;
    const int32_t *prefix, *tokens; /* into the bytes parsed (may be unaligned: use memcpy) */
    const uint8_t *layer_sha;       /* [n_layers][32] */
};

/* Parses the header of a chunk file of SIZE bytes at DATA: RA_EFORMAT naming
 * PATH and the fault (not a chunk file, a version, sizes that disagree with
 * each other or with the file's size, a dtype). Reads nothing past SIZE. */
int ra_chunk_parse(const uint8_t *data, size_t size, const char *path, struct ra_chunk_layout *out);

/* The bytes of a chunk file: header and ids; the caller fills the layers
 * (at h->data_offset + l * h->layer_stride) and the layer checksums. */
int ra_chunk_encode_header(const struct ra_chunk_header *h, const int32_t *prefix, const int32_t *tokens,
                           uint8_t *out);
/* Layer geometry for N tokens: sets layer_bytes, layer_stride, data_offset, file_bytes. */
void ra_chunk_geometry(struct ra_chunk_header *h);

/* SHA-256 of BYTES[n]. */
int ra_sha256(const void *bytes, size_t n, uint8_t out[RA_STORE_HASH_BYTES]);
/* SHA-256 of the RoPE convention, base and scaling of config C. */
int ra_store_rope_identity(const struct ra_config *c, uint8_t out[RA_STORE_HASH_BYTES]);
/* The key of a chunk: SHA-256 of the identity, the rope record, the prefix and the tokens. */
int ra_store_key(const struct ra_store_identity *id, const uint8_t rope[RA_STORE_HASH_BYTES], const int32_t *prefix,
                 int n_prefix, const int32_t *tokens, int n, uint8_t out[RA_STORE_HASH_BYTES]);
void ra_store_hex(const uint8_t *h, char out[2 * RA_STORE_HASH_BYTES + 1]);

/* A use recorded in memory, written by ra_store_sync. */
struct ra_store_use {
    char key[2 * RA_STORE_HASH_BYTES + 1];
    double last_use;
    uint64_t count;
};

struct ra_store {
    char *dir;
    char *lock_path, *index_path, *json_path;
    struct ra_store_identity id;
    uint8_t rope[RA_STORE_HASH_BYTES];
    int n_layers, kv_dim;
    uint64_t capacity;
    unsigned flags;
    struct ra_store_use *uses;
    int n_uses, cap_uses;
    enum ra_store_policy policy;
};

struct ra_chunk {
    struct ra_mapped_file file;
    struct ra_chunk_layout layout;
    uint8_t *verified; /* [n_layers] 1 once the layer's checksum matched */
};

/* Writes BUF to PATH through a temporary file and rename (directories made). */
int ra_store_write_file(const char *path, const uint8_t *buf, size_t bytes);
/* ra_store_put with the index entry's base key (hex, "" none) and impact (< 0 none). */
int ra_store_put_meta(struct ra_store *st, const int32_t *prefix, int n_prefix, const int32_t *tokens, int n,
                      const struct ra_kvcache *kv, const char *base, double impact);
/* Merges the uses recorded in memory into entries E[n] (the lock held). */
void ra_store_merge_uses(struct ra_store *st, struct ra_store_entry *e, int n);

/* DIR/NAME (malloc'ed; NULL: out of memory). */
char *ra_store_join(const char *dir, const char *name);
/* DIR/chunks/KK/KEY.rachunk for the hex key KEY (malloc'ed). */
char *ra_store_chunk_path(const struct ra_store *st, const char *key);
/* Maps and parses PATH; RA_OK with *c NULL when the file does not exist. */
int ra_chunk_open(const char *path, struct ra_chunk **c);
/* Whether chunk C was computed under ST's identity for PREFIX and TOKENS;
 * WHY receives what differs when it was not. */
int ra_chunk_matches(const struct ra_chunk *c, const struct ra_store *st, const int32_t *prefix, int n_prefix,
                     const int32_t *tokens, int n, char *why, size_t len);

/* The index (store_index.c). Lock: DIR/lock, for at most RA_STORE_LOCK_TIMEOUT seconds. */
#define RA_STORE_LOCK_TIMEOUT 120.0
int ra_store_lock(struct ra_store *st, struct ra_filelock *l);
/* Reads DIR/index (absent: empty) into *e, *n entries, in file order. */
int ra_store_index_read(const struct ra_store *st, struct ra_store_entry **e, int *n);
/* Writes entries through a temporary file and rename. */
int ra_store_index_write(const struct ra_store *st, const struct ra_store_entry *e, int n);
/* Under the lock: adds ENTRY (unless its key is there), then evicts least
 * recently used chunks other than it past the capacity. */
int ra_store_index_add(struct ra_store *st, const struct ra_store_entry *entry);
/* Records a use of KEY in memory. */
int ra_store_record_use(struct ra_store *st, const char *key);

#endif
