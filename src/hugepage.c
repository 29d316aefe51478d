#include "hugepage.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

void ra_huge_advise(void *p, size_t bytes)
{
#ifdef MADV_HUGEPAGE
    if (bytes >= RA_HUGE_PAGE)
        (void)madvise(p, bytes / RA_HUGE_PAGE * RA_HUGE_PAGE, MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

void *ra_huge_alloc(size_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, bytes >= RA_HUGE_PAGE ? RA_HUGE_PAGE : 64, bytes ? bytes : 1) != 0)
        return NULL;
    ra_huge_advise(p, bytes);
    return p;
}

double ra_huge_share(const void *p, size_t bytes)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f || !bytes) {
        if (f)
            fclose(f);
        return -1;
    }
    char line[512];
    unsigned long long kb, huge_kb = 0;
    int in_vma = 0, found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
            in_vma = lo < (unsigned long)p + bytes && (unsigned long)p < hi; /* madvise may split it */
            found |= in_vma;
        } else if (in_vma && (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1 ||
                              sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1)) {
            huge_kb += kb;
        }
    }
    fclose(f);
    if (!found)
        return -1;
    const double share = (double)huge_kb * 1024 / (double)bytes;
    return share > 1 ? 1 : share;
}
