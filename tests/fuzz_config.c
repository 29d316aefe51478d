/* Fuzz harness: Hugging Face config.json (src/loader_hf.c). The input is
 * config.json of a directory whose model.safetensors holds a tiny valid model
 * (fuzz_write_tiny_hf: dim 8, 1 layer, 2 heads, 1 KV head); the whole
 * directory is loaded. A config that disagrees with the weights must be
 * refused with one error line naming the directory; one that loads must give
 * a model whose tensors match it (fuzz_check_model).
 * Seeds: tests/corpus/config/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "model.h"
#include "status.h"

#include <stdio.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char dir[4200];
    struct ra_model m;

    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/hf", fuzz_dir());
        if (mkdir(dir, 0700) != 0)
            fuzz_fail("cannot make %s", dir);
        fuzz_write_tiny_hf(dir, 0, 0);
    }
    fuzz_write(dir, "config.json", data, size);
    if (ra_model_load(&m, dir) != RA_OK) {
        fuzz_check_error(dir, data, size);
        return 0;
    }
    fuzz_check_model(&m);
    ra_model_free(&m);
    return 0;
}
