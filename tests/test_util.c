/* Status codes, error messages and their escaping, option numbers, prompt id
 * parsing, the sampler (tiny temperatures, non-finite logits), the kernels
 * on non-finite input, and files read whole into huge pages (--no-mmap). */
#include "args.h"
#include "cpu_kernels.h"
#include "hugepage.h"
#include "outfile.h"
#include "ra_core.h"
#include "sysinfo.h"
#include "test.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

static void test_status(void)
{
    CHECK(strcmp(ra_strerror(RA_OK), "success") == 0);
    CHECK(strcmp(ra_strerror(RA_EFORMAT), "malformed file") == 0);
    CHECK(strcmp(ra_strerror(12345), "unknown error") == 0);
    CHECK(ra_error_set(RA_ERANGE, "value %d too large", 7) == RA_ERANGE);
    CHECK(strcmp(ra_error_message(), "value 7 too large") == 0);
    ra_error_clear();
    CHECK(strcmp(ra_error_message(), "no error recorded") == 0);

    /* Adding context to the error one got: the argument is the message buffer
     * itself, which must not garble (vsnprintf into its own source overlaps). */
    ra_error_set(RA_EIO, "table.h5: cannot open: No such file or directory");
    CHECK(ra_error_set(RA_EINVAL, "no profile for m on hw (%s); run --calibrate", ra_error_message()) == RA_EINVAL);
    CHECK(strcmp(ra_error_message(), "no profile for m on hw (table.h5: cannot open: No such file or directory); "
                                     "run --calibrate") == 0);
    ra_error_set(RA_EIO, "abc");
    ra_error_set(RA_EIO, "%s-%s-%s", ra_error_message(), ra_error_message(), ra_error_message());
    CHECK(strcmp(ra_error_message(), "abc-abc-abc") == 0);
}

/* Numbers from the command line: a float option refuses what a float cannot
 * hold instead of rounding it to inf or 0. */
