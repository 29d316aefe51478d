#include "hugepage.h"

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
