/* Host buffers in transparent huge pages. A decode step streams its whole KV
 * cache and every weight: with 4 KiB pages the hardware prefetchers stop at
 * every page boundary and each page costs a TLB walk, up to a third of one
 * core's read rate here. The kernel's THP setting is often "madvise", so the
 * pages must be asked for; where THP is off the hint does nothing. */
#ifndef RA_HUGEPAGE_H
#define RA_HUGEPAGE_H

#include <stddef.h>

#define RA_HUGE_PAGE ((size_t)2 << 20)

/* Asks for huge pages over the whole 2 MiB pages of [p, p + bytes), before
 * their first touch (a hint: failures are ignored). */
void ra_huge_advise(void *p, size_t bytes);

/* bytes of host memory (not zeroed; release with free()): 2 MiB aligned and
 * advised for huge pages from RA_HUGE_PAGE bytes on, 64-byte aligned below.
 * NULL when out of memory. */
void *ra_huge_alloc(size_t bytes);

/* The share of [p, p + bytes) that the kernel holds in 2 MiB pages, from the
 * AnonHugePages and FilePmdMapped lines of /proc/self/smaps for the mappings
 * over that range (an mmap'd file or a ra_huge_alloc buffer); -1 where that
 * cannot be read. A mapped file gets 2 MiB pages only where the page cache
 * holds it in 2 MiB folios (Linux 6.x on ext4, xfs: a file read cold, or
 * written in 2 MiB pieces); one written in small pieces and still cached
 * stays in 4 KiB pages. */
double ra_huge_share(const void *p, size_t bytes);

#endif