static void test_args(void)
{
    float f = -1;
    CHECK_OK(ra_arg_float("0.7", "--temperature", &f));
    CHECK(f == 0.7f);
    CHECK_OK(ra_arg_float("0", "--temperature", &f));
    CHECK(f == 0);
    CHECK_OK(ra_arg_float("1.2e-38", "--temperature", &f)); /* just above FLT_MIN */
    CHECK(f > 0);
    const struct { const char *s, *msg; } bad[] = {
        { "1e300", "'1e300' is too large for a float" },
        { "-1e39", "too large for a float" },
        { "1e-40", "'1e-40' is below the smallest normal float" },
        { "1e-50", "below the smallest normal float" },
        { "1e999", "'1e999' is too large for a double" },
        { "nan", "'nan' is not a finite number" },
        { "inf", "not a finite number" },
        { "0.5x", "'0.5x' is not a number" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = 42;
        int rc = ra_arg_float(bad[i].s, "--temperature", &f);
        if (rc != RA_EINVAL || !strstr(ra_error_message(), bad[i].msg))
            fprintf(stderr, "  '%s': rc %d, message '%s'\n", bad[i].s, rc, ra_error_message());
        CHECK(rc == RA_EINVAL && f == 42 && strstr(ra_error_message(), bad[i].msg));
        CHECK(strstr(ra_error_message(), "--temperature") != NULL);
    }
}

/* ra_escape/ra_esc: text from files as one line of text, cut with "...". */
static void test_escape(void)
{
    char buf[16], big[64];
    CHECK(strcmp(ra_escape("plain ascii", big, sizeof big), "plain ascii") == 0);
    CHECK(strcmp(ra_escape("\x1b[31m\n\t\r\\", big, sizeof big), "\\x1b[31m\\n\\t\\r\\\\") == 0);
    CHECK(strcmp(ra_escape("caf\xc3\xa9 \xe2\x82\xac", big, sizeof big), "caf\xc3\xa9 \xe2\x82\xac") == 0); /* UTF-8 stays */
    CHECK(strcmp(ra_escape("\xff\xc3(\xc0\xaf", big, sizeof big), "\\xff\\xc3(\\xc0\\xaf") == 0); /* invalid, overlong */
    CHECK(strcmp(ra_escape("\xed\xa0\x80", big, sizeof big), "\\xed\\xa0\\x80") == 0); /* a surrogate */
    CHECK(strcmp(ra_escape("\xc2\x9b\xe2\x80\xae\xe2\x80\xa8", big, sizeof big), "\\u009b\\u202e\\u2028") == 0);
    CHECK(strcmp(ra_escape(NULL, big, sizeof big), "(null)") == 0);
    /* Cut: at most size-1 bytes, "..." at the end, never half an escape. */
    CHECK(strcmp(ra_escape("0123456789abcdef", buf, sizeof buf), "0123456789ab...") == 0);
    CHECK(strcmp(ra_escape("0123456789abcde", buf, sizeof buf), "0123456789abcde") == 0);
    CHECK(strcmp(ra_escape("0123456789\x01\x01", buf, sizeof buf), "0123456789...") == 0);
    CHECK(strcmp(ra_escape("abc", buf, 4), "abc") == 0);
    CHECK(strcmp(ra_escape("abcd", buf, 4), "...") == 0);
    /* The ring: several in one call, each its own buffer. */
    char line[64];
    snprintf(line, sizeof line, "%s|%s", ra_esc("a\nb"), ra_esc("c\x1b"));
    CHECK(strcmp(line, "a\\nb|c\\x1b") == 0);
    char longer[600];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    const char *cut = ra_esc(longer);
    CHECK(strlen(cut) == RA_ESC_SIZE - 1 && strcmp(cut + RA_ESC_SIZE - 4, "...") == 0);
    /* The safety net: a message stays one line whatever its arguments hold; backslashes are kept. */
    ra_error_set(RA_EFORMAT, "name %s and %s", "a\nb\x1b", ra_esc("c\\d"));
    CHECK(strcmp(ra_error_message(), "name a\\nb\\x1b and c\\\\d") == 0);
    ra_error_set(RA_EFORMAT, "again: %s", ra_error_message()); /* an argument may be the message itself */
    CHECK(strcmp(ra_error_message(), "again: name a\\nb\\x1b and c\\\\d") == 0);
}

static void test_parse_ids(void)
{
    int32_t *ids = NULL;
    int n = 0;
    CHECK_OK(ra_prompt_parse_ids(" 1 22,333\n4444 ", "t", &ids, &n));
    CHECK(n == 4 && ids[0] == 1 && ids[1] == 22 && ids[2] == 333 && ids[3] == 4444);
    free(ids);
    const char *bad[] = { "", "  ", "1 x 3", "1 -2", "1 99999999999", "1.5", "1 2a" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ids = NULL;
        CHECK(ra_prompt_parse_ids(bad[i], "--prompt-ids", &ids, &n) == RA_EINVAL);
        CHECK(ids == NULL && strstr(ra_error_message(), "--prompt-ids") != NULL);
    }
    /* A long list grows the buffer. */
    char big[6000] = "";
    for (int i = 0; i < 1000; i++)
        strcat(big, "7 ");
    CHECK_OK(ra_prompt_parse_ids(big, "t", &ids, &n));
    CHECK(n == 1000 && ids[999] == 7);
    free(ids);
}

static void test_sampler(void)
{
    float logits[5] = { 0.1f, 2.0f, -1.0f, 1.9f, 0.0f }, work[5];
    struct ra_sampler s;
    CHECK(ra_argmax(logits, 5) == 1);
    CHECK_OK(ra_sampler_init(&s, 5, 0.0f, 0.9f, 42));
    memcpy(work, logits, sizeof work);
    CHECK(ra_sampler_sample(&s, work) == 1);
    ra_sampler_free(&s);

    /* Same seed, same draws; temperature sampling reaches more than one token;
     * top-p 0.5 only ever picks from the two most likely. */
    int counts[5] = { 0 }, first[64];
    for (int pass = 0; pass < 2; pass++) {
        CHECK_OK(ra_sampler_init(&s, 5, 1.0f, 1.0f, 7));
        for (int i = 0; i < 64; i++) {
            memcpy(work, logits, sizeof work);
            int t = ra_sampler_sample(&s, work);
            if (pass == 0) {
                first[i] = t;
                counts[t]++;
            } else {
                CHECK(first[i] == t);
            }
        }
        ra_sampler_free(&s);
    }
    CHECK(counts[1] > 0 && counts[3] > 0 && counts[1] + counts[3] < 64);
    CHECK_OK(ra_sampler_init(&s, 5, 1.0f, 0.5f, 9));
    for (int i = 0; i < 200; i++) {
        memcpy(work, logits, sizeof work);
        int t = ra_sampler_sample(&s, work);
        CHECK(t == 1 || t == 3);
    }
    ra_sampler_free(&s);
    CHECK(ra_sampler_init(&s, 5, -1.0f, 0.9f, 1) == RA_EINVAL);
    CHECK(ra_sampler_init(&s, 5, 1.0f, 0.0f, 1) == RA_EINVAL);
}

/* Temperatures so small that logits / T overflow: every probability used to
 * become NaN (inf - inf), and top-p then read tmp[-1] (a heap overflow under
 * ASan) or picked the last id. The limit of the softmax is all mass on the
 * argmax, so these must sample the argmax, with or without top-p. */
static void test_sampler_tiny_temperature(void)
{
    const float logits[6] = { 0.5f, -3.0f, 7.25f, 7.0f, -100.0f, 2.0f };
    const float temps[] = { 1e-30f, 1e-38f, 1e-40f /* subnormal */, 1.4e-45f /* the smallest */ };
    const float top_ps[] = { 0.9f, 1.0f, 0.1f };
    float work[6];
    struct ra_sampler s;
    for (size_t t = 0; t < sizeof temps / sizeof temps[0]; t++)
        for (size_t p = 0; p < sizeof top_ps / sizeof top_ps[0]; p++) {
            CHECK_OK(ra_sampler_init(&s, 6, temps[t], top_ps[p], 3));
            for (int i = 0; i < 20; i++) {
                memcpy(work, logits, sizeof work);
                int id = ra_sampler_sample(&s, work);
                if (id != 2)
                    fprintf(stderr, "  temperature %g top-p %g: sampled %d, not the argmax 2\n", (double)temps[t],
                            (double)top_ps[p], id);
                CHECK(id == 2);
            }
            ra_sampler_free(&s);
        }
}

/* Non-finite logits are an error before sampling (generate checks them), but
 * the sampler on its own must still stay inside its buffers and the vocabulary. */
static void test_sampler_nonfinite(void)
{
    const float nan = NAN, inf = INFINITY;
    const float cases[][4] = { { nan, nan, nan, nan }, { 1.0f, nan, 2.0f, 0.0f }, { 1.0f, inf, 2.0f, -inf },
                               { -inf, -inf, -inf, -inf }, { inf, inf, 0.0f, 1.0f } };
    const float top_ps[] = { 0.9f, 1.0f };
    float work[4];
    struct ra_sampler s;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t p = 0; p < 2; p++) {
            CHECK_OK(ra_sampler_init(&s, 4, 0.8f, top_ps[p], 5));
            for (int i = 0; i < 10; i++) {
                memcpy(work, cases[c], sizeof work);
                int id = ra_sampler_sample(&s, work);
                CHECK(id >= 0 && id < 4);
            }
            ra_sampler_free(&s);
        }
}

