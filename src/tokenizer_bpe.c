/* Byte-level BPE: the tables built from a vocabulary and its merges, and
 * encoding and decoding with them (tokenizer_bpe.h). tokenizer_bpe_json.c
 * reads a Hugging Face tokenizer.json into the same tables. */
#define _GNU_SOURCE /* qsort_r */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer_bpe.h"
#include "status.h"
#include "utf8.h"

#include <limits.h>
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REGEX 2 /* regexes per pre-tokenizer */

/* ------------------------------------------------------------------ the pre-tokenizers */

/* The regexes as tokenizer.json and llama.cpp's comments write them (HF's ByteLevel for GPT-2). */
static const char re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char re_digit[] = "\\p{N}"; /* HF Digits(individual_digits=true), each digit a piece */
static const char re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char re_qwen2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct pre_kind {
    const char *names[4];      /* canonical first, then aliases, NULL-terminated */
    const char *re[MAX_REGEX]; /* applied in order */
    int n_re;
    int ignore_merges;         /* llama.cpp's default for it */
};

static const struct pre_kind pre_kinds[] = {
    { { "gpt-2", "gpt2", NULL }, { re_gpt2 }, 1, 0 },
    { { "smollm", NULL }, { re_digit, re_gpt2 }, 2, 0 },
    { { "llama-bpe", "llama3", "llama-v3", NULL }, { re_llama3 }, 1, 1 },
    { { "qwen2", NULL }, { re_qwen2 }, 1, 0 },
};
#define N_PRE_KINDS ((int)(sizeof pre_kinds / sizeof pre_kinds[0]))

static const struct pre_kind *pre_by_name(const char *name)
{
    for (int k = 0; k < N_PRE_KINDS; k++)
        for (int i = 0; pre_kinds[k].names[i]; i++)
            if (strcmp(name, pre_kinds[k].names[i]) == 0)
                return &pre_kinds[k];
    return NULL;
}

const char *ra_bpe_pre_regex(const char *pre, int i)
{
    const struct pre_kind *k = pre ? pre_by_name(pre) : NULL;
    return k && i >= 0 && i < k->n_re ? k->re[i] : NULL;
}

const char *ra_bpe_pre_find(const char *const *regexes, int n)
{
    for (int k = 0; k < N_PRE_KINDS; k++) {
        int same = pre_kinds[k].n_re == n;
        for (int i = 0; same && i < n; i++)
            same = regexes[i] && strcmp(regexes[i], pre_kinds[k].re[i]) == 0;
        if (same)
            return pre_kinds[k].names[0];
    }
    return NULL;
}

/* Oniguruma (HF's engine) reads \s as the separators (Z), U+0009..U+000D and
 * U+0085; PCRE2 with UCP adds U+180E and others. The pattern with each \s and
 * \S spelled out so both engines agree; \S inside a class has no spelling and
 * is refused (no known pattern has one). */
#define WS_CHARS "\\t-\\r\\x{85}\\p{Z}"
static int spell_whitespace(const char *re, char *out, size_t size)
{
    size_t o = 0;
    int in_class = 0;
    for (const char *p = re; *p; p++) {
        const char *put = NULL;
        char two[3] = { p[0], p[1], 0 };
        if (p[0] == '\\' && (p[1] == 's' || p[1] == 'S')) {
            if (in_class && p[1] == 'S')
                return -1;
            put = in_class ? WS_CHARS : p[1] == 's' ? "[" WS_CHARS "]" : "[^" WS_CHARS "]";
            p++;
        } else if (p[0] == '\\' && p[1]) {
            put = two; /* any other escape, \] and \[ included, as it is */
            p++;
        } else {
            if (p[0] == '[' && !in_class)
                in_class = 1;
            else if (p[0] == ']' && in_class)
                in_class = 0;
            two[1] = 0;
            put = two;
        }
        size_t n = strlen(put);
        if (o + n >= size)
            return -1;
        memcpy(out + o, put, n);
        o += n;
    }
    out[o] = '\0';
    return 0;
}

/* ------------------------------------------------------------------ the byte alphabet */

/* GPT-2's bytes_to_unicode(): printable Latin-1 stands for itself; the other
 * 68 bytes (0x00-0x20, 0x7f-0xa0, 0xad), in order, for U+0100 onwards. */
static int printable_byte(unsigned c)
{
    return (c >= 0x21 && c <= 0x7e) || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff);
}

static unsigned byte_cp(unsigned c)
{
    if (printable_byte(c))
        return c;
    if (c <= 0x20)
        return 0x100 + c;
    if (c <= 0xa0)
        return 0x100 + 33 + (c - 0x7f);
    return 0x100 + 67; /* 0xad */
}

