/* Run-time choice of the quantized-weight kernels; see quant.h. */
#include "quant.h"
#include "cpu_isa.h"
#include "status.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef RA_HAVE_X86_KERNELS
#include <cpuid.h>
#endif

extern const struct ra_quant_kernels ra_quant_kernels_portable, ra_quant_kernels_avx2, ra_quant_kernels_avxvnni,
    ra_quant_kernels_avx512vnni;

static const char *const isa_names[RA_QUANT_ISA_COUNT] = { "portable", "avx2", "avxvnni", "avx512vnni" };

/* -1 until the first ra_quant_kernels_active. */
static int chosen = -1;

const char *ra_quant_isa_name(enum ra_quant_isa isa)
{
    return (unsigned)isa < RA_QUANT_ISA_COUNT ? isa_names[isa] : "unknown";
}

const struct ra_quant_kernels *ra_quant_kernels_for(enum ra_quant_isa isa)
{
    switch (isa) {
    case RA_QUANT_ISA_PORTABLE: return &ra_quant_kernels_portable;
#ifdef RA_HAVE_X86_KERNELS
    case RA_QUANT_ISA_AVX2: return &ra_quant_kernels_avx2;
#endif
#ifdef RA_HAVE_AVXVNNI_KERNELS
    case RA_QUANT_ISA_AVXVNNI: return &ra_quant_kernels_avxvnni;
#endif
#ifdef RA_HAVE_AVX512VNNI_KERNELS
    case RA_QUANT_ISA_AVX512VNNI: return &ra_quant_kernels_avx512vnni;
#endif
    default: return NULL;
    }
}

/* What the CPU has beyond what cpu_isa.c checks: AVX512-BW and -VNNI (leaf 7
 * EBX bit 30, ECX bit 11), AVX-VNNI (leaf 7 subleaf 1 EAX bit 4). Their
 * register state is AVX's or AVX-512's, which the CPU kernels' check covers. */
static void vnni_features(int *avx512vnni, int *avxvnni)
{
    *avx512vnni = *avxvnni = 0;
#ifdef RA_HAVE_X86_KERNELS
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    *avx512vnni = (b >> 30 & 1) && (c >> 11 & 1);
    if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
        *avxvnni = a >> 4 & 1;
#endif
}

int ra_quant_isa_supported(enum ra_quant_isa isa)
{
    if (!ra_quant_kernels_for(isa))
        return 0;
    enum ra_cpu_isa cpu;
    if (ra_cpu_isa_active(&cpu) != RA_OK)
        return isa == RA_QUANT_ISA_PORTABLE;
    int avx512vnni, avxvnni;
    vnni_features(&avx512vnni, &avxvnni);
    switch (isa) {
    case RA_QUANT_ISA_PORTABLE: return 1;
    case RA_QUANT_ISA_AVX2: return cpu >= RA_CPU_ISA_AVX2;
    case RA_QUANT_ISA_AVXVNNI: return cpu >= RA_CPU_ISA_AVX2 && avxvnni;
    case RA_QUANT_ISA_AVX512VNNI: return cpu >= RA_CPU_ISA_AVX512 && avx512vnni;
    default: return 0;
    }
}

static void supported_list(char *buf, size_t size)
{
    buf[0] = '\0';
    for (int isa = RA_QUANT_ISA_COUNT - 1; isa >= 0; isa--)
        if (ra_quant_isa_supported((enum ra_quant_isa)isa)) {
            if (buf[0])
                strncat(buf, ", ", size - strlen(buf) - 1);
            strncat(buf, isa_names[isa], size - strlen(buf) - 1);
        }
}

static int choose(void)
{
    const char *env = getenv("RA_QUANT_ISA");
    int want = -1;
    if (!env || !*env) {
        want = RA_QUANT_ISA_COUNT - 1;
        while (want > 0 && !ra_quant_isa_supported((enum ra_quant_isa)want))
            want--;
    }
    for (int i = 0; want < 0 && i < RA_QUANT_ISA_COUNT; i++)
        if (strcmp(env, isa_names[i]) == 0)
            want = i;
    if (want < 0)
        return ra_error_set(RA_EINVAL, "RA_QUANT_ISA='%s': not one of avx512vnni, avxvnni, avx2, portable", env);
    if (!ra_quant_isa_supported((enum ra_quant_isa)want)) {
        char list[64];
        supported_list(list, sizeof list);
        return ra_error_set(RA_EUNSUPPORTED, "RA_QUANT_ISA=%s: this CPU, build or RA_CPU_ISA cannot run the %s kernels "
                            "(supported: %s)", env, isa_names[want], list);
    }
    chosen = want;
    return RA_OK;
}

int ra_quant_kernels_active(const struct ra_quant_kernels **out)
{
    int rc;
    if (chosen < 0 && (rc = choose()) != RA_OK)
        return rc;
    *out = ra_quant_kernels_for((enum ra_quant_isa)chosen);
    return RA_OK;
}

void ra_quant_isa_describe(char *buf, size_t size)
{
    char list[64];
    const struct ra_quant_kernels *k;
    supported_list(list, sizeof list);
    if (ra_quant_kernels_active(&k) == RA_OK)
        snprintf(buf, size, "%s (this CPU and build: %s)", isa_names[k->isa], list);
    else
        snprintf(buf, size, "none: %s", ra_error_message());
}