/* silu on NaN and infinities, on every kernel table: the result of NaN is NaN
 * and nothing on the way is undefined behaviour (a NaN converted to int32_t
 * was, in exp_clamped; -fsanitize=float-cast-overflow reports it). */
static void test_kernels_nonfinite(void)
{
    for (int isa = 0; isa < RA_CPU_ISA_COUNT; isa++) {
        const struct ra_cpu_kernels *k = ra_cpu_kernels_for((enum ra_cpu_isa)isa);
        if (!k || !ra_cpu_isa_supported((enum ra_cpu_isa)isa))
            continue;
        float gate[8] = { NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 0.0f, 1.0f, -NAN };
        const float up[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
        k->swiglu(gate, up, 8, 1);
        CHECK(isnan(gate[0]) && isnan(gate[7]));
        CHECK(gate[1] == INFINITY && gate[3] == 1e30f && gate[5] == 0.0f);
        CHECK(fabsf(gate[6] - 0.7310586f) < 1e-6f);
    }
}

/* src/timing.c: the order statistics every benchmark and the calibration report. */
static void test_timing(void)
{
    const double odd[] = { 5, 1, 4, 2, 3 }, even[] = { 4, 1, 3, 2 }, one[] = { 7 };
    CHECK(ra_median(odd, 5) == 3 && ra_median(even, 4) == 2.5 && ra_median(one, 1) == 7);
    CHECK(ra_median_index(odd, 5) == 4);  /* the run with value 3 */
    CHECK(ra_median_index(even, 4) == 3); /* lower middle: 2 */
    CHECK(ra_min(odd, 5) == 1 && ra_max(odd, 5) == 5 && ra_min(one, 1) == 7);
    CHECK(odd[0] == 5 && odd[4] == 3); /* not sorted in place */
    const double w0 = ra_wall_s(), c0 = ra_thread_cpu_s();
    volatile double x = 0;
    for (int i = 0; i < 2000000; i++)
        x += i;
    CHECK(ra_wall_s() > w0 && ra_thread_cpu_s() > c0 && ra_process_cpu_s() > 0);
    double share = -1;
    if (access("/proc/stat", R_OK) == 0) {
        CHECK_OK(ra_cpu_busy_share(0.05, &share));
        CHECK(share >= 0 && share <= 1);
    }
}

/* CPU lists as the kernel writes them (Cpus_allowed_list), and the process's own figures. */
static void test_sysinfo(void)
{
    struct ra_cpu_mask m;
    char buf[RA_CPU_LIST_MAX];
    memset(&m, 0, sizeof m);
    ra_cpu_mask_format(&m, buf, sizeof buf);
    CHECK(strcmp(buf, "") == 0 && ra_cpu_mask_count(&m) == 0);
    const int cpus[] = { 0, 2, 3, 4, 63, 64, 65, 4095 };
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++)
        m.bits[cpus[i] / 64] |= 1ull << (cpus[i] % 64);
    ra_cpu_mask_format(&m, buf, sizeof buf);
    CHECK(strcmp(buf, "0,2-4,63-65,4095") == 0);
    CHECK(ra_cpu_mask_count(&m) == 8 && ra_cpu_mask_has(&m, 64) && !ra_cpu_mask_has(&m, 1));
    ra_cpu_mask_format(&m, buf, 12); /* no room for all: cut at a whole range, marked */
    CHECK(strcmp(buf, "0,2-4...") == 0);
    for (int c = 0; c < RA_MAX_CPUS; c += 2) /* the longest list: cut, never overrun */
        m.bits[c / 64] |= 1ull << (c % 64);
    ra_cpu_mask_format(&m, buf, sizeof buf);
    CHECK(strlen(buf) < sizeof buf && strcmp(buf + strlen(buf) - 3, "...") == 0);

    ra_cpu_mask_get(&m);
    CHECK(ra_cpu_mask_count(&m) == ra_cpus_allowed() && ra_cpus_allowed() >= 1);
    struct ra_proc_info p;
    ra_proc_info_get(&p, 3);
    CHECK(p.threads == 3 && p.n_cpus == ra_cpus_allowed() && p.cpus[0] != '\0');
    CHECK(p.mem.rss > 0 && p.mem.hwm >= p.mem.rss && p.mem.rss_anon > 0 && p.mem.rss_file > 0);
    CHECK(p.mem.rss_anon + p.mem.rss_file <= p.mem.rss);
    CHECK(p.mem.pss == -1 || (p.mem.pss > 0 && p.mem.pss <= p.mem.rss));
}