/* The byte that code point cp stands for, or -1. */
static int cp_byte(uint32_t cp)
{
    if (cp < 0x100)
        return printable_byte(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33)
        return (int)(cp - 0x100);
    if (cp < 0x100 + 67)
        return (int)(0x7f + cp - 0x100 - 33);
    return cp == 0x100 + 67 ? 0xad : -1;
}

/* Writes cp (below U+0800) as UTF-8; returns its length. */
static size_t put_cp(char *out, unsigned cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* The UTF-8 sequence at s (n bytes available): its length, and its code point
 * in *cp, or UINT32_MAX where the byte starts no valid sequence (length 1). */
static size_t utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    const size_t len = ra_utf8_decode(s, n, cp);
    if (len)
        return len;
    *cp = UINT32_MAX;
    return 1;
}

/* Unicode White_Space (Rust's char::is_whitespace, what HF's lstrip/rstrip skip). */
static int is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

/* ------------------------------------------------------------------ tables */

struct merge_slot {
    uint32_t left, right;
    int32_t rank, id; /* rank < 0: an empty slot */
};

/* The special tokens of one matching pass, by first byte, longest first. */
struct special_set {
    int32_t *ids;
    unsigned char *flags;
    int n;
    int first[257]; /* ids[first[c] .. first[c + 1]) start with byte c */
};

struct ra_bpe_state {
    char *text;                 /* every token's stored form, then its decoded bytes */
    const char **tok;           /* [n_tokens] stored form, NULL: unused id */
    uint32_t *tok_len;
    const char **dec;           /* [n_tokens] decoded bytes */
    uint32_t *dec_len;
    unsigned char *special;     /* [n_tokens] 1: a special or added token */
    int32_t *slots;             /* stored form -> id, open addressing; -1: empty */
    uint32_t slot_mask;
    struct merge_slot *merges;  /* (left, right) -> (rank, result) */
    uint32_t merge_mask;
    int32_t byte_id[256];       /* the id of each byte's one-symbol token, -1 if none */
    struct special_set sets[2]; /* [0] special tokens, [1] added tokens that are not special */
    pcre2_code *re[MAX_REGEX];
    int n_re;
    int fuse_unk;
};

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static uint32_t hash_pair(uint32_t a, uint32_t b)
{
    return (uint32_t)(((uint64_t)a << 32 | b) * 0x9e3779b97f4a7c15ull >> 32);
}

/* A power of two at least twice count, so that probes stay short. */
static uint32_t table_size(size_t count)
{
    uint32_t n = 16;
    while (n < 2 * count)
        n *= 2;
    return n;
}

static int32_t vocab_find(const struct ra_bpe_state *s, const char *str, size_t n)
{
    for (uint32_t i = hash_bytes(str, n) & s->slot_mask;; i = (i + 1) & s->slot_mask) {
        int32_t id = s->slots[i];
        if (id < 0)
            return -1;
        if (s->tok_len[id] == n && memcmp(s->tok[id], str, n) == 0)
            return id;
    }
}

/* Adds id under its stored form; a form already there keeps its lower id. */
static void vocab_add(struct ra_bpe_state *s, int32_t id)
{
    uint32_t i = hash_bytes(s->tok[id], s->tok_len[id]) & s->slot_mask;
    for (; s->slots[i] >= 0; i = (i + 1) & s->slot_mask) {
        int32_t other = s->slots[i];
        if (s->tok_len[other] == s->tok_len[id] && memcmp(s->tok[other], s->tok[id], s->tok_len[id]) == 0)
            return;
    }
    s->slots[i] = id;
}

static const struct merge_slot *merge_find(const struct ra_bpe_state *s, int32_t left, int32_t right)
{
    for (uint32_t i = hash_pair((uint32_t)left, (uint32_t)right) & s->merge_mask;; i = (i + 1) & s->merge_mask) {
        const struct merge_slot *m = &s->merges[i];
        if (m->rank < 0)
            return NULL;
        if (m->left == (uint32_t)left && m->right == (uint32_t)right)
            return m;
    }
}

/* A pair listed twice keeps its later rank, as HF's merge map does. */
static void merge_add(struct ra_bpe_state *s, int32_t left, int32_t right, int32_t rank, int32_t id)
{
    uint32_t i = hash_pair((uint32_t)left, (uint32_t)right) & s->merge_mask;
    while (s->merges[i].rank >= 0 && !(s->merges[i].left == (uint32_t)left && s->merges[i].right == (uint32_t)right))
        i = (i + 1) & s->merge_mask;
    s->merges[i] = (struct merge_slot){ (uint32_t)left, (uint32_t)right, rank, id };
}

/* ------------------------------------------------------------------ building */

struct build {
    struct ra_bpe *b;
    struct ra_bpe_state *s;
    const char *src;           /* for messages */
    const struct ra_bpe_options *o;
};

