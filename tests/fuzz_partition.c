/* Fuzz harness: partition specs (partition/partition.c). Input: byte 0 is
 * the rank count P as a signed byte, bytes 1..4 the prompt length (signed,
 * little-endian), byte 5 the size of a short output buffer, the rest the spec
 * ("even", "ratios:...", "bounds:..."; cut at a NUL byte). A spec must be
 * refused with one error line (unless it holds a newline itself: the message
 * quotes it), or give P+1 boundaries from 0 to the prompt
 * length, strictly increasing, that ra_partition_format writes out and
 * "bounds:" reads back unchanged; formatting into a short buffer must stay in
 * it and write a prefix of the full text.
 * Seeds: tests/corpus/partition/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "partition.h"
#include "status.h"

#include <stdlib.h>
#include <string.h>

#define HEADER 6

static void check_bounds(const int *b, int p, int n)
{
    if (b[0] != 0 || b[p] != n)
        fuzz_fail("boundaries run from %d to %d, not 0 to %d", b[0], b[p], n);
    for (int r = 0; r < p; r++)
        if (b[r + 1] <= b[r])
            fuzz_fail("rank %d gets the empty slice [%d, %d)", r, b[r], b[r + 1]);
}

/* ra_partition_format, then "bounds:" of its text, gives the same boundaries. */
static void check_round_trip(const int *b, int p, int n, int short_len)
{
    size_t len = 12 * (size_t)(p + 1) + 8;
    char *text = malloc(len), *spec = malloc(len + 7), *cut = malloc((size_t)short_len);
    int *again = malloc(sizeof *again * (size_t)(p + 1));

    ra_partition_format(b, p, text, (int)len);
    strcpy(spec, "bounds:");
    strcat(spec, text);
    if (ra_partition_parse(spec, n, p, again) != RA_OK || memcmp(b, again, sizeof *again * (size_t)(p + 1)))
        fuzz_fail("'%s' does not read back as the boundaries it was formatted from", spec);
    ra_partition_format(b, p, cut, short_len);
    if (!memchr(cut, '\0', (size_t)short_len) || strncmp(cut, text, strlen(cut)) != 0)
        fuzz_fail("formatting into %d bytes did not write a prefix of '%s'", short_len, text);
    free(again);
    free(cut);
    free(spec);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER)
        return 0;
    int p = (int8_t)data[0], short_len = 1 + data[5] % 32;
    int32_t n;
    memcpy(&n, data + 1, sizeof n);
    size_t len = strnlen((const char *)data + HEADER, size - HEADER);
    char *spec = malloc(len + 1);
    memcpy(spec, data + HEADER, len);
    spec[len] = '\0';
    int *bounds = p > 0 ? malloc(sizeof *bounds * (size_t)(p + 1)) : NULL;

    if (ra_partition_parse(spec, n, p, bounds) != RA_OK) {
        fuzz_note("  refused: %s", ra_error_message());
        /* The message quotes the spec: only a spec's own newline may break it. */
        if (!strchr(spec, '\n') && strchr(ra_error_message(), '\n'))
            fuzz_fail("the error message is more than one line");
    } else {
        check_bounds(bounds, p, n);
        check_round_trip(bounds, p, n, short_len);
        fuzz_note("  accepted: '%s' for %d tokens on %d ranks", spec, n, p);
    }
    free(bounds);
    free(spec);
    return 0;
}