/* --no-mmap: a file of 2 MiB and more is read into 2 MiB-aligned private
 * memory, byte for byte what the mapping shows, read-only like it; a smaller
 * one is still mapped. */
static void test_mapped_copy(void)
{
    char path[] = "/tmp/ra_test_mapped_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    const size_t size = ((size_t)3 << 20) + 123;
    unsigned char *buf = malloc(size);
    for (size_t i = 0; i < size; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    CHECK(write(fd, buf, size) == (ssize_t)size);
    close(fd);
    struct ra_mapped_file mapped, copied;
    const int saved = ra_mapped_file_copy;
    ra_mapped_file_copy = 0;
    CHECK_OK(ra_mapped_file_open(&mapped, path));
    ra_mapped_file_copy = 1;
    CHECK_OK(ra_mapped_file_open(&copied, path));
    CHECK(copied.size == size && mapped.size == size);
    CHECK(memcmp(copied.data, buf, size) == 0 && memcmp(mapped.data, buf, size) == 0);
    CHECK((uintptr_t)copied.data % ((size_t)2 << 20) == 0 && copied.data != mapped.data);
    ra_mapped_file_close(&copied);
    ra_mapped_file_close(&mapped);
    CHECK(truncate(path, 1000) == 0); /* small: mapped whatever the setting */
    CHECK_OK(ra_mapped_file_open(&copied, path));
    CHECK(copied.size == 1000 && memcmp(copied.data, buf, 1000) == 0 && (uintptr_t)copied.data % 4096 == 0);
    ra_mapped_file_close(&copied);
    ra_mapped_file_copy = saved;
    unlink(path);
    free(buf);
}

/* The share of a range in 2 MiB pages: found for a buffer of ours and a
 * mapped file (whether the kernel gave huge pages depends on it: only the
 * range is checked), -1 for an address that no mapping holds. Files written
 * through ra_outfile_open go out in 2 MiB pieces (its own stream buffer). */
static void test_huge_share(void)
{
    const size_t size = (size_t)4 << 20;
    unsigned char *p = ra_huge_alloc(size);
    CHECK(p != NULL);
    memset(p, 1, size);
    const double share = ra_huge_share(p, size);
    CHECK(share >= 0 && share <= 1);
    CHECK(ra_huge_share((const void *)4096, 4096) == -1);
    free(p);

    char path[] = "/tmp/ra_test_huge_XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    struct ra_outfile of = RA_OUTFILE_INIT;
    FILE *f;
    CHECK_OK(ra_outfile_open(&of, path, &f));
    CHECK(of.buf != NULL);
    unsigned char *data = calloc(1, size + 77);
    for (size_t i = 0; i < size + 77; i++)
        data[i] = (unsigned char)(i * 2654435761u >> 11);
    CHECK(fwrite(data, 1, 5, f) == 5 && fwrite(data + 5, 1, size + 72, f) == size + 72);
    CHECK_OK(ra_outfile_commit(&of));
    ra_outfile_abort(&of);
    struct ra_mapped_file m;
    CHECK_OK(ra_mapped_file_open(&m, path));
    CHECK(m.size == size + 77 && memcmp(m.data, data, m.size) == 0);
    const double file_share = ra_huge_share(m.data, m.size);
    CHECK(file_share >= 0 && file_share <= 1);
    ra_mapped_file_close(&m);
    unlink(path);
    free(data);
}

int main(void)
{
    test_status();
    test_escape();
    test_parse_ids();
    test_args();
    test_sampler();
    test_sampler_tiny_temperature();
    test_sampler_nonfinite();
    test_kernels_nonfinite();
    test_timing();
    test_sysinfo();
    test_mapped_copy();
    test_huge_share();
    return test_result("test_util");
}
