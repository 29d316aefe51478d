/* Fuzz harness: a chunk file of the chunk store (src/reuse/store_file.c),
 * opened (mapped, its header parsed) and every layer read. The input is the
 * file. It must be refused with one error line naming the file, or open with
 * its ids and every layer inside the file, and each layer must then read
 * (its checksum right) or be refused naming the file and the layer.
 * Seeds: tests/corpus/chunk/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "reuse/store_impl.h"
#include "status.h"

#include <stdio.h>
#include <string.h>

/* Every byte of a layer, read (ASan sees a layer that runs past the mapping). */
static unsigned touch(const void *p, size_t n)
{
    const unsigned char *b = p;
    unsigned s = 0;
    for (size_t i = 0; i < n; i++)
        s += b[i];
    return s;
}

static void check_layers(struct ra_chunk *c, const char *path)
{
    const struct ra_chunk_header *h = &c->layout.h;
    const unsigned char *lo = c->file.data, *hi = lo + c->file.size;
    if (h->file_bytes != c->file.size || (const unsigned char *)c->layout.layer_sha + 32 * (size_t)h->n_layers > hi)
        fuzz_fail("accepted a file of %zu bytes whose header says %llu", c->file.size,
                  (unsigned long long)h->file_bytes);
    if (ra_chunk_tokens(c) != (int)h->n_tokens || ra_chunk_layer_bytes(c) != h->layer_bytes)
        fuzz_fail("the accessors disagree with the header");
    for (uint32_t l = 0; l < h->n_layers; l++) {
        const void *k, *v;
        if (ra_chunk_layer(c, (int)l, &k, &v) != RA_OK) {
            char want[32];
            snprintf(want, sizeof want, "layer %u", l);
            if (!strstr(ra_error_message(), path) || !strstr(ra_error_message(), want))
                fuzz_fail("a layer's refusal does not name the file and %s", want);
            continue;
        }
        const unsigned char *kb = k;
        if (kb < lo || kb + h->layer_bytes > hi || (const unsigned char *)v != kb + h->layer_bytes / 2)
            fuzz_fail("layer %u lies outside the file", l);
        fuzz_note("layer %u: %u", l, touch(k, h->layer_bytes));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(NULL, "input.rachunk", data, size);
    struct ra_chunk *c = NULL;
    if (ra_chunk_open(path, &c) != RA_OK) {
        fuzz_check_error(path, data, size);
        return 0;
    }
    if (!c)
        fuzz_fail("an existing file opened as a miss");
    fuzz_note("accepted: %u layers of %u tokens behind %u", c->layout.h.n_layers, c->layout.h.n_tokens,
              c->layout.h.n_prefix);
    check_layers(c, path);
    ra_chunk_close(c);
    return 0;
}
