/* Run-time choice of the CPU kernels; see cpu_isa.h. */
#include "cpu_isa.h"
#include "status.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isa_names[RA_CPU_ISA_COUNT] = { "portable", "avx2", "avx512" };

/* -1 until chosen; set by ra_cpu_isa_select or the first ra_cpu_isa_active. */
static int chosen = -1;

const char *ra_cpu_isa_name(enum ra_cpu_isa isa)
{
    return (unsigned)isa < RA_CPU_ISA_COUNT ? isa_names[isa] : "unknown";
}

int ra_cpu_isa_supported(enum ra_cpu_isa isa)
{
    switch (isa) {
    case RA_CPU_ISA_PORTABLE:
        return 1;
#ifdef RA_HAVE_X86_KERNELS
    /* libgcc's and compiler-rt's checks include the OS's XSAVE state (XGETBV),
     * so a kernel that disabled AVX-512 state reports no avx512f. */
    case RA_CPU_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case RA_CPU_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && ra_cpu_isa_supported(RA_CPU_ISA_AVX2);
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

int ra_cpu_isa_select(enum ra_cpu_isa isa)
{
    if ((unsigned)isa >= RA_CPU_ISA_COUNT)
        return ra_error_set(RA_EINVAL, "cpu kernels: no instruction set %d", (int)isa);
    if (!ra_cpu_isa_supported(isa)) {
        char list[64];
        supported_list(list, sizeof list);
        return ra_error_set(RA_EUNSUPPORTED, "cpu kernels: this CPU cannot run the %s kernels (it supports: %s)",
                            isa_names[isa], list);
    }
    chosen = isa;
    return RA_OK;
}

int ra_cpu_isa_active(enum ra_cpu_isa *isa)
{
    if (chosen < 0) {
        const char *env = getenv("RA_CPU_ISA");
        if (!env || !*env) {
            chosen = best_supported();
        } else {
            int want = -1;
            for (int i = 0; i < RA_CPU_ISA_COUNT; i++)
                if (strcmp(env, isa_names[i]) == 0)
                    want = i;
            if (want < 0)
                return ra_error_set(RA_EINVAL, "RA_CPU_ISA='%s': not one of avx512, avx2, portable", env);
            if (!ra_cpu_isa_supported((enum ra_cpu_isa)want)) {
                char list[64];
                supported_list(list, sizeof list);
                return ra_error_set(RA_EUNSUPPORTED, "RA_CPU_ISA=%s: this CPU cannot run the %s kernels (it supports: %s)",
                                    env, env, list);
            }
            chosen = want;
        }
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
