/* Shared by the parser fuzz harnesses (tests/fuzz_<name>.c).
 *
 * Each harness defines LLVMFuzzerTestOneInput. Built with --enable-fuzzing
 * (jobs/fuzz: clang, libFuzzer, ASan, UBSan) libFuzzer drives it; in every
 * other build tests/fuzz_replay.c's main runs it once per file of the
 * committed corpus, tests/corpus/<name>/ (CTest test fuzz_<name>).
 *
 * A harness aborts (fuzz_fail) when a parser breaks one of its promises, not
 * only on a memory error: an input must be refused with one error line that
 * names the file, or accepted with everything it describes inside the input. */
#ifndef RA_FUZZ_H
#define RA_FUZZ_H

#include <stddef.h>
#include <stdint.h>

struct ra_model;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Prints "invariant: ..." and the last library error, then aborts: libFuzzer
 * keeps the input as a crash, the replay test fails. */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* With FUZZ_VERBOSE=1 in the environment, prints one line saying what
 * became of the input (refused and why, or accepted): to see what a corpus
 * covers, e.g. FUZZ_VERBOSE=1 build/tests/fuzz_config tests/corpus/config. */
void fuzz_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* This process's scratch directory, made on first use (under $TMPDIR, else
 * /dev/shm, else /tmp: tmpfs keeps per-input files cheap) and removed with
 * everything in it at exit. */
const char *fuzz_dir(void);

/* Writes SIZE bytes to NAME inside DIR (NULL: fuzz_dir()) and returns its
 * path, valid until the next call. An I/O error aborts: it is the harness's. */
const char *fuzz_write(const char *dir, const char *name, const void *data, size_t size);

/* A failed load's message must name WHERE (a file or dir) and be one line,
 * unless the input holds a newline byte: messages quote names and values
 * from the input as they are. */
void fuzz_check_error(const char *where, const uint8_t *input, size_t size);

/* A loaded model's tensors must match its config and lie wholly inside one
 * of its mappings or in a buffer the model owns; every byte is read, so ASan
 * sees a tensor that runs past its buffer. Then the model must compute: a
 * 3-token prompt as two spans on the CPU backend, so the kernels meet the
 * shapes the loader accepted (the values may be NaN: fuzzed weights). */
void fuzz_check_model(struct ra_model *m);

/* Writes a tiny valid Hugging Face model into DIR (config.json unless
 * CONFIG is 0; the weights as model.safetensors, or with SHARDED as two
 * shards without their index, which the harness supplies): 1 layer, dim 8,
 * 2 heads, 1 KV head, FFN 16, vocabulary 8, untied lm_head. */
void fuzz_write_tiny_hf(const char *dir, int config, int sharded);

#endif