/* Copies the tokens into one block: stored forms, then their decoded bytes. */
static int copy_tokens(struct build *B, const char *const *tokens, int n)
{
    struct ra_bpe_state *s = B->s;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!tokens[i])
            continue;
        size_t len = strnlen(tokens[i], RA_BPE_MAX_TOKEN_BYTES + 1);
        if (len > RA_BPE_MAX_TOKEN_BYTES)
            return ra_error_set(RA_ERANGE, "%s: token %d is longer than %d bytes", B->src, i, RA_BPE_MAX_TOKEN_BYTES);
        s->tok_len[i] = (uint32_t)len;
        total += 2 * (len + 1);
    }
    if (!(s->text = malloc(total ? total : 1)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %d tokens", B->src, n);
    char *p = s->text;
    for (int i = 0; i < n; i++) {
        if (!tokens[i])
            continue;
        memcpy(p, tokens[i], s->tok_len[i] + 1);
        s->tok[i] = p;
        p += s->tok_len[i] + 1;
        if (s->tok_len[i] > 0)
            vocab_add(s, i);
    }
    s->dec[0] = p; /* decode_tokens() fills the rest of the block from here */
    return RA_OK;
}

/* Each token's bytes: a special token's text as it is; any other's symbols
 * mapped back to bytes, or its own text where one is not in the alphabet. */
static void decode_tokens(struct ra_bpe_state *s, int n)
{
    char *p = (char *)s->dec[0];
    for (int i = 0; i < n; i++) {
        const unsigned char *t = (const unsigned char *)s->tok[i];
        size_t len = s->tok_len[i], o = 0;
        s->dec[i] = p;
        if (!t)
            continue;
        for (size_t k = 0; !s->special[i] && k < len;) {
            uint32_t cp;
            k += utf8_next(t + k, len - k, &cp);
            int byte = cp == UINT32_MAX ? -1 : cp_byte(cp);
            if (byte < 0) {
                o = 0;
                break;
            }
            p[o++] = (char)byte;
        }
        if (o == 0 && len > 0) { /* special, or not all in the alphabet */
            memcpy(p, t, len);
            o = len;
        }
        p[o] = '\0';
        s->dec_len[i] = (uint32_t)o;
        p += o + 1;
    }
}

static void byte_tokens(struct ra_bpe_state *s)
{
    for (unsigned c = 0; c < 256; c++) {
        char sym[2];
        size_t n = put_cp(sym, byte_cp(c));
        s->byte_id[c] = vocab_find(s, sym, n);
    }
}

/* The first bytes of s (n of them, not NUL-terminated), escaped for a message. */
static const char *esc_n(const char *s, size_t n)
{
    char head[RA_ESC_SIZE + 1];
    n = n < RA_ESC_SIZE ? n : RA_ESC_SIZE;
    memcpy(head, s, n);
    head[n] = '\0';
    return ra_esc(head);
}

/* One merge: LEFT and RIGHT (ln, rn bytes) must be tokens and so must their concatenation. */
static int add_merge(struct build *B, int rank, const char *left, size_t ln, const char *right, size_t rn)
{
    static _Thread_local char both[2 * RA_BPE_MAX_TOKEN_BYTES];
    struct ra_bpe_state *s = B->s;
    int32_t l = vocab_find(s, left, ln), r = vocab_find(s, right, rn), id = -1;
    const char *missing = l < 0 ? left : r < 0 ? right : NULL;
    size_t missing_len = l < 0 ? ln : rn;
    if (!missing) {
        memcpy(both, left, ln);
        memcpy(both + ln, right, rn);
        id = ln + rn <= RA_BPE_MAX_TOKEN_BYTES ? vocab_find(s, both, ln + rn) : -1;
        missing = id < 0 ? both : NULL;
        missing_len = ln + rn;
    }
    if (missing)
        return ra_error_set(RA_EFORMAT, "%s: merge %d ('%s' '%s'): '%s' is not in the vocabulary", B->src, rank,
                            esc_n(left, ln), esc_n(right, rn), esc_n(missing, missing_len));
    merge_add(s, l, r, rank, id);
    return RA_OK;
}

struct special {
    int32_t id;
    unsigned char flags;
};

/* By first byte, then longest first (the longest match wins), then by id. */
static int cmp_special(const void *pa, const void *pb, void *ctx)
{
    const struct ra_bpe_state *s = ctx;
    int32_t a = ((const struct special *)pa)->id, b = ((const struct special *)pb)->id;
    unsigned char fa = (unsigned char)s->tok[a][0], fb = (unsigned char)s->tok[b][0];
    if (fa != fb)
        return fa < fb ? -1 : 1;
    if (s->tok_len[a] != s->tok_len[b])
        return s->tok_len[a] > s->tok_len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* The special tokens of one pass (0: special, 1: added, RA_BPE_ADDED), sorted by cmp_special. */
static int special_set(struct build *B, struct special_set *set, int pass)
{
    const struct ra_bpe_options *o = B->o;
    struct special *all = NULL;
    int rc = RA_OK, n = 0;
    if (o->n_special > 0 && !(all = malloc(sizeof *all * (size_t)o->n_special)))
        return ra_error_set(RA_ENOMEM, "%s: out of memory for the special tokens", B->src);
    for (int i = 0; i < o->n_special; i++) {
        unsigned char f = o->special_flags ? o->special_flags[i] : 0;
        if (((f & RA_BPE_ADDED) != 0) == pass)
            all[n++] = (struct special){ o->special_ids[i], f };
    }
    if (n > 0) {
        qsort_r(all, (size_t)n, sizeof *all, cmp_special, B->s);
        set->ids = malloc(sizeof *set->ids * (size_t)n);
        set->flags = malloc((size_t)n);
        if (!set->ids || !set->flags) {
            rc = ra_error_set(RA_ENOMEM, "%s: out of memory for the special tokens", B->src);
            goto cleanup;
        }
    }
    for (int i = 0; i < n; i++)
        set->ids[i] = all[i].id, set->flags[i] = all[i].flags;
    set->n = n;
    for (int c = 0, i = 0; c <= 256; c++) {
        while (i < n && (unsigned char)B->s->tok[set->ids[i]][0] < c)
            i++;
        set->first[c] = i;
    }
cleanup:
    free(all);
    return rc;
}

/* An id given in the options: -1 (none) where allowed, else a used id. */
static int check_id(struct build *B, const char *what, int32_t id, int none_ok)
{
    if (id == -1 && none_ok)
        return RA_OK;
    if (id < 0 || id >= B->b->n_tokens)
        return ra_error_set(RA_EINVAL, "%s: %s id %d is outside the vocabulary of %d tokens", B->src, what, (int)id,
                            B->b->n_tokens);
    if (!B->s->tok[id])
        return ra_error_set(RA_EINVAL, "%s: %s id %d has no token", B->src, what, (int)id);
    return RA_OK;
}

static int check_options(struct build *B)
{
    const struct ra_bpe_options *o = B->o;
    int rc;
    if (o->n_special < 0 || o->n_special > RA_BPE_MAX_TOKENS || (o->n_special > 0 && !o->special_ids))
        return ra_error_set(RA_EINVAL, "%s: %d special tokens", B->src, o->n_special);
    for (int i = 0; i < o->n_special; i++) {
        if ((rc = check_id(B, "special token", o->special_ids[i], 0)) != RA_OK)
            return rc;
        if (B->s->tok_len[o->special_ids[i]] == 0)
            return ra_error_set(RA_EINVAL, "%s: special token %d is empty", B->src, (int)o->special_ids[i]);
        B->s->special[o->special_ids[i]] = 1;
    }
    if ((rc = check_id(B, "BOS", o->bos_id, 1)) != RA_OK || (rc = check_id(B, "EOS", o->eos_id, 1)) != RA_OK ||
        (rc = check_id(B, "unknown token", o->unk_id, 1)) != RA_OK)
        return rc;
    if (o->add_bos && o->bos_id < 0)
        return ra_error_set(RA_EINVAL, "%s: BOS is to be added but there is no BOS token", B->src);
    if (o->add_eos && o->eos_id < 0)
        return ra_error_set(RA_EINVAL, "%s: EOS is to be added but there is no EOS token", B->src);
    return RA_OK;
}

static int compile_regexes(struct build *B, const struct pre_kind *k)
{
    for (int i = 0; i < k->n_re; i++) {
        char spelled[1024];
        int err;
        PCRE2_SIZE at;
        if (spell_whitespace(k->re[i], spelled, sizeof spelled) != 0)
            return ra_error_set(RA_EUNSUPPORTED, "%s: pre-tokenizer %s: cannot rewrite its regex", B->src, k->names[0]);
        B->s->re[i] = pcre2_compile((PCRE2_SPTR)spelled, PCRE2_ZERO_TERMINATED,
                                    PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, NULL);
        if (!B->s->re[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return ra_error_set(RA_EUNSUPPORTED, "%s: pre-tokenizer %s: PCRE2 cannot compile its regex: %s", B->src,
                                k->names[0], (const char *)msg);
        }
        B->s->n_re = i + 1;
        pcre2_jit_compile(B->s->re[i], PCRE2_JIT_COMPLETE); /* the interpreter runs where JIT is absent */
    }
    return RA_OK;
}

static int alloc_state(struct build *B, int n_tokens, int n_merges)
{
    struct ra_bpe_state *s = calloc(1, sizeof *s);
    size_t n = (size_t)n_tokens;
    B->b->s = B->s = s;
    if (!s)
        return ra_error_set(RA_ENOMEM, "%s: out of memory", B->src);
    s->tok = calloc(n, sizeof *s->tok);
    s->tok_len = calloc(n, sizeof *s->tok_len);
    s->dec = calloc(n, sizeof *s->dec);
    s->dec_len = calloc(n, sizeof *s->dec_len);
    s->special = calloc(n, 1);
    s->slot_mask = table_size(n) - 1;
    s->slots = malloc(sizeof *s->slots * ((size_t)s->slot_mask + 1));
    s->merge_mask = table_size((size_t)n_merges) - 1;
    s->merges = malloc(sizeof *s->merges * ((size_t)s->merge_mask + 1));
    if (!s->tok || !s->tok_len || !s->dec || !s->dec_len || !s->special || !s->slots || !s->merges)
        return ra_error_set(RA_ENOMEM, "%s: out of memory for %d tokens and %d merges", B->src, n_tokens, n_merges);
    memset(s->slots, 0xff, sizeof *s->slots * ((size_t)s->slot_mask + 1));
    for (uint32_t i = 0; i <= s->merge_mask; i++)
        s->merges[i].rank = -1;
    return RA_OK;
}

/* Everything but the merges: counts, tokens, options, the pre-tokenizer. */
static int begin(struct build *B, const char *const *tokens, int n_tokens, int n_merges)
{
    static const struct ra_bpe_options defaults = RA_BPE_OPTIONS_INIT;
    const struct pre_kind *k;
    int rc;
    if (!B->o)
        B->o = &defaults;
    B->src = B->o->source ? B->o->source : "BPE tokenizer";
    memset(B->b, 0, sizeof *B->b);
    if (n_tokens < 1 || n_tokens > RA_BPE_MAX_TOKENS || !tokens)
        return ra_error_set(RA_ERANGE, "%s: %d tokens (1 to %d)", B->src, n_tokens, RA_BPE_MAX_TOKENS);
    if (n_merges < 1)
        return ra_error_set(RA_EFORMAT, "%s: no merges: a BPE tokenizer needs its merges", B->src);
    if (n_merges > RA_BPE_MAX_MERGES)
        return ra_error_set(RA_ERANGE, "%s: %d merges (at most %d)", B->src, n_merges, RA_BPE_MAX_MERGES);
    const char *pre = B->o->pre ? B->o->pre : "gpt-2";
    if (!(k = pre_by_name(pre)))
        return ra_error_set(RA_EUNSUPPORTED, "%s: unknown pre-tokenizer '%s' (known: gpt-2, smollm, llama-bpe, qwen2)",
                            B->src, ra_esc(pre));
    B->b->n_tokens = n_tokens;
    if ((rc = alloc_state(B, n_tokens, n_merges)) != RA_OK || (rc = copy_tokens(B, tokens, n_tokens)) != RA_OK ||
        (rc = check_options(B)) != RA_OK || (rc = special_set(B, &B->s->sets[0], 0)) != RA_OK ||
        (rc = special_set(B, &B->s->sets[1], 1)) != RA_OK || (rc = compile_regexes(B, k)) != RA_OK)
        return rc;
    decode_tokens(B->s, n_tokens);
    byte_tokens(B->s);
    struct ra_bpe *b = B->b;
    b->bos_id = B->o->bos_id, b->eos_id = B->o->eos_id, b->unk_id = B->o->unk_id;
    b->add_bos = B->o->add_bos != 0, b->add_eos = B->o->add_eos != 0;
    b->ignore_merges = B->o->ignore_merges < 0 ? k->ignore_merges : B->o->ignore_merges != 0;
    b->pre = k->names[0];
    B->s->fuse_unk = B->o->fuse_unk != 0;
    return RA_OK;
}

int ra_bpe_init(struct ra_bpe *b, const char *const *tokens, int n_tokens, const char *const *merges,
                int n_merges, const struct ra_bpe_options *o)
{
    struct build B = { .b = b, .o = o };
    int rc = begin(&B, tokens, n_tokens, n_merges);
    for (int r = 0; rc == RA_OK && r < n_merges; r++) {
        const char *m = merges ? merges[r] : NULL;
        const char *space = m && m[0] ? strchr(m + 1, ' ') : NULL;
        if (!space) {
            rc = ra_error_set(RA_EFORMAT, "%s: merge %d ('%s') is not two tokens separated by a space", B.src, r,
                              m ? ra_esc(m) : "(null)");
            break;
        }
        size_t rn = strnlen(space + 1, RA_BPE_MAX_TOKEN_BYTES + 1);
        if ((size_t)(space - m) > RA_BPE_MAX_TOKEN_BYTES || rn > RA_BPE_MAX_TOKEN_BYTES) {
            rc = ra_error_set(RA_EFORMAT, "%s: merge %d is longer than its tokens may be", B.src, r);
            break;
        }
        rc = add_merge(&B, r, m, (size_t)(space - m), space + 1, rn);
    }
    if (rc != RA_OK)
        ra_bpe_free(b);
    return rc;
}

int ra_bpe_init_pairs(struct ra_bpe *b, const char *const *tokens, int n_tokens, const char *const *pairs,
                      int n_merges, const struct ra_bpe_options *o)
{
    struct build B = { .b = b, .o = o };
    int rc = begin(&B, tokens, n_tokens, n_merges);
    for (int r = 0; rc == RA_OK && r < n_merges; r++) {
        const char *l = pairs ? pairs[2 * r] : NULL, *rt = pairs ? pairs[2 * r + 1] : NULL;
        size_t ln = l ? strnlen(l, RA_BPE_MAX_TOKEN_BYTES + 1) : 0;
        size_t rn = rt ? strnlen(rt, RA_BPE_MAX_TOKEN_BYTES + 1) : 0;
        if (ln == 0 || rn == 0 || ln > RA_BPE_MAX_TOKEN_BYTES || rn > RA_BPE_MAX_TOKEN_BYTES)
            rc = ra_error_set(RA_EFORMAT, "%s: merge %d: each side must be a token of 1 to %d bytes", B.src, r,
                              RA_BPE_MAX_TOKEN_BYTES);
        else
            rc = add_merge(&B, r, l, ln, rt, rn);
    }
    if (rc != RA_OK)
        ra_bpe_free(b);
    return rc;
}

void ra_bpe_free(struct ra_bpe *b)
{
    struct ra_bpe_state *s = b ? b->s : NULL;
    if (!s)
        return;
    for (int i = 0; i < s->n_re; i++)
        pcre2_code_free(s->re[i]);
    for (int i = 0; i < 2; i++) {
        free(s->sets[i].ids);
        free(s->sets[i].flags);
    }
    free(s->text);
    free(s->tok);
    free(s->tok_len);
    free(s->dec);
    free(s->dec_len);
    free(s->special);
    free(s->slots);
    free(s->merges);
    free(s);
    b->s = NULL;
}

/* ------------------------------------------------------------------ encoding */

struct symbol {
    int32_t id;         /* -1: merged into the symbol before it */
    int32_t prev, next; /* -1: none */
};

struct candidate {
    int32_t rank, pos, id; /* merge symbol pos with its next into id */
};

struct encoder {
    const struct ra_bpe *b;
    const struct ra_bpe_state *s;
    int32_t *out;            /* room for every byte plus BOS and EOS: no id takes less than a byte */
    int n_out;
    struct symbol *sym;      /* per piece, grown as needed */
    struct candidate *heap;  /* three per symbol: one at the start, two per merge */
    char *word;              /* the piece in the byte alphabet (ignore_merges) */
    size_t cap;              /* bytes of the longest piece they hold */
    pcre2_match_data *md[MAX_REGEX];
};

static int before(const struct candidate *a, const struct candidate *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct candidate *h, int *n, struct candidate c)
{
    int i = (*n)++;
    while (i > 0 && before(&c, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = c;
}

static struct candidate heap_pop(struct candidate *h, int *n)
{
    struct candidate top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(&h[c + 1], &h[c]))
            c++;
        if (!before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

static void push_pair(struct encoder *e, int *n_heap, int pos, int32_t left, int32_t right)
{
    const struct merge_slot *m = merge_find(e->s, left, right);
    if (m)
        heap_push(e->heap, n_heap, (struct candidate){ m->rank, pos, m->id });
}

static int grow(struct encoder *e, size_t n)
{
    if (n <= e->cap)
        return RA_OK;
    size_t cap = n < 64 ? 64 : n;
    struct symbol *sym = realloc(e->sym, sizeof *sym * cap);
    if (sym)
        e->sym = sym;
    struct candidate *heap = realloc(e->heap, sizeof *heap * 3 * cap);
    if (heap)
        e->heap = heap;
    char *word = realloc(e->word, 2 * cap);
    if (word)
        e->word = word;
    if (!sym || !heap || !word)
        return ra_error_set(RA_ENOMEM, "BPE: out of memory for a piece of %zu bytes", n);
    e->cap = cap;
    return RA_OK;
}

/* One symbol per byte: its one-character token, else the unknown token (one
 * for a run of them with fuse_unk), else nothing (HF drops it). */
static int initial_symbols(struct encoder *e, const unsigned char *p, size_t n)
{
    int m = 0, last_unknown = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = e->s->byte_id[p[i]];
        if (id < 0) {
            if (e->b->unk_id < 0 || (e->s->fuse_unk && last_unknown))
                continue;
            id = e->b->unk_id;
        }
        last_unknown = id == e->b->unk_id && e->s->byte_id[p[i]] < 0;
        e->sym[m] = (struct symbol){ id, m - 1, m + 1 };
        m++;
    }
    if (m > 0)
        e->sym[m - 1].next = -1;
    return m;
}

/* The piece as one token, where ignore_merges allows it: its id, or -1. */
static int32_t whole_token(struct encoder *e, const unsigned char *p, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += put_cp(e->word + w, byte_cp(p[i]));
    return vocab_find(e->s, e->word, w);
}

/* BPE on one piece: the lowest-ranked adjacent pair first, the leftmost of
 * equal ranks, as HF's Word::merge_all (a queue entry is stale once either of
 * its symbols has merged, which the pair's current result tells). */
static int bpe_piece(struct encoder *e, const unsigned char *p, size_t n)
{
    int rc, n_heap = 0;
    if ((rc = grow(e, n)) != RA_OK)
        return rc;
    if (e->b->ignore_merges) {
        int32_t id = whole_token(e, p, n);
        if (id >= 0) {
            e->out[e->n_out++] = id;
            return RA_OK;
        }
    }
    int m = initial_symbols(e, p, n);
    for (int i = 0; i + 1 < m; i++)
        push_pair(e, &n_heap, i, e->sym[i].id, e->sym[i + 1].id);
    while (n_heap > 0) {
        struct candidate c = heap_pop(e->heap, &n_heap);
        struct symbol *l = &e->sym[c.pos];
        if (l->id < 0 || l->next < 0)
            continue;
        struct symbol *r = &e->sym[l->next];
        const struct merge_slot *now = merge_find(e->s, l->id, r->id);
        if (!now || now->id != c.id)
            continue;
        l->id = c.id;
        r->id = -1;
        l->next = r->next;
        if (l->next >= 0)
            e->sym[l->next].prev = c.pos;
        if (l->prev >= 0)
            push_pair(e, &n_heap, l->prev, e->sym[l->prev].id, l->id);
        if (l->next >= 0)
            push_pair(e, &n_heap, c.pos, l->id, e->sym[l->next].id);
    }
    for (int i = m > 0 ? 0 : -1; i >= 0; i = e->sym[i].next)
        e->out[e->n_out++] = e->sym[i].id;
    return RA_OK;
}

/* Regex LEVEL on p[0, n) from off: 1 (a match, in md[level]), 0 (none), or an error. */
static int match(struct encoder *e, int level, const unsigned char *p, size_t n, size_t off)
{
    int rc = pcre2_match(e->s->re[level], p, n, off, 0, e->md[level], NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) /* a very long piece: the interpreter keeps its stack on the heap */
        rc = pcre2_match(e->s->re[level], p, n, off, PCRE2_NO_JIT, e->md[level], NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return ra_error_set(RA_ERANGE, "BPE pre-tokenizer %s: regex match failed at byte %zu: %s", e->b->pre, off,
                            (const char *)msg);
    }
    return 1;
}

/* Splits p[0, n) by regex LEVEL into its matches and the text between them
 * (HF's Split, "Isolated"), each split further by the next level; the pieces
 * of the last level go to BPE. The regex sees only this piece, so a lookahead
 * stops at its end as in HF. */
static int split(struct encoder *e, int level, const unsigned char *p, size_t n)
{
    size_t off = 0, gap = 0;
    int rc;
    if (n == 0)
        return RA_OK;
    if (level == e->s->n_re)
        return bpe_piece(e, p, n);
    while (off < n) {
        if ((rc = match(e, level, p, n, off)) <= 0) {
            if (rc < 0)
                return rc;
            break;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md[level]);
        size_t start = ov[0], end = ov[1];
        if (end == start) { /* an empty match: step over one character */
            uint32_t cp;
            off = start + utf8_next(p + start, n - start, &cp);
            continue;
        }
        if ((rc = split(e, level + 1, p + gap, start - gap)) != RA_OK ||
            (rc = split(e, level + 1, p + start, end - start)) != RA_OK)
            return rc;
        gap = off = end;
    }
    return split(e, level + 1, p + gap, n - gap);
}

/* The special token of SET at p (n bytes left): the longest, as its index in the set, or -1. */
static int special_at(const struct ra_bpe_state *s, const struct special_set *set, const unsigned char *p, size_t n)
{
    for (int i = set->first[p[0]]; i < set->first[p[0] + 1]; i++) {
        int32_t id = set->ids[i];
        if (s->tok_len[id] <= n && memcmp(s->tok[id], p, s->tok_len[id]) == 0)
            return i;
    }
    return -1;
}

/* Where the white space before pos ends, not before lo (lstrip). */
static size_t white_before(const unsigned char *p, size_t lo, size_t pos)
{
    while (pos > lo) {
        size_t q = pos - 1;
        uint32_t cp;
        while (q > lo && (p[q] & 0xc0) == 0x80 && pos - q < 4)
            q--;
        if (q + utf8_next(p + q, pos - q, &cp) != pos || !is_white_space(cp))
            break;
        pos = q;
    }
    return pos;
}

/* Where the white space from pos ends (rstrip). */
static size_t white_after(const unsigned char *p, size_t pos, size_t n)
{
    while (pos < n) {
        uint32_t cp;
        size_t len = utf8_next(p + pos, n - pos, &cp);
        if (!is_white_space(cp))
            break;
        pos += len;
    }
    return pos;
}

/* Pass PASS of the special tokens over p[0, n): each match becomes its id; the
 * text between goes to the next pass, the last to the pre-tokenizer. */
static int specials(struct encoder *e, int pass, const unsigned char *p, size_t n, unsigned flags)
{
    const struct special_set *set = &e->s->sets[pass < 2 ? pass : 0];
    size_t gap = 0, i = 0;
    int rc;
    if (pass == 2)
        return split(e, 0, p, n);
    if (set->n == 0 || (pass == 0 && (flags & RA_BPE_TEXT_ONLY)))
        return specials(e, pass + 1, p, n, flags);
    while (i < n) {
        int k = special_at(e->s, set, p + i, n - i);
        if (k < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = i + e->s->tok_len[set->ids[k]];
        if (set->flags[k] & RA_BPE_LSTRIP)
            start = white_before(p, gap, start);
        if (set->flags[k] & RA_BPE_RSTRIP)
            stop = white_after(p, stop, n);
        if ((rc = specials(e, pass + 1, p + gap, start - gap, flags)) != RA_OK)
            return rc;
        e->out[e->n_out++] = set->ids[k];
        gap = i = stop;
    }
    return specials(e, pass + 1, p + gap, n - gap, flags);
}

int ra_bpe_encode(const struct ra_bpe *b, const char *text, size_t len, unsigned flags, int32_t **ids,
                  int *n_ids)
{
    struct encoder e = { .b = b, .s = b->s };
    int rc = RA_OK, add = (flags & RA_BPE_ADD_SPECIAL) != 0;
    *ids = NULL;
    *n_ids = 0;
    if (!b->s)
        return ra_error_set(RA_EINVAL, "BPE: encoding with a tokenizer that is not loaded");
    if (len > INT_MAX / 2)
        return ra_error_set(RA_ERANGE, "BPE: a text of %zu bytes is too long to encode", len);
    e.out = malloc(sizeof *e.out * (len + 2));
    for (int i = 0; i < e.s->n_re; i++)
        if (!(e.md[i] = pcre2_match_data_create_from_pattern(e.s->re[i], NULL)))
            e.out = (free(e.out), NULL);
    if (!e.out) {
        rc = ra_error_set(RA_ENOMEM, "BPE: out of memory encoding %zu bytes", len);
        goto cleanup;
    }
    if (add && b->add_bos)
        e.out[e.n_out++] = b->bos_id;
    if ((rc = specials(&e, 0, (const unsigned char *)text, len, flags)) != RA_OK)
        goto cleanup;
    if (add && b->add_eos)
        e.out[e.n_out++] = b->eos_id;
    *n_ids = e.n_out;
    *ids = e.out;
    int32_t *fit = realloc(e.out, sizeof *e.out * (size_t)(e.n_out ? e.n_out : 1));
    if (fit)
        *ids = fit;
    e.out = NULL;
cleanup:
    free(e.out);
    free(e.sym);
    free(e.heap);
    free(e.word);
    for (int i = 0; i < MAX_REGEX; i++)
        pcre2_match_data_free(e.md[i]);
    return rc;
}

/* ------------------------------------------------------------------ decoding and lookups */

const char *ra_bpe_token_bytes(const struct ra_bpe *b, int32_t id, size_t *len)
{
    if (!b->s || id < 0 || id >= b->n_tokens || !b->s->tok[id])
        return NULL;
    if (len)
        *len = b->s->dec_len[id];
    return b->s->dec[id];
}

int ra_bpe_decode(const struct ra_bpe *b, const int32_t *ids, int n, char **text, size_t *len)
{
    size_t total = 0, o = 0, piece;
    *text = NULL;
    for (int i = 0; i < n; i++) {
        if (!ra_bpe_token_bytes(b, ids[i], &piece))
            return ra_error_set(RA_EINVAL, "BPE: id %d (at %d) is not a token of the vocabulary of %d", (int)ids[i],
                                i, b->n_tokens);
        total += piece;
    }
    if (!(*text = malloc(total + 1)))
        return ra_error_set(RA_ENOMEM, "BPE: out of memory decoding %d ids", n);
    for (int i = 0; i < n; i++) {
        const char *bytes = ra_bpe_token_bytes(b, ids[i], &piece);
        memcpy(*text + o, bytes, piece);
        o += piece;
    }
    (*text)[o] = '\0';
    if (len)
        *len = o;
    return RA_OK;
}

int32_t ra_bpe_token_id(const struct ra_bpe *b, const char *token)
{
    size_t n = strlen(token);
    return b->s && n > 0 ? vocab_find(b->s, token, n) : -1;
}

int ra_bpe_is_special(const struct ra_bpe *b, int32_t id)
{
    return b->s && id >= 0 && id < b->n_tokens && b->s->special[id];
}
