/* Prompt input: token id lists and files. */
#ifndef RA_PROMPT_H
#define RA_PROMPT_H

#include <stddef.h>
#include <stdint.h>

/* Parses whitespace- or comma-separated decimal ids ("1 2 3") into a malloc'ed
 * array; `what` names the source in errors. An empty list is an error. */
int ra_prompt_parse_ids(const char *text, const char *what, int32_t **ids, int *n);

/* Reads a whole file into a malloc'ed NUL-terminated buffer. */
int ra_read_file(const char *path, char **data, size_t *size);

#endif
