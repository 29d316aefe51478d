/* Test helper for tests/tokenizer_sentencepiece: encodes many strings in one
 * run, as runahead --tokenize-only encodes a prompt (BOS first).
 *
 *   tests/tokenize_lines TOKENIZER.bin < IN > OUT
 *
 * Each line of IN is one string written as the hex digits of its UTF-8 bytes
 * (an empty line is the empty string), so a string may hold newlines, tabs and
 * any bytes but NUL, which a C string cannot carry. Each line of OUT is that
 * string's ids, space separated. Exit 0, or 1 with one line on stderr. */
#include "hexline.h"
#include "status.h"
#include "tokenizer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    struct ra_tokenizer tok;
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    long lineno = 0;
    int rc = 0;

    if (argc != 2) {
        fprintf(stderr, "usage: %s TOKENIZER.bin < HEX-LINES\n", argv[0]);
        return 1;
    }
    if (ra_tokenizer_load(&tok, argv[1], 0) != RA_OK) {
        fprintf(stderr, "%s: %s\n", argv[0], ra_error_message());
        return 1;
    }
    while ((got = getline(&line, &cap, stdin)) >= 0) {
        size_t len = (size_t)got;
        int32_t *ids = NULL;
        int n = 0;

        lineno++;
        if (len > 0 && line[len - 1] == '\n')
            len--;
        const long bytes = test_unhex(line, len);
        if (bytes < 0 || memchr(line, '\0', (size_t)bytes)) { /* SentencePiece text has no NUL */
            fprintf(stderr, "%s: line %ld: not an even number of hex digits without 00\n", argv[0],
                    lineno);
            rc = 1;
            break;
        }
        if (ra_tokenizer_encode(&tok, line, 1, &ids, &n) != RA_OK) {
            fprintf(stderr, "%s: line %ld: %s\n", argv[0], lineno, ra_error_message());
            rc = 1;
            break;
        }
        for (int i = 0; i < n; i++)
            printf(i ? " %d" : "%d", (int)ids[i]);
        putchar('\n');
        free(ids);
    }
    if (rc == 0 && (ferror(stdin) || fflush(stdout) != 0 || ferror(stdout))) {
        fprintf(stderr, "%s: read or write error\n", argv[0]);
        rc = 1;
    }
    free(line);
    ra_tokenizer_free(&tok);
    return rc;
}
