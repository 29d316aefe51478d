/* Fuzz harness: a craft record file of the chunk store (src/reuse/craft.h,
 * KEY.racraft beside a chunk), parsed. The input is the file. It must be
 * refused with one error line naming the file, or parse into counts that
 * agree with the file's size, every mass in [0, 1] and a cache-context
 * impact in [0, 1]. Seeds: tests/corpus/craft_record/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "reuse/craft.h"
#include "status.h"

#include <stdio.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(NULL, "input.racraft", data, size);
    struct ra_craft_record r;
    if (ra_craft_record_parse(data, size, path, &r) != RA_OK) {
        fuzz_check_error(path, data, size);
        return 0;
    }
    const size_t want = 8 + 6 * 4 + 32 + 32 * (size_t)r.n_ctx_keys + 4 * 3 * (size_t)r.n_groups +
                        4 * (size_t)r.n_groups * (size_t)r.n_tokens + 32;
    if (r.n_groups < 1 || r.n_groups > RA_CRAFT_GROUPS || r.n_tokens < 1 || want != size)
        fuzz_fail("accepted %d groups of %d tokens and %d keys in %zu bytes", r.n_groups, r.n_tokens, r.n_ctx_keys,
                  size);
    const double cci = ra_craft_cci(&r);
    if (!(cci >= 0 && cci <= 1))
        fuzz_fail("an impact of %g", cci);
    double s = 0;
    for (int t = 0; t < r.n_tokens; t++) {
        const double x = ra_craft_token_score(&r, t);
        if (!(x >= 0 && x <= 1.001))
            fuzz_fail("token %d scores %g", t, x);
        s += x;
    }
    fuzz_note("accepted: %d groups, %d tokens, %d context keys, impact %.3f, scores %.3f", r.n_groups, r.n_tokens,
              r.n_ctx_keys, cci, s);
    ra_craft_record_free(&r);
    return 0;
}
