/* Which CPU kernels run: chosen at run time, not at build time.
 *
 * HPC users build on a login node and run on compute nodes of another
 * generation, so the kernels of every instruction set are in the binary and
 * the best one this CPU (and its OS) supports is used. RA_CPU_ISA=avx512bf16|
 * avx512|avx2|portable forces one; forcing one the CPU lacks is an error,
 * never a SIGILL. */
#ifndef RA_CPU_ISA_H
#define RA_CPU_ISA_H

#include <stddef.h>

enum ra_cpu_isa {
    RA_CPU_ISA_PORTABLE = 0, /* plain C, the compiler's baseline for the target */
    RA_CPU_ISA_AVX2 = 1,     /* AVX2 + FMA */
    RA_CPU_ISA_AVX512 = 2,   /* AVX-512F */
    RA_CPU_ISA_AVX512BF16 = 3, /* AVX-512F + AVX512-BF16 (vdpbf16ps) */
    RA_CPU_ISA_COUNT
};

/* "portable", "avx2", "avx512", "avx512bf16" */
const char *ra_cpu_isa_name(enum ra_cpu_isa isa);

/* Non-zero if this build has kernels for `isa` and this CPU and OS can run them. */
int ra_cpu_isa_supported(enum ra_cpu_isa isa);

/* The instruction set in use: the one selected, else RA_CPU_ISA, else the
 * best supported. RA_EINVAL or RA_EUNSUPPORTED (with a message naming the
 * variable and what this CPU supports) if RA_CPU_ISA is unknown or unsupported. */
int ra_cpu_isa_active(enum ra_cpu_isa *isa);

/* Use `isa` from now on in this process (tests, benchmarks); RA_EUNSUPPORTED
 * if the CPU lacks it. Not thread-safe against running kernels. */
int ra_cpu_isa_select(enum ra_cpu_isa isa);

/* One line for --version: "avx512 (this CPU and build: avx512, avx2,
 * portable)", or why RA_CPU_ISA cannot be used. */
void ra_cpu_isa_describe(char *buf, size_t size);

#endif
