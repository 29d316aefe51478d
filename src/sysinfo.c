/* See sysinfo.h. */
#define _GNU_SOURCE
#include "sysinfo.h"
#include "status.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int ra_cpu_mask_get(struct ra_cpu_mask *m)
{
    const size_t size = CPU_ALLOC_SIZE(RA_MAX_CPUS);
    cpu_set_t *set = CPU_ALLOC(RA_MAX_CPUS);
    memset(m, 0, sizeof *m);
    if (set && sched_getaffinity(0, size, set) == 0) {
        for (int c = 0; c < RA_MAX_CPUS; c++)
            if (CPU_ISSET_S(c, size, set))
                m->bits[c / 64] |= 1ull << (c % 64);
    } else { /* no answer (or over RA_MAX_CPUS CPUs): the online ones, as sysconf counts them */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n = n < 1 ? 1 : n > RA_MAX_CPUS ? RA_MAX_CPUS : n;
        for (int c = 0; c < n; c++)
            m->bits[c / 64] |= 1ull << (c % 64);
    }
    if (set)
        CPU_FREE(set);
    return RA_OK;
}

int ra_cpu_mask_count(const struct ra_cpu_mask *m)
{
    int n = 0;
    for (size_t i = 0; i < sizeof m->bits / sizeof m->bits[0]; i++)
        n += __builtin_popcountll(m->bits[i]);
    return n;
}

void ra_cpu_mask_format(const struct ra_cpu_mask *m, char *buf, size_t len)
{
    size_t used = 0;
    if (!len)
        return;
    buf[0] = '\0';
    for (int c = 0; c < RA_MAX_CPUS; c++) {
        if (!ra_cpu_mask_has(m, c))
            continue;
        int last = c;
        while (ra_cpu_mask_has(m, last + 1))
            last++;
        char item[32];
        int n = last == c ? snprintf(item, sizeof item, "%s%d", used ? "," : "", c)
                          : snprintf(item, sizeof item, "%s%d-%d", used ? "," : "", c, last);
        if (used + (size_t)n + 4 > len) { /* no room for this range and a "..." */
            snprintf(buf + used, len - used, "%s", len - used > 3 ? "..." : "");
            return;
        }
        memcpy(buf + used, item, (size_t)n + 1);
        used += (size_t)n;
        c = last;
    }
}

int ra_cpus_allowed(void)
{
    struct ra_cpu_mask m;
    ra_cpu_mask_get(&m);
    int n = ra_cpu_mask_count(&m);
    return n > 0 ? n : 1;
}

/* Sets the fields of `keys` found in FILE ("Name:   123 kB" lines). */
static void read_kb_fields(const char *file, const char *const *keys, int64_t **out, int n)
{
    char line[256];
    FILE *f = fopen(file, "r");
    while (f && fgets(line, sizeof line, f))
        for (int i = 0; i < n; i++) {
            const size_t len = strlen(keys[i]);
            long long kb;
            if (!strncmp(line, keys[i], len) && line[len] == ':' && sscanf(line + len + 1, "%lld", &kb) == 1)
                *out[i] = kb * 1024;
        }
    if (f)
        fclose(f);
}

void ra_mem_usage_get(struct ra_mem_usage *u)
{
    static const char *const status_keys[] = { "VmRSS", "VmHWM", "RssAnon", "RssFile" }, *const pss_key[] = { "Pss" };
    int64_t *status_out[] = { &u->rss, &u->hwm, &u->rss_anon, &u->rss_file }, *pss_out[] = { &u->pss };
    u->rss = u->hwm = u->rss_anon = u->rss_file = u->pss = -1;
    read_kb_fields("/proc/self/status", status_keys, status_out, 4);
    read_kb_fields("/proc/self/smaps_rollup", pss_key, pss_out, 1);
}

void ra_proc_info_get(struct ra_proc_info *p, int threads)
{
    struct ra_cpu_mask m;
    memset(p, 0, sizeof *p);
    ra_mem_usage_get(&p->mem);
    ra_cpu_mask_get(&m);
    p->threads = threads;
    p->n_cpus = ra_cpu_mask_count(&m);
    ra_cpu_mask_format(&m, p->cpus, sizeof p->cpus);
}
