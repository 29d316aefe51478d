/* The tokenizer test drivers' input (tests/tokenize_lines.c,
 * tests/tokenize_bpe_lines.c): one string per line, as hex digits, so that any
 * byte (a newline, a NUL) survives the pipe from the Python oracle. */
#ifndef RA_TEST_HEXLINE_H
#define RA_TEST_HEXLINE_H

#include <stddef.h>

static inline int test_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Decodes the hex line (len digits, no newline) in place and NUL-terminates
 * it; returns its byte count, or -1 (an odd count or a non-hex digit). */
static inline long test_unhex(char *line, size_t len)
{
    if (len % 2)
        return -1;
    for (size_t i = 0; i < len / 2; i++) {
        const int hi = test_hex_digit((unsigned char)line[2 * i]), lo = test_hex_digit((unsigned char)line[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        line[i] = (char)(hi * 16 + lo);
    }
    line[len / 2] = '\0';
    return (long)(len / 2);
}

#endif
