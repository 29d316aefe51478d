/* What this process was given: the CPUs it may run on (its affinity mask,
 * which Slurm's cgroups and --cpus-per-task, taskset and mpirun's binding
 * set) and the memory it holds. Linux /proc and sched_getaffinity; no MPI. */
#ifndef RA_SYSINFO_H
#define RA_SYSINFO_H

#include <stddef.h>
#include <stdint.h>

#define RA_MAX_CPUS 4096

/* A set of CPU numbers, fixed-size so that ranks can exchange it as bytes. */
struct ra_cpu_mask {
    uint64_t bits[RA_MAX_CPUS / 64];
};

static inline int ra_cpu_mask_has(const struct ra_cpu_mask *m, int cpu)
{
    return cpu >= 0 && cpu < RA_MAX_CPUS && (m->bits[cpu / 64] >> (cpu % 64)) & 1;
}

/* The calling thread's affinity mask (sched_getaffinity); where the kernel
 * does not say, every online CPU. Returns RA_OK. */
int ra_cpu_mask_get(struct ra_cpu_mask *m);
int ra_cpu_mask_count(const struct ra_cpu_mask *m);
/* As the kernel's cpulist format ("0-3", "0,2-3"), truncated with "..." to LEN. */
void ra_cpu_mask_format(const struct ra_cpu_mask *m, char *buf, size_t len);

/* How many CPUs this process may run on: the default thread count (>= 1). */
int ra_cpus_allowed(void);

/* Resident memory in bytes, -1 where /proc does not say. From
 * /proc/self/status: VmRSS now and VmHWM, its peak, which count every page of
 * a shared mapping (the model's weights in the page cache) that the process
 * touched, in every process that touched it; RssAnon, the process's private
 * memory (KV cache, activations, scratch); RssFile, its pages of mapped files.
 * From /proc/self/smaps_rollup: Pss, each shared page divided among the
 * processes that map it, so that the ranks' Pss add up to the node's use. */
struct ra_mem_usage {
    int64_t rss, hwm, rss_anon, rss_file, pss;
};
void ra_mem_usage_get(struct ra_mem_usage *u);

/* One process's share of the machine, for reports: fixed-size, so that MPI
 * ranks can gather it as bytes. */
#define RA_CPU_LIST_MAX 128
struct ra_proc_info {
    struct ra_mem_usage mem;
    int threads;            /* the compute threads it runs */
    int n_cpus;             /* CPUs in its affinity mask */
    char cpus[RA_CPU_LIST_MAX]; /* that mask, "0-3" (ra_cpu_mask_format) */
};
void ra_proc_info_get(struct ra_proc_info *p, int threads);

#endif
