/* Fuzz harness: llama2.c checkpoints (src/loader_llama2c.c). The input is
 * the whole file, header and weights. Loading it through ra_model_load must
 * either fail with one error line naming the file, or give a model whose
 * tensors match its config and lie inside the file (fuzz_check_model).
 * Seeds: tests/corpus/llama2c/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "model.h"
#include "status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(NULL, "model.bin", data, size);
    struct ra_model m;

    if (ra_model_load(&m, path) != RA_OK) {
        fuzz_check_error(path, data, size);
        return 0;
    }
    fuzz_check_model(&m);
    ra_model_free(&m);
    return 0;
}
