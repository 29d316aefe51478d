/* Test helper for tests/tokenizer_bpe: encodes many strings in one run with a
 * byte-level BPE tokenizer, read from a tokenizer.json or built from arrays
 * as a GGUF file stores them (ra_bpe_init), and decodes each encoding back.
 *
 *   tests/tokenize_bpe_lines --json TOKENIZER.json < IN > OUT
 *   tests/tokenize_bpe_lines --arrays DIR < IN > OUT
 *
 * DIR holds tokens.hex (one token a line, as the hex of its bytes), merges.hex
 * (one "a b" merge a line, in hex) and options.txt (lines "pre NAME",
 * "bos ID", "eos ID", "add_bos 0|1", "add_eos 0|1", "special ID..."). Each
 * line of IN is one string as the hex of its bytes (an empty line is the empty
 * string); each line of OUT is its ids with BOS/EOS as the tokenizer adds them
 * (RA_BPE_ADD_SPECIAL), space separated, a tab, and the hex of decode(ids).
 * Exit 0, or 1 with one line on stderr. */
#include "hexline.h"
#include "status.h"
#include "tokenizer_bpe.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A line of F without its newline, hex-decoded: malloc'ed, or NULL at EOF. */
static char *read_hex_line(FILE *f, long *n)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t got = getline(&line, &cap, f);
    if (got < 0) {
        free(line);
        return NULL;
    }
    size_t len = (size_t)got;
    if (len > 0 && line[len - 1] == '\n')
        len--;
    *n = test_unhex(line, len);
    return line;
}

/* All lines of DIR/NAME, hex-decoded. */
static char **read_hex_file(const char *dir, const char *name, int *count)
{
    char path[4096];
    char **lines = NULL;
    long n;
    int cap = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    *count = 0;
    if (!f) {
        fprintf(stderr, "tokenize_bpe_lines: cannot open %s\n", path);
        exit(1);
    }
    for (char *line; (line = read_hex_line(f, &n));) {
        if (n < 0 || (long)strlen(line) != n) {
            fprintf(stderr, "tokenize_bpe_lines: %s: line %d is not hex without 00\n", path, *count + 1);
            exit(1);
        }
        if (*count == cap) {
            cap = cap ? 2 * cap : 1024;
            lines = realloc(lines, sizeof *lines * (size_t)cap);
        }
        lines[(*count)++] = line;
    }
    fclose(f);
    return lines;
}

static int32_t specials[1 << 16];

/* options.txt into o (the strings it points to are static). */
static void read_options(const char *dir, struct ra_bpe_options *o)
{
    static char pre[64];
    char path[4096], key[32];
    snprintf(path, sizeof path, "%s/options.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "tokenize_bpe_lines: cannot open %s\n", path);
        exit(1);
    }
    while (fscanf(f, "%31s", key) == 1) {
        int v, ok = 1;
        if (strcmp(key, "pre") == 0) {
            ok = fscanf(f, "%63s", pre) == 1;
            o->pre = pre;
        } else if (strcmp(key, "special") == 0) { /* ids up to the next key */
            while (o->n_special < (int)(sizeof specials / sizeof specials[0]) && fscanf(f, "%d", &v) == 1)
                specials[o->n_special++] = v;
            clearerr(f);
        } else if ((ok = fscanf(f, "%d", &v) == 1)) {
            if (strcmp(key, "bos") == 0)
                o->bos_id = v;
            else if (strcmp(key, "eos") == 0)
                o->eos_id = v;
            else if (strcmp(key, "add_bos") == 0)
                o->add_bos = v;
            else if (strcmp(key, "add_eos") == 0)
                o->add_eos = v;
            else
                ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "tokenize_bpe_lines: %s: bad entry %s\n", path, key);
            exit(1);
        }
    }
    o->special_ids = specials;
    fclose(f);
}

/* The tokenizer of a GGUF file, as its binding builds it: ra_bpe_init on the arrays. */
static int load_arrays(struct ra_bpe *b, const char *dir)
{
    struct ra_bpe_options o = RA_BPE_OPTIONS_INIT;
    int n_tokens, n_merges;
    char **tokens = read_hex_file(dir, "tokens.hex", &n_tokens);
    char **merges = read_hex_file(dir, "merges.hex", &n_merges);
    read_options(dir, &o);
    o.source = dir;
    int rc = ra_bpe_init(b, (const char *const *)tokens, n_tokens, (const char *const *)merges, n_merges, &o);
    for (int i = 0; i < n_tokens; i++)
        free(tokens[i]);
    for (int i = 0; i < n_merges; i++)
        free(merges[i]);
    free(tokens);
    free(merges);
    return rc;
}

/* Encodes one string, prints its ids, a tab and the hex of their decoding. */
static int encode_line(const struct ra_bpe *b, const char *text, long len)
{
    int32_t *ids = NULL;
    char *back = NULL;
    size_t back_len = 0;
    int n = 0, rc;
    if ((rc = ra_bpe_encode(b, text, (size_t)len, RA_BPE_ADD_SPECIAL, &ids, &n)) != RA_OK ||
        (rc = ra_bpe_decode(b, ids, n, &back, &back_len)) != RA_OK)
        goto cleanup;
    for (int i = 0; i < n; i++)
        printf(i ? " %d" : "%d", (int)ids[i]);
    putchar('\t');
    for (size_t i = 0; i < back_len; i++)
        printf("%02x", (unsigned char)back[i]);
    putchar('\n');
cleanup:
    free(ids);
    free(back);
    return rc;
}

int main(int argc, char **argv)
{
    struct ra_bpe b;
    long lineno = 0, len;
    int rc = 0;
    if (argc != 3 || (strcmp(argv[1], "--json") != 0 && strcmp(argv[1], "--arrays") != 0)) {
        fprintf(stderr, "usage: %s --json TOKENIZER.json | --arrays DIR < HEX-LINES\n", argv[0]);
        return 1;
    }
    if ((strcmp(argv[1], "--json") == 0 ? ra_bpe_load_json(&b, argv[2]) : load_arrays(&b, argv[2])) != RA_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], ra_error_message());
        return 1;
    }
    for (char *line; rc == 0 && (line = read_hex_line(stdin, &len)); free(line)) {
        lineno++;
        if (len < 0) {
            fprintf(stderr, "%s: line %ld: not an even number of hex digits\n", argv[0], lineno);
            rc = 1;
        } else if (encode_line(&b, line, len) != RA_OK) {
            fprintf(stderr, "%s: line %ld: %s\n", argv[0], lineno, ra_error_message());
            rc = 1;
        }
    }
    if (rc == 0 && (ferror(stdin) || fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, "%s: read or write error\n", argv[0]);
        rc = 1;
    }
    ra_bpe_free(&b);
    return rc;
}
