/* Fuzz harness: the whole --partition grammar (partition/spec.c over
 * partition/partition.c, the tables and the auto split). Input: byte 0 is the
 * rank count P as a signed byte, bytes 1..4 the prompt length (signed,
 * little-endian), byte 5 the size of a short output buffer (bits 0-4), the
 * run's key (bit 5: cpu/f32/f32, else cuda/bf16/bf16) and RA_PROFILE (bit 6:
 * unset, else the fixture table), the rest the spec (cut at a NUL byte).
 *
 * ra_partition_parse (even, ratios:, bounds:): a spec must be refused with one
 * error line (unless it holds a newline itself: the message quotes it), or
 * give P+1 boundaries from 0 to the prompt length, strictly increasing, that
 * ra_partition_format writes out and "bounds:" reads back unchanged;
 * formatting into a short buffer must stay in it and write a prefix of the
 * full text.
 *
 * The grammar (ra_partition_spec_parse, ra_partition_resolve): refusals are
 * one line as above; a parsed spec has the kind its prefix says; resolved, it
 * gives valid boundaries and a one-line source, even/ratios:/bounds: the same
 * as ra_partition_parse, table: the same as interpolating the table group
 * read for the run's key. FILE of table: and auto: names a file of this
 * harness's fixture directory ('/' becomes '_'): t.h5 (a table for the
 * harness's model on hardware "fuzz-hw", P 1..8, tuned on cpu/f32/f32, with
 * a cost-model profile), cuda.h5 (the same tuned on cuda/bf16/bf16), other.h5
 * (another model's), text.h5 (not HDF5), cut.h5 (t.h5 truncated); any other
 * name does not exist. A refusal of a missing or malformed file names it.
 * Seeds: tests/corpus/partition/ (tests/corpus/make-seeds.sh). */
#include "fuzz.h"
#include "interp.h"
#include "partition.h"
#include "spec.h"
#include "status.h"
#include "table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 6
#define HW "fuzz-hw"
#define MAX_RESOLVE_TOKENS (1 << 16) /* the auto split's search is linear in the prompt length */
#define MAX_RESOLVE_WORK (1 << 21) /* ranks x tokens: auto with a profile searches per rank (seconds under ASan beyond) */

/* The model every run resolves for (a small GQA Llama shape). */
static const struct ra_config config = { .dim = 64, .hidden_dim = 172, .n_layers = 5, .n_heads = 8, .n_kv_heads = 4,
                                         .vocab_size = 512, .seq_len = 1 << 20, .head_dim = 8, .rope_theta = 10000.0f,
                                         .norm_eps = 1e-5f };

/* One table file: P = 1..8 for the model id `id`, entries at 16, 64 and 256 tokens, a profile. */
static void write_fixture_table(const char *path, const char *id, const struct ra_table_key *key)
{
    static const char *const names[] = { "gemm_flops", "attn_flops", "other_s_per_token_layer", "p2p_bandwidth",
                                         "p2p_latency" };
    static const double values[] = { 5e10, 2e10, 1e-6, 8e9, 2e-6 };
    const int contexts[3] = { 16, 64, 256 };
    for (int p = 1; p <= 8; p++) {
        struct ra_table_group g;
        int bounds[9];
        if (ra_table_group_init(&g, id, HW, p, 3) != RA_OK)
            fuzz_fail("fixture: %s", ra_error_message());
        g.key = *key;
        for (int i = 0; i < 3; i++) {
            for (int r = 0; r <= p; r++) /* a front-loaded split: later ranks get fewer tokens */
                bounds[r] = r == p ? contexts[i] : (int)((long long)contexts[i] * r * (2 * p - r) / (p * p));
            for (int r = 0; r < p; r++)
                bounds[r + 1] = bounds[r + 1] > bounds[r] ? bounds[r + 1] : bounds[r] + 1;
            if (ra_table_entry_set(&g, i, bounds, 0.1 * (i + 1), 0.2 * (i + 1), 0.3 * (i + 1)) != RA_OK)
                fuzz_fail("fixture: %s", ra_error_message());
        }
        if (ra_table_merge(path, &g) != RA_OK)
            fuzz_fail("fixture %s: %s", path, ra_error_message());
        ra_table_group_free(&g);
    }
    if (ra_table_profile_write(path, id, HW, names, values, 5, NULL) != RA_OK)
        fuzz_fail("fixture %s: %s", path, ra_error_message());
}

/* The fixture directory, written on first use. */
static const char *fixtures(void)
{
    static char dir[4096];
    if (dir[0])
        return dir;
    snprintf(dir, sizeof dir, "%s", fuzz_dir());
    const struct ra_table_key cpu = RA_TABLE_KEY_LEGACY, cuda = { "cuda", "bf16", "bf16" };
    char id[128], path[4200];
    ra_table_model_id(&config, id, sizeof id);
    snprintf(path, sizeof path, "%s/t.h5", dir);
    write_fixture_table(path, id, &cpu);
    snprintf(path, sizeof path, "%s/cuda.h5", dir);
    write_fixture_table(path, id, &cuda);
    snprintf(path, sizeof path, "%s/other.h5", dir);
    write_fixture_table(path, "another-model", &cpu);
    fuzz_write(dir, "text.h5", "not a table\n", 12);
    char head[1000]; /* t.h5's first 1000 bytes */
    snprintf(path, sizeof path, "%s/t.h5", dir);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f)
        fclose(f);
    if (got != sizeof head)
        fuzz_fail("fixture %s: shorter than %zu bytes", path, sizeof head);
    fuzz_write(dir, "cut.h5", head, got);
    return dir;
}

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

