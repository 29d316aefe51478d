/* Mutation fuzzer for the partition-table reader (not part of the build).
 *
 * Flips, overwrites and truncates bytes of a valid table file and runs every reader on the
 * result in a forked child (HDF5 itself may crash on corrupt files; a fork keeps going and
 * keeps the case). Besides crashes it checks two invariants:
 *   - a group that reads interpolates to valid boundaries for any context >= P;
 *   - a file that validates reads every group it lists, and merges.
 * Coverage guidance would only see our code (HDF5 is not instrumented), so plain random
 * mutation of a seed is as good here and needs no libFuzzer.
 *
 *   build/runahead-table write-example seed.h5 --hw-tag fuzz
 *   mpicc -std=gnu11 -g -O1 -fsanitize=address,undefined -fno-omit-frame-pointer \
 *       -Isrc -Ipartition -Ibuild $(pkg-config --cflags hdf5-openmpi) src/status.c partition/table.c \
 *       tests/fuzz_table.c $(pkg-config --libs hdf5-openmpi) -lm -o fuzz_table
 *   ASAN_OPTIONS=detect_leaks=0 ./fuzz_table seed.h5 120 fuzz-out/
 *   ./fuzz_table replay fuzz-out/crash-1-sig11.h5      (one case, in-process, for a stack trace)
 * Crashing inputs are kept as fuzz-out/crash-<n>-sig<s>.h5 (s = 0: ASan/UBSan or an invariant). */
#include "status.h"
#include "table.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MODEL "example-model"
#define HW "fuzz"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void die(const char *what)
{
    fprintf(stderr, "invariant: %s: %s\n", what, ra_error_message());
    abort();
}

static void check_bounds(const int *b, int p, int c)
{
    if (b[0] != 0 || b[p] != c)
        die("bounds do not run from 0 to the context");
    for (int r = 0; r < p; r++)
        if (b[r + 1] <= b[r])
            die("an empty slice");
}

static int read_and_interpolate(const char *path, int p)
{
    struct ra_table_group g;
    int b[8], ex;
    if (ra_table_read(path, MODEL, HW, p, &g) != RA_OK)
        return -1;
    const int contexts[] = { p, p + 1, 100, 2048, 3000, 4096, 8192, 100000 };
    for (size_t i = 0; i < sizeof contexts / sizeof contexts[0]; i++) {
        if (ra_table_interpolate(&g, contexts[i], b, &ex) != RA_OK)
            die("interpolate failed on a table that read");
        check_bounds(b, p, contexts[i]);
    }
    ra_table_group_free(&g);
    return 0;
}

static int each_cb(const char *m, const char *hw, const char *leaf, void *ctx)
{
    struct ra_table_group g;
    char names[RA_TABLE_MAX_PROFILE][64];
    double v[RA_TABLE_MAX_PROFILE];
    int n, p = leaf[0] == 'p' ? atoi(leaf + 1) : 0;
    int rc = p ? ra_table_read(ctx, m, hw, p, &g) : ra_table_profile_read(ctx, m, hw, names, v, RA_TABLE_MAX_PROFILE, &n);
    if (p && rc == RA_OK)
        ra_table_group_free(&g);
    return rc;
}

/* Returns 1 if the file validates (the parent counts them), 0 if not. */
static int run_case(const char *path, const char *scratch)
{
    char list[1024], names[16][64];
    double v[16];
    int n, valid = ra_table_validate(path, NULL, &n) == RA_OK;
    ra_table_list(path, list, sizeof list);
    int r2 = read_and_interpolate(path, 2), r4 = read_and_interpolate(path, 4);
    int rp = ra_table_profile_read(path, MODEL, HW, names, v, 16, &n);
    int re = ra_table_each(path, each_cb, (void *)path);
    (void)r2, (void)r4, (void)rp; /* a mutated link name may rename the groups: no invariant */
    if (!valid)
        return 0;
    if (re)
        die("a file that validates did not read every group it lists");
    /* Merging copies every object through HDF5: more of its reader to exercise. */
    char cmd[8500];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, scratch);
    if (system(cmd) != 0)
        return 1;
    struct ra_table_group g;
    if (ra_table_group_init(&g, MODEL, HW, 2, 1) != RA_OK)
        die("init");
    ra_table_entry_set(&g, 0, (const int[]){ 0, 3000, 5000 }, 1, 2, 3);
    if (ra_table_merge(scratch, &g) != RA_OK || ra_table_validate(scratch, NULL, &n) != RA_OK)
        die("merge into a file that validates");
    ra_table_group_free(&g);
    return 1;
}

static void mutate(uint8_t *buf, size_t *size, const uint8_t *seed, size_t seed_size)
{
    memcpy(buf, seed, seed_size);
    *size = seed_size;
    int k = 1 + (int)(next() % 8);
    for (int i = 0; i < k; i++) {
        size_t at = next() % seed_size;
        switch (next() % 8) {
        case 0: buf[at] = 0; break;
        case 1: buf[at] = 0xff; break;
        case 2: buf[at] = (uint8_t)next(); break;
        case 3: *size = at > 0 ? at : 1; break; /* truncate (rare enough: one case in 8 mutations) */
        default: buf[at] ^= (uint8_t)(1u << (next() % 8)); break;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "replay")) { /* one kept case, in this process */
        run_case(argv[2], "/tmp/fuzz_table_replay_merge.h5");
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: fuzz_table SEED.h5 SECONDS OUTDIR | fuzz_table replay CASE.h5\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    static uint8_t seed[1 << 20], buf[1 << 20];
    size_t seed_size = f ? fread(seed, 1, sizeof seed, f) : 0, size;
    if (f)
        fclose(f);
    if (!seed_size) {
        fprintf(stderr, "cannot read %s\n", argv[1]);
        return 1;
    }
    mkdir(argv[3], 0755);
    char path[4200], scratch[4200], keep[4300];
    snprintf(path, sizeof path, "%s/case.h5", argv[3]);
    snprintf(scratch, sizeof scratch, "%s/merge.h5", argv[3]);
    time_t end = time(NULL) + atol(argv[2]);
    long cases = 0, crashes = 0, hangs = 0, valid = 0;
    while (time(NULL) < end) {
        mutate(buf, &size, seed, seed_size);
        f = fopen(path, "wb");
        if (!f || fwrite(buf, 1, size, f) != size)
            return 1;
        fclose(f);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20);
            _exit(run_case(path, scratch) ? 3 : 0);
        }
        int st;
        waitpid(pid, &st, 0);
        cases++;
        int sig = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
        if (sig == SIGALRM)
            hangs++;
        valid += !sig && WEXITSTATUS(st) == 3;
        if (sig || (WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3)) {
            crashes++;
            snprintf(keep, sizeof keep, "%s/crash-%ld-sig%d.h5", argv[3], crashes, sig);
            rename(path, keep);
            fprintf(stderr, "case %ld: %s %d, kept as %s\n", cases, sig ? "signal" : "exit", sig ? sig : WEXITSTATUS(st),
                    keep);
        }
    }
    printf("%ld cases (%ld still valid), %ld crashes (%ld hangs)\n", cases, valid, crashes, hangs);
    return crashes ? 1 : 0;
}
