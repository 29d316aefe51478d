/* Fuzz harness: safetensors headers (src/safetensors.c) and the sharded
 * index, model.safetensors.index.json (src/loader_hf.c). The first byte
 * picks the mode, the rest is the file:
 *   even: a safetensors file, parsed from a buffer of exactly its size. It
 *         must be refused with one error line naming it, or give entries
 *         sorted by name, found by name, each with shape x dtype bytes in the
 *         data region, no two sharing a byte; every byte of each is read.
 *   odd:  the index of a directory holding a tiny valid model split into
 *         model-00001-of-00002.safetensors and model-00002-of-00002.safetensors
 *         (fuzz_write_tiny_hf) and its config.json. Loading the directory must
 *         fail with one error line naming it, or give a model whose tensors
 *         lie inside the shards (fuzz_check_model).
 * Seeds: tests/corpus/safetensors/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "model.h"
#include "safetensors.h"
#include "status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ST_PATH "fuzz.safetensors"

static void check_entry(const struct ra_safetensors *st, const struct ra_st_entry *e)
{
    int64_t want = (int64_t)ra_dtype_size(e->dtype);
    for (int d = 0; d < e->n_dims; d++)
        want *= e->shape[d];
    if (e->n_dims < 0 || e->n_dims > RA_ST_MAX_DIMS || e->begin > e->end || e->end > st->data_size ||
        (uint64_t)want != e->end - e->begin || e->data != st->data + e->begin)
        fuzz_fail("entry %s: offsets, shape and data pointer disagree", e->name);
    if (ra_safetensors_find(st, e->name) != e)
        fuzz_fail("entry %s is not found by its name", e->name);
    const volatile unsigned char *p = e->data;
    unsigned sum = 0;
    for (uint64_t i = 0; i < e->end - e->begin; i++)
        sum += p[i];
    (void)sum;
}

/* Non-empty tensors may not share bytes; entries are sorted by name, so compare all pairs. */
static void check_overlaps(const struct ra_safetensors *st)
{
    for (int i = 0; i < st->n_entries; i++)
        for (int j = i + 1; j < st->n_entries; j++) {
            const struct ra_st_entry *a = &st->entries[i], *b = &st->entries[j];
            if (a->begin < a->end && b->begin < b->end && a->begin < b->end && b->begin < a->end)
                fuzz_fail("entries %s and %s share bytes", a->name, b->name);
        }
}

static void fuzz_header(const uint8_t *data, size_t size)
{
    struct ra_mapped_file f = { data, size, (char *)ST_PATH };
    struct ra_safetensors st;

    memset(&st, 0, sizeof st);
    if (ra_safetensors_parse(&st, &f) != RA_OK) {
        fuzz_check_error(ST_PATH, data, size);
        ra_safetensors_close(&st);
        return;
    }
    for (int i = 0; i < st.n_entries; i++) {
        if (i > 0 && strcmp(st.entries[i - 1].name, st.entries[i].name) >= 0)
            fuzz_fail("entries are not sorted by name (%s, %s)", st.entries[i - 1].name, st.entries[i].name);
        check_entry(&st, &st.entries[i]);
    }
    check_overlaps(&st);
    for (int i = 0; i < 2 * st.n_meta; i++)
        if (!st.meta[i])
            fuzz_fail("metadata %d is NULL", i);
    fuzz_note("  accepted: %d tensors, %d metadata, %llu data bytes", st.n_entries, st.n_meta,
              (unsigned long long)st.data_size);
    ra_safetensors_close(&st);
}

static void fuzz_index(const uint8_t *data, size_t size)
{
    static char dir[4200];
    struct ra_model m;

    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/sharded", fuzz_dir());
        if (mkdir(dir, 0700) != 0)
            fuzz_fail("cannot make %s", dir);
        fuzz_write_tiny_hf(dir, 1, 1);
    }
    fuzz_write(dir, "model.safetensors.index.json", data, size);
    if (ra_model_load(&m, dir) != RA_OK) {
        fuzz_check_error(dir, data, size);
        return;
    }
    fuzz_check_model(&m);
    ra_model_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    /* A copy of exactly the file's size: the parser must not read past it. */
    uint8_t *file = malloc(size - 1 ? size - 1 : 1);
    memcpy(file, data + 1, size - 1);
    if (data[0] & 1)
        fuzz_index(file, size - 1);
    else
        fuzz_header(file, size - 1);
    free(file);
    return 0;
}