/* The spec with its FILE moved into the fixture directory ('/' becomes '_'), parsed. */
static void spec_in_fixtures(const struct ra_partition_spec *s, struct ra_partition_spec *out)
{
    static char text[RA_PARTITION_SPEC_MAX + 4200];
    const char *dir = fixtures();
    size_t prefix = (size_t)(s->file - s->text), used;
    snprintf(text, sizeof text, "%.*s%s/", (int)prefix, s->text, dir);
    used = strlen(text);
    for (const char *c = s->file; *c && used + 1 < sizeof text; c++)
        text[used++] = *c == '/' ? '_' : *c;
    text[used] = '\0';
    if (strlen(text) >= RA_PARTITION_SPEC_MAX) { /* too long once moved: resolve the original's kind only */
        memset(out, 0, sizeof *out);
        out->kind = s->kind;
        return;
    }
    if (ra_partition_spec_parse(text, out) != RA_OK || out->kind != s->kind)
        fuzz_fail("'%s' does not parse as the spec it was moved from", text);
}

/* table: resolved must be the table's group for this run's key, interpolated. */
static void check_table_result(const struct ra_partition_spec *s, const struct ra_partition_run *run,
                               const int *bounds, int extrapolated)
{
    struct ra_table_group g;
    char id[128];
    int *want = malloc(sizeof *want * (size_t)(run->p + 1)), ext = 0;
    ra_table_model_id(run->config, id, sizeof id);
    if (!want || ra_table_read(s->file, id, HW, run->p, &g) != RA_OK)
        fuzz_fail("'%s' resolved, but its group does not read", s->text);
    if (!ra_table_key_equal(&g.key, run->key))
        fuzz_fail("'%s' resolved from a table of another key (%s)", s->text, g.key.backend);
    if (ra_table_interpolate(&g, run->n_tokens, want, &ext) != RA_OK ||
        memcmp(want, bounds, sizeof *want * (size_t)(run->p + 1)) || ext != extrapolated)
        fuzz_fail("'%s' resolved to other boundaries than its table's interpolation", s->text);
    ra_table_group_free(&g);
    free(want);
}

/* The grammar: parse, then (for a sane run) resolve. */
static void check_grammar(const char *text, int p, int n, int cuda, const uint8_t *data, size_t size)
{
    struct ra_partition_spec s, moved;
    const struct ra_table_key keys[2] = { RA_TABLE_KEY_LEGACY, { "cuda", "bf16", "bf16" } };
    char source[512];
    int extrapolated = 0;
    if (ra_partition_spec_parse(text, &s) != RA_OK) {
        fuzz_note("  grammar refused: %s", ra_error_message());
        if (!strchr(text, '\n') && strchr(ra_error_message(), '\n'))
            fuzz_fail("the grammar's error message is more than one line");
        return;
    }
    const char *const prefixes[] = { "auto", "even", "ratios:", "bounds:", "table:" };
    if (strncmp(text, prefixes[s.kind], strlen(prefixes[s.kind])) ||
        ((s.kind == RA_PARTITION_TABLE || (s.kind == RA_PARTITION_AUTO && text[4])) != (s.file != NULL)))
        fuzz_fail("'%s' parsed as kind %d", text, (int)s.kind);
    if (p < 1 || n < 1 || n > MAX_RESOLVE_TOKENS || (int64_t)p * n > MAX_RESOLVE_WORK)
        return;
    if (s.file) {
        spec_in_fixtures(&s, &moved);
        if (!moved.text[0])
            return;
        s = moved;
    }
    const struct ra_partition_run run = { &config, n, p, HW, &keys[cuda] };
    int *bounds = malloc(sizeof *bounds * (size_t)(p + 1)), *want = malloc(sizeof *want * (size_t)(p + 1));
    if (ra_partition_resolve(&s, &run, bounds, source, sizeof source, &extrapolated) != RA_OK) {
        fuzz_note("  resolve refused: %s", ra_error_message());
        if (!memchr(data, '\n', size) && strchr(ra_error_message(), '\n'))
            fuzz_fail("the resolve error message is more than one line");
        /* the file is named (escaped, so its own bytes may differ: its directory, which is plain text) */
        if (s.file && !strstr(ra_error_message(), fixtures()) && !strstr(ra_error_message(), "fewer than the"))
            fuzz_fail("a refusal of '%s' does not name its file: %s", s.text, ra_error_message());
    } else {
        check_bounds(bounds, p, n);
        if (!source[0] || strchr(source, '\n'))
            fuzz_fail("'%s' resolved with the source '%s'", s.text, source);
        if (s.kind == RA_PARTITION_TABLE)
            check_table_result(&s, &run, bounds, extrapolated);
        else if (s.kind != RA_PARTITION_AUTO &&
                 (ra_partition_parse(s.text, n, p, want) != RA_OK ||
                  memcmp(want, bounds, sizeof *want * (size_t)(p + 1))))
            fuzz_fail("'%s' resolved to other boundaries than ra_partition_parse gives", s.text);
        fuzz_note("  resolved: '%s' for %d tokens on %d ranks (%s)", s.text, n, p, source);
    }
    free(want);
    free(bounds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < HEADER)
        return 0;
    int p = (int8_t)data[0], short_len = 1 + data[5] % 32, cuda = data[5] >> 5 & 1;
    char profile[4200];
    if (data[5] >> 6 & 1) {
        snprintf(profile, sizeof profile, "%s/t.h5", fixtures());
        setenv("RA_PROFILE", profile, 1);
    } else {
        unsetenv("RA_PROFILE");
    }
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
    check_grammar(spec, p, n, cuda, data, size);
    free(bounds);
    free(spec);
    return 0;
}
