/* Run-time choice of the CPU kernels; see cpu_isa.h. */
#include "cpu_isa.h"
#include "status.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_names[RA_CPU_ISA_COUNT] = { "portable", "avx2", "avx512", "avx512bf16" };

/* -1 until chosen; set by ra_cpu_isa_select or the first ra_cpu_isa_active. */
static int chosen = -1;

const char *ra_cpu_isa_name(enum ra_cpu_isa isa)
{
    return (unsigned)isa < RA_CPU_ISA_COUNT ? isa_names[isa] : "unknown";
}

#ifdef RA_HAVE_X86_KERNELS
#include <cpuid.h>

/* The instruction sets the CPU has and the OS saves the registers of: a
 * kernel may disable AVX-512 state (XCR0) even where CPUID lists AVX-512F.
 * Read directly rather than through __builtin_cpu_supports, which differs
 * between compilers (clang 14 knows no "f16c"). */
static void x86_features(int *avx2, int *avx512, int *avx512bf16)
{
    unsigned a, b, c, d;
    *avx2 = *avx512 = *avx512bf16 = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    const int fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
    if (!osxsave || !avx)
        return;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x6) != 0x6) /* SSE and AVX state */
        return;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    /* The AVX2 kernels are built with -mavx2 -mfma -mf16c, the AVX-512 ones with -mavx512f on top. */
    *avx2 = (b >> 5 & 1) && fma && f16c;
    *avx512 = *avx2 && (b >> 16 & 1) && (xcr0_lo & 0xe0) == 0xe0; /* opmask and ZMM state */
    /* AVX512-BF16: leaf 7 subleaf 1, EAX bit 5 (its registers are the AVX-512 state checked above). */
    if (*avx512 && a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
        *avx512bf16 = a >> 5 & 1;
}
#endif

int ra_cpu_isa_supported(enum ra_cpu_isa isa)
{
    switch (isa) {
    case RA_CPU_ISA_PORTABLE:
        return 1;
#ifdef RA_HAVE_X86_KERNELS
    case RA_CPU_ISA_AVX2:
    case RA_CPU_ISA_AVX512:
    case RA_CPU_ISA_AVX512BF16: {
        int avx2, avx512, avx512bf16;
        x86_features(&avx2, &avx512, &avx512bf16);
#ifndef RA_HAVE_AVX512BF16_KERNELS
        avx512bf16 = 0; /* the compiler could not build them */
#endif
        return isa == RA_CPU_ISA_AVX2 ? avx2 : isa == RA_CPU_ISA_AVX512 ? avx512 : avx512bf16;
    }
#endif
    default:
        return 0;
    }
}

static enum ra_cpu_isa best_supported(void)
{
    int isa = RA_CPU_ISA_COUNT - 1;
    while (isa > RA_CPU_ISA_PORTABLE && !ra_cpu_isa_supported((enum ra_cpu_isa)isa))
        isa--;
    return (enum ra_cpu_isa)isa;
}

static void supported_list(char *buf, size_t size)
{
    buf[0] = '\0';
    for (int isa = RA_CPU_ISA_COUNT - 1; isa >= 0; isa--)
        if (ra_cpu_isa_supported((enum ra_cpu_isa)isa)) {
            if (buf[0])
                strncat(buf, ", ", size - strlen(buf) - 1);
            strncat(buf, isa_names[isa], size - strlen(buf) - 1);
        }
}

/* Makes `isa` the choice, or says (as WHO) that this CPU cannot run it. */
static int choose(enum ra_cpu_isa isa, const char *who)
{
    if (!ra_cpu_isa_supported(isa)) {
        char list[64];
        supported_list(list, sizeof list);
        return ra_error_set(RA_EUNSUPPORTED, "%s: this CPU cannot run the %s kernels (it supports: %s)", who,
                            isa_names[isa], list);
    }
    chosen = isa;
    return RA_OK;
}

int ra_cpu_isa_select(enum ra_cpu_isa isa)
{
    if ((unsigned)isa >= RA_CPU_ISA_COUNT)
        return ra_error_set(RA_EINVAL, "cpu kernels: no instruction set %d", (int)isa);
    return choose(isa, "cpu kernels");
}

int ra_cpu_isa_active(enum ra_cpu_isa *isa)
{
    if (chosen < 0) {
        const char *env = getenv("RA_CPU_ISA");
        int want = -1, rc;
        if (!env || !*env)
            want = best_supported();
        for (int i = 0; want < 0 && i < RA_CPU_ISA_COUNT; i++)
            if (strcmp(env, isa_names[i]) == 0)
                want = i;
        if (want < 0)
            return ra_error_set(RA_EINVAL, "RA_CPU_ISA='%s': not one of avx512bf16, avx512, avx2, portable", env);
        char who[64];
        snprintf(who, sizeof who, "RA_CPU_ISA=%s", env ? env : "");
        if ((rc = choose((enum ra_cpu_isa)want, who)) != RA_OK)
            return rc;
    }
    *isa = (enum ra_cpu_isa)chosen;
    return RA_OK;
}

void ra_cpu_isa_describe(char *buf, size_t size)
{
    char list[64];
    enum ra_cpu_isa isa;
    supported_list(list, sizeof list);
    if (ra_cpu_isa_active(&isa) == RA_OK)
        snprintf(buf, size, "%s (this CPU and build: %s)", ra_cpu_isa_name(isa), list);
    else
        snprintf(buf, size, "none: %s", ra_error_message());
}
