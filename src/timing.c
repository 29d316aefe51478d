#include "timing.h"
#include "status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A sorted copy of v[n], or NULL when out of memory. */
static double *sorted_copy(const double *v, int n)
{
    double *s = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    if (!s)
        return NULL;
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), cmp_double);
    return s;
}

double ra_median(const double *v, int n)
{
    if (n <= 0)
        return NAN;
    double *s = sorted_copy(v, n);
    if (!s)
        return v[0];
    const double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

int ra_median_index(const double *v, int n)
{
    double *s = sorted_copy(v, n);
    if (!s)
        return 0;
    const double m = s[(n - 1) / 2];
    free(s);
    for (int i = 0; i < n; i++)
        if (v[i] == m)
            return i;
    return 0;
}

double ra_min(const double *v, int n)
{
    if (n <= 0)
        return NAN;
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

double ra_max(const double *v, int n)
{
    if (n <= 0)
        return NAN;
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

const char *ra_spread_format(char *buf, size_t size, const double *v, int n, const char *fmt)
{
    char med[32], lo[32], hi[32];
    snprintf(med, sizeof med, fmt, ra_median(v, n));
    snprintf(lo, sizeof lo, fmt, ra_min(v, n));
    snprintf(hi, sizeof hi, fmt, ra_max(v, n));
    snprintf(buf, size, "%s [%s-%s]", med, lo, hi);
    return buf;
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double ra_wall_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

double ra_process_cpu_s(void)
{
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

double ra_thread_cpu_s(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

int ra_cpu_jiffies(double *busy, double *total)
{
    unsigned long long v[8] = { 0 };
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return ra_error_set(RA_EIO, "/proc/stat: cannot open");
    /* user nice system idle iowait irq softirq steal */
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                   &v[7]);
    fclose(f);
    if (n < 4)
        return ra_error_set(RA_EIO, "/proc/stat: no cpu line");
    *busy = (double)(v[0] + v[1] + v[2] + v[5] + v[6] + v[7]);
    *total = *busy + (double)(v[3] + v[4]);
    return RA_OK;
}

int ra_cpu_busy_share(double seconds, double *share)
{
    double b0, n0, b1, n1;
    int rc = ra_cpu_jiffies(&b0, &n0);
    if (rc != RA_OK)
        return rc;
    struct timespec nap = { (time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9) };
    nanosleep(&nap, NULL);
    if ((rc = ra_cpu_jiffies(&b1, &n1)) != RA_OK)
        return rc;
    *share = n1 > n0 ? (b1 - b0) / (n1 - n0) : 0;
    return RA_OK;
}
