/* The llama2.c tokenizer: loading tokenizer.bin, SentencePiece BPE encoding
 * with byte fallback, and decoding.
 *
 * The encoder follows SentencePiece's bpe_model.cc rather than llama2.c's
 * run.c where the two differ: only normal pieces take part in merges (text
 * such as "<s>" or "<0x41>" never becomes a control or byte token), and merges
 * come from a priority queue (best score first, leftmost on ties), which gives
 * the same result as run.c's repeated scan in O(n log n) instead of O(n^2). */
#include "tokenizer.h"

#include "mapped_file.h"
#include "status.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A piece longer than this is not a SentencePiece token; a larger
 * max_token_length means the header is garbage. */
#define RA_TOKEN_MAX_LEN 65536
/* The text SentencePiece decodes <unk> to: U+2047 between spaces. */
#define RA_UNK_SURFACE " \xe2\x81\x87 "

struct ra_token_index {
    const char *str;
    int len;
    int id;
};

/* ------------------------------------------------------------- loading */

static int32_t read_i32(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static float read_f32(const unsigned char *p)
{
    int32_t bits = read_i32(p);
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* Walks the token records once without storing them: checks every bound and
 * counts the tokens and their bytes, so the second pass cannot fail. */
static int scan_records(const struct ra_mapped_file *f, unsigned max_len, int vocab_size,
                        int *n_tokens, size_t *n_bytes)
{
    size_t off = 4, bytes = 0;
    int n = 0;

    while (off < f->size) {
        if (vocab_size > 0 && n == vocab_size)
            return ra_error_set(RA_EFORMAT, "%s: %zu bytes follow the %d tokens the model expects",
                                f->path, f->size - off, vocab_size);
        if (n == INT_MAX)
            return ra_error_set(RA_ERANGE, "%s: more than %d tokens", f->path, INT_MAX);
        if (f->size - off < 8)
            return ra_error_set(RA_EFORMAT, "%s: truncated in the record of token %d (offset %zu)",
                                f->path, n, off);
        float score = read_f32(f->data + off);
        int32_t len = read_i32(f->data + off + 4);
        if (!isfinite(score))
            return ra_error_set(RA_EFORMAT, "%s: token %d has a non-finite score", f->path, n);
        if (len < 0)
            return ra_error_set(RA_EFORMAT, "%s: token %d has negative length %d", f->path, n,
                                (int)len);
        if ((unsigned)len > max_len)
            return ra_error_set(RA_EFORMAT, "%s: token %d has length %d > max_token_length %u",
                                f->path, n, (int)len, max_len);
        off += 8;
        if ((size_t)len > f->size - off)
            return ra_error_set(RA_EFORMAT,
                                "%s: token %d's %d bytes run past the end of the file "
                                "(offset %zu, size %zu)",
                                f->path, n, (int)len, off, f->size);
        off += (size_t)len;
        bytes += (size_t)len + 1;
        n++;
    }
    if (vocab_size > 0 && n != vocab_size)
        return ra_error_set(RA_EFORMAT, "%s: holds %d tokens, the model's vocab_size is %d",
                            f->path, n, vocab_size);
    /* Ids 0..2 are <unk>, <s>, </s> by llama2.c's convention. */
    if (n < 3)
        return ra_error_set(RA_EFORMAT, "%s: holds only %d token(s), fewer than <unk>, <s>, </s>",
                            f->path, n);
    *n_tokens = n;
    *n_bytes = bytes;
    return RA_OK;
}

/* "<0xNN>" (upper-case hex, as SentencePiece writes it) -> NN, else -1. */
static int byte_piece_value(const char *s, int len)
{
    static const char hex[] = "0123456789ABCDEF";
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    const char *hi = memchr(hex, s[3], 16), *lo = memchr(hex, s[4], 16);
    if (!hi || !lo)
        return -1;
    return (int)(hi - hex) * 16 + (int)(lo - hex);
}

static int compare_bytes(const char *a, int alen, const char *b, int blen)
{
    int c = memcmp(a, b, (size_t)(alen < blen ? alen : blen));
    if (c)
        return c;
    return (alen > blen) - (alen < blen);
}

static int compare_index(const void *pa, const void *pb)
{
    const struct ra_token_index *a = pa, *b = pb;
    int c = compare_bytes(a->str, a->len, b->str, b->len);
    return c ? c : (a->id > b->id) - (a->id < b->id);
}

/* Copies the records (already checked by scan_records) into t. */
static void fill_pieces(struct ra_tokenizer *t, const struct ra_mapped_file *f)
{
    size_t off = 4;
    char *dst = t->piece_data;

    for (int i = 0; i < t->vocab_size; i++) {
        int len = (int)read_i32(f->data + off + 4);
        t->scores[i] = read_f32(f->data + off);
        off += 8;
        memcpy(dst, f->data + off, (size_t)len);
        dst[len] = '\0';
        t->pieces[i] = dst;
        t->piece_lens[i] = len;
        dst += len + 1;
        off += (size_t)len;
    }
}

/* Byte tokens and the merge index. SentencePiece merges only into normal
 * pieces, so control, unknown and byte tokens stay out of the index. A piece
 * listed twice resolves to its lowest id (the sort is by bytes, then id). */
static void build_index(struct ra_tokenizer *t, const int *types)
{
    for (int b = 0; b < 256; b++)
        t->byte_tokens[b] = -1;
    t->n_sorted = 0;
    for (int i = 0; i < t->vocab_size; i++) {
        int b = byte_piece_value(t->pieces[i], t->piece_lens[i]);
        if (b >= 0 && t->byte_tokens[b] < 0)
            t->byte_tokens[b] = i;
        if (b >= 0 || i == t->unk_id || i == t->bos_id || i == t->eos_id || t->piece_lens[i] == 0 ||
            (types && types[i] != RA_TOKEN_NORMAL))
            continue;
        t->sorted[t->n_sorted++] = (struct ra_token_index){t->pieces[i], t->piece_lens[i], i};
    }
    qsort(t->sorted, (size_t)t->n_sorted, sizeof *t->sorted, compare_index);
}

/* The per-token arrays of N tokens and the N_BYTES their pieces take; on
 * failure what was allocated stays for ra_tokenizer_free. */
static int alloc_tables(struct ra_tokenizer *t, int n, size_t n_bytes, const char *what)
{
    t->pieces = malloc((size_t)n * sizeof *t->pieces);
    t->piece_lens = malloc((size_t)n * sizeof *t->piece_lens);
    t->scores = malloc((size_t)n * sizeof *t->scores);
    t->sorted = malloc((size_t)n * sizeof *t->sorted);
    t->piece_data = malloc(n_bytes);
    if (!t->pieces || !t->piece_lens || !t->scores || !t->sorted || !t->piece_data)
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %d tokens", what, n);
    return RA_OK;
}

int ra_tokenizer_load(struct ra_tokenizer *t, const char *path, int vocab_size)
{
    struct ra_mapped_file f = {0};
    size_t n_bytes = 0;
    int n = 0, rc;

    if (!t || !path || vocab_size < 0)
        return ra_error_set(RA_EINVAL, "ra_tokenizer_load: bad argument");
    memset(t, 0, sizeof *t);
    rc = ra_mapped_file_open(&f, path);
    if (rc)
        return rc;
    if (f.size < 4) {
        rc = ra_error_set(RA_EFORMAT, "%s: too short for a tokenizer (%zu bytes)", path, f.size);
        goto out;
    }
    int32_t max_len = read_i32(f.data);
    if (max_len <= 0 || max_len > RA_TOKEN_MAX_LEN) {
        rc = ra_error_set(RA_EFORMAT, "%s: max_token_length %d is not in [1, %d]", path,
                          (int)max_len, RA_TOKEN_MAX_LEN);
        goto out;
    }
    rc = scan_records(&f, (unsigned)max_len, vocab_size, &n, &n_bytes);
    if (rc)
        goto out;

    t->vocab_size = n;
    t->max_token_length = (unsigned)max_len;
    t->unk_id = 0, t->bos_id = 1, t->eos_id = 2;
    if ((rc = alloc_tables(t, n, n_bytes, path)) != RA_OK)
        goto out;
    fill_pieces(t, &f);
    build_index(t, NULL);
out:
    if (rc)
        ra_tokenizer_free(t);
    ra_mapped_file_close(&f);
    return rc;
}

/* Copies SRC into DST with each U+2581 as ' '; returns the length written. */
static int copy_piece(const char *src, char *dst)
{
    int n = 0;
    for (size_t i = 0; src[i]; i++) {
        if (strncmp(src + i, "\xe2\x96\x81", 3) == 0) { /* strncmp: stops at the NUL */
            dst[n++] = ' ';
            i += 2;
        } else {
            dst[n++] = src[i];
        }
    }
    dst[n] = '\0';
    return n;
}

/* Checks the arrays of ra_tokenizer_init and counts the bytes of their pieces. */
static int check_arrays(const char *source, const char *const *pieces, const float *scores, int n, int unk_id,
                        int bos_id, int eos_id, size_t *n_bytes)
{
    if (n < 1 || n > (1 << 24))
        return ra_error_set(RA_EFORMAT, "%s: %d tokens (1..%d)", source, n, 1 << 24);
    if (unk_id < 0 || unk_id >= n || bos_id < -1 || bos_id >= n || eos_id < -1 || eos_id >= n)
        return ra_error_set(RA_EFORMAT, "%s: unknown/BOS/EOS ids %d/%d/%d outside the %d tokens", source, unk_id,
                            bos_id, eos_id, n);
    *n_bytes = 0;
    for (int i = 0; i < n; i++) {
        size_t len = pieces[i] ? strlen(pieces[i]) : 0;
        if (!pieces[i] || len > RA_TOKEN_MAX_LEN)
            return ra_error_set(RA_EFORMAT, "%s: token %d is %s", source, i, pieces[i] ? "too long" : "missing");
        if (!isfinite(scores[i]))
            return ra_error_set(RA_EFORMAT, "%s: token %d has a non-finite score", source, i);
        *n_bytes += len + 1;
    }
    return RA_OK;
}

int ra_tokenizer_init(struct ra_tokenizer *t, const char *source, const char *const *pieces, const float *scores,
                      const int *types, int n, int unk_id, int bos_id, int eos_id)
{
    size_t n_bytes = 0;
    int rc;
    if (!t || !pieces || !scores)
        return ra_error_set(RA_EINVAL, "ra_tokenizer_init: bad argument");
    memset(t, 0, sizeof *t);
    source = source ? source : "SentencePiece vocabulary";
    if ((rc = check_arrays(source, pieces, scores, n, unk_id, bos_id, eos_id, &n_bytes)) != RA_OK)
        return rc;
    t->vocab_size = n;
    t->unk_id = unk_id, t->bos_id = bos_id, t->eos_id = eos_id;
    if ((rc = alloc_tables(t, n, n_bytes, source)) != RA_OK) {
        ra_tokenizer_free(t);
        return rc;
    }
    char *dst = t->piece_data;
    for (int i = 0; i < n; i++) {
        t->pieces[i] = dst;
        t->piece_lens[i] = copy_piece(pieces[i], dst);
        t->scores[i] = scores[i];
        if ((unsigned)t->piece_lens[i] > t->max_token_length)
            t->max_token_length = (unsigned)t->piece_lens[i];
        dst += t->piece_lens[i] + 1;
    }
    build_index(t, types);
    return RA_OK;
}

void ra_tokenizer_free(struct ra_tokenizer *t)
{
    if (!t)
        return;
    free(t->pieces);
    free(t->piece_lens);
    free(t->scores);
    free(t->sorted);
    free(t->piece_data);
    memset(t, 0, sizeof *t);
}

/* The id of a mergeable piece, or -1. */
static int lookup(const struct ra_tokenizer *t, const char *s, int len)
{
    int lo = 0, hi = t->n_sorted;

    if ((unsigned)len > t->max_token_length)
        return -1;
    while (lo < hi) { /* lower bound: the first entry >= s, so the lowest id */
        int mid = lo + (hi - lo) / 2;
        const struct ra_token_index *e = &t->sorted[mid];
        if (compare_bytes(e->str, e->len, s, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->n_sorted && compare_bytes(t->sorted[lo].str, t->sorted[lo].len, s, len) == 0)
        return t->sorted[lo].id;
    return -1;
}

/* ------------------------------------------------------------- encoding */

/* Length of the valid UTF-8 character at s, or 1 for an invalid byte (which
 * then falls back to its byte token on its own). */
static int utf8_char_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    int need;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 1;
    if ((size_t)need >= avail)
        return 1;
    if (s[1] < lo || s[1] > hi) /* overlong, surrogate or above U+10FFFF */
        return 1;
    for (int i = 2; i <= need; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 1;
    return need + 1;
}

/* SentencePiece's normalization for Llama 2 (identity rules): a leading space
 * (the dummy prefix) when the text is non-empty, and U+2581, SentencePiece's
 * own space symbol, read as a space. Returns the length written to out. */
static size_t normalize(const char *text, size_t len, int prefix, char *out)
{
    size_t n = 0;

    if (len == 0)
        return 0;
    if (prefix)
        out[n++] = ' ';
    for (size_t i = 0; i < len; i++) {
        if (len - i >= 3 && memcmp(text + i, "\xe2\x96\x81", 3) == 0) {
            out[n++] = ' ';
            i += 2;
        } else {
            out[n++] = text[i];
        }
    }
    return n;
}

struct symbol {
    int start, len; /* bytes of the normalized text; len 0 once merged away */
    int prev, next;
};

struct merge {
    float score;
    int left, right;
    int len; /* the merged length, to tell a stale entry */
};

struct agenda {
    struct merge *heap;
    int n;
};

/* SentencePiece's order: best score first, then leftmost. */
static int merge_before(const struct merge *a, const struct merge *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void agenda_push(struct agenda *q, struct merge m)
{
    int i = q->n++;
    while (i > 0 && merge_before(&m, &q->heap[(i - 1) / 2])) {
        q->heap[i] = q->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->heap[i] = m;
}

static struct merge agenda_pop(struct agenda *q)
{
    struct merge top = q->heap[0], last = q->heap[--q->n];
    int i = 0;

    for (;;) {
        int c = 2 * i + 1;
        if (c >= q->n)
            break;
        if (c + 1 < q->n && merge_before(&q->heap[c + 1], &q->heap[c]))
            c++;
        if (!merge_before(&q->heap[c], &last))
            break;
        q->heap[i] = q->heap[c];
        i = c;
    }
    if (q->n > 0)
        q->heap[i] = last;
    return top;
}

/* Queues the merge of symbols left and right if their concatenation is a piece. */
static void propose(const struct ra_tokenizer *t, const char *text, const struct symbol *sym,
                    struct agenda *q, int left, int right)
{
    if (left < 0 || right < 0)
        return;
    int len = sym[left].len + sym[right].len;
    int id = lookup(t, text + sym[left].start, len);
    if (id >= 0)
        agenda_push(q, (struct merge){t->scores[id], left, right, len});
}

/* Merges the best-scoring adjacent pair until no pair is a piece. Entries made
 * stale by an earlier merge are recognised by their length and skipped: a
 * symbol only grows, and a merged-away symbol has length 0. */
static void merge_all(const struct ra_tokenizer *t, const char *text, struct symbol *sym,
                      int n_sym, struct agenda *q)
{
    for (int i = 1; i < n_sym; i++)
        propose(t, text, sym, q, i - 1, i);
    while (q->n > 0) {
        struct merge m = agenda_pop(q);
        struct symbol *l = &sym[m.left], *r = &sym[m.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != m.len)
            continue;
        l->len += r->len;
        l->next = r->next;
        if (r->next >= 0)
            sym[r->next].prev = m.left;
        r->len = 0;
        propose(t, text, sym, q, l->prev, m.left);
        propose(t, text, sym, q, m.left, l->next);
    }
}

/* Splits normalized text into one symbol per character. */
static int split_chars(const char *text, size_t len, struct symbol *sym)
{
    int n = 0;

    for (size_t i = 0; i < len; n++) {
        int cl = utf8_char_len((const unsigned char *)text + i, len - i);
        sym[n] = (struct symbol){(int)i, cl, n - 1, -1};
        if (n > 0)
            sym[n - 1].next = n;
        i += (size_t)cl;
    }
    return n;
}

/* Appends the ids of the final symbols; a symbol that is not a piece (an
 * unknown character) becomes one byte token per UTF-8 byte. */
static int emit_ids(const struct ra_tokenizer *t, const char *text, const struct symbol *sym,
                    int n_sym, int32_t *out)
{
    int n = 0;

    for (int i = n_sym > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int id = lookup(t, text + sym[i].start, sym[i].len);
        if (id >= 0) {
            out[n++] = id;
            continue;
        }
        for (int k = 0; k < sym[i].len; k++) {
            int b = (unsigned char)text[sym[i].start + k];
            out[n++] = t->byte_tokens[b] >= 0 ? t->byte_tokens[b] : t->unk_id;
        }
    }
    return n;
}

int ra_tokenizer_encode(const struct ra_tokenizer *t, const char *text, int add_bos,
                        int32_t **ids, int *n_ids)
{
    char *norm = NULL;
    struct symbol *sym = NULL;
    struct agenda q = {0};
    int32_t *out = NULL;
    int rc = RA_OK;

    if (!t || !t->sorted || !text || !ids || !n_ids)
        return ra_error_set(RA_EINVAL, "ra_tokenizer_encode: bad argument");
    *ids = NULL;
    *n_ids = 0;
    size_t len = strlen(text);
    /* Symbols and the heap are indexed by int; three entries per character bound the heap. */
    if (len > (size_t)INT_MAX / 4) {
        return ra_error_set(RA_ERANGE, "ra_tokenizer_encode: text of %zu bytes is too long", len);
    }
    norm = malloc(len + 1);
    sym = malloc((len + 1) * sizeof *sym);
    q.heap = malloc((3 * len + 3) * sizeof *q.heap);
    out = malloc((len + 2) * sizeof *out);
    if (!norm || !sym || !q.heap || !out) {
        rc = ra_error_set(RA_ENOMEM, "ra_tokenizer_encode: out of memory for %zu bytes", len);
        goto out;
    }
    size_t nlen = normalize(text, len, !t->no_dummy_prefix, norm);
    int n_sym = split_chars(norm, nlen, sym);
    merge_all(t, norm, sym, n_sym, &q);
    int n = 0;
    if (add_bos)
        out[n++] = t->bos_id;
    n += emit_ids(t, norm, sym, n_sym, out + n);
    *ids = out;
    *n_ids = n;
    out = NULL;
out:
    free(norm);
    free(sym);
    free(q.heap);
    free(out);
    return rc;
}

/* ------------------------------------------------------------- decoding */

/* The bytes of token id after prev (see ra_tokenizer_piece); *len may count a NUL byte. */
static const char *piece_bytes(const struct ra_tokenizer *t, int prev, int id, char byte_buf[2],
                               int *len)
{
    *len = 0;
    if (id < 0 || id >= t->vocab_size || id == t->bos_id || id == t->eos_id)
        return "";
    if (id == t->unk_id) {
        *len = (int)strlen(RA_UNK_SURFACE);
        return RA_UNK_SURFACE;
    }
    const char *p = t->pieces[id];
    int n = t->piece_lens[id];
    int b = byte_piece_value(p, n);
    if (b >= 0) {
        byte_buf[0] = (char)b;
        byte_buf[1] = '\0';
        *len = 1;
        return byte_buf;
    }
    /* The dummy prefix SentencePiece added before the first piece. */
    if (!t->no_dummy_prefix && (prev < 0 || prev == t->bos_id) && n > 0 && p[0] == ' ')
        p++, n--;
    *len = n;
    return p;
}

const char *ra_tokenizer_piece(const struct ra_tokenizer *t, int prev, int id, char byte_buf[2])
{
    int len;
    return t ? piece_bytes(t, prev, id, byte_buf, &len) : "";
}

int ra_tokenizer_decode(const struct ra_tokenizer *t, const int32_t *ids, int n, char **text)
{
    char byte_buf[2];
    size_t total = 1;
    int len;

    if (!t || (!ids && n > 0) || n < 0 || !text)
        return ra_error_set(RA_EINVAL, "ra_tokenizer_decode: bad argument");
    *text = NULL;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return ra_error_set(RA_ERANGE, "token id %d at position %d is outside the vocabulary "
                                "of %d tokens", (int)ids[i], i, t->vocab_size);
        total += (size_t)t->piece_lens[ids[i]] + strlen(RA_UNK_SURFACE);
    }
    char *s = malloc(total), *dst = s;
    if (!s)
        return ra_error_set(RA_ENOMEM, "ra_tokenizer_decode: out of memory for %d tokens", n);
    /* Like SentencePiece, strip the dummy prefix from the first token that is
     * not BOS/EOS, wherever BOS is. */
    int prev = -1;
    for (int i = 0; i < n; i++) {
        const char *p = piece_bytes(t, prev, ids[i], byte_buf, &len);
        memcpy(dst, p, (size_t)len);
        dst += len;
        if (ids[i] != t->bos_id && ids[i] != t->eos_id)
            prev = ids[i];
    }
    *dst = '\0';
    *text = s;
    return RA_OK;
}
