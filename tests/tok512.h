/* A small llama2.c tokenizer.bin for tests that need text without a fixture. */
#ifndef RA_TEST_TOK512_H
#define RA_TEST_TOK512_H

#include <stddef.h>

/* 512 pieces: <unk>, <s>, </s>, the 256 byte pieces <0xXX>, printable ASCII
 * (score -2), then two-letter pieces (score -1: merged before single letters).
 * VARIANT 1 changes piece 400's score, 2 one of its letters (another
 * vocabulary). Writes the file's bytes into BUF (TOK512_BYTES suffice) and
 * returns their count. */
#define TOK512_BYTES 8192
size_t tok512_bytes(char *buf, int variant);

#endif
