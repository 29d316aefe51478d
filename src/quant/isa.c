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
#if defined(RA_HAVE_AMX_KERNELS) && defined(__linux__)
#include <errno.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

extern const struct ra_quant_kernels ra_quant_kernels_portable, ra_quant_kernels_avx2, ra_quant_kernels_avxvnni,
    ra_quant_kernels_avx512vnni, ra_quant_kernels_amx;

static const char *const isa_names[RA_QUANT_ISA_COUNT] = { "portable", "avx2", "avxvnni", "avx512vnni", "amx" };

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
#ifdef RA_HAVE_AMX_KERNELS
    case RA_QUANT_ISA_AMX: return &ra_quant_kernels_amx;
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

/* Whether the CPU, the OS and Linux let this process use AMX-INT8 tiles: the
 * CPU has AMX-TILE and AMX-INT8 (leaf 7 EDX bits 24, 25), the OS saves the
 * tile state (XCR0 bits 17, 18), and Linux grants this process the tile data
 * (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; without it the
 * first tile instruction is a SIGILL). Asked once per process, the answer
 * kept: the grant covers every thread. *why: the reason when not, and
 * *listed whether the CPU lists the tiles at all. */
#if defined(RA_HAVE_AMX_KERNELS) && defined(__linux__)
#define RA_ARCH_REQ_XCOMP_PERM 0x1023
#define RA_XFEATURE_XTILEDATA 18
static char amx_why[128];
static atomic_int amx_state; /* 0: not asked; 1: usable; 2: not (amx_why); 3: the CPU lists none */

static int amx_ask(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1))
        return 3;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1)) { /* OSXSAVE */
        snprintf(amx_why, sizeof amx_why, "the OS enables no extended state (XSAVE)");
        return 2;
    }
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo >> 17 & 3) != 3) {
        snprintf(amx_why, sizeof amx_why, "the OS does not save the tile state (XCR0 bits 17-18 clear)");
        return 2;
    }
    if (syscall(SYS_arch_prctl, RA_ARCH_REQ_XCOMP_PERM, RA_XFEATURE_XTILEDATA) != 0) {
        snprintf(amx_why, sizeof amx_why, "Linux refused the tile data (arch_prctl ARCH_REQ_XCOMP_PERM: %s)",
                 strerror(errno));
        return 2;
    }
    return 1;
}

static int amx_usable(const char **why, int *listed)
{
    int s = atomic_load(&amx_state);
    if (s == 0) {
        s = amx_ask(); /* two threads may both ask: the grant is idempotent */
        atomic_store(&amx_state, s);
    }
    *listed = s != 3;
    *why = s == 1 ? NULL : s == 2 ? amx_why : "this CPU has no AMX-INT8 tiles";
    return s == 1;
}
#else
static int amx_usable(const char **why, int *listed)
{
    *listed = 0;
    *why = "this build has no AMX kernels";
    return 0;
}
#endif

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
    case RA_QUANT_ISA_AMX: {
        const char *why;
        int listed;
        return cpu >= RA_CPU_ISA_AVX512 && avx512vnni && amx_usable(&why, &listed);
    }
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

/* ": <why>" where the AMX kernels cannot run and either ALWAYS or the CPU
 * lists the tiles (the OS or Linux withholds them); else "". */
static void amx_note(char *buf, size_t size, int always)
{
    const char *why;
    int listed;
    buf[0] = '\0';
    if (ra_quant_isa_supported(RA_QUANT_ISA_AMX))
        return;
    if (!ra_quant_kernels_for(RA_QUANT_ISA_AMX)) {
        if (always)
            snprintf(buf, size, ": this build has no AMX kernels (AMX_CFLAGS)");
    } else if (!amx_usable(&why, &listed) && (always || listed))
        snprintf(buf, size, ": %s", why);
    else if (always)
        snprintf(buf, size, ": the CPU kernels in use or the CPU lack AVX512-VNNI");
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
        return ra_error_set(RA_EINVAL, "RA_QUANT_ISA='%s': not one of amx, avx512vnni, avxvnni, avx2, portable", env);
    if (!ra_quant_isa_supported((enum ra_quant_isa)want)) {
        char list[64], why[160] = "";
        supported_list(list, sizeof list);
        amx_note(why, sizeof why, want == RA_QUANT_ISA_AMX);
        return ra_error_set(RA_EUNSUPPORTED, "RA_QUANT_ISA=%s: this CPU, build or RA_CPU_ISA cannot run the %s "
                            "kernels%s (supported: %s)", env, isa_names[want], why, list);
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
    char list[64], why[160];
    const struct ra_quant_kernels *k;
    supported_list(list, sizeof list);
    amx_note(why, sizeof why, 0);
    if (ra_quant_kernels_active(&k) == RA_OK)
        snprintf(buf, size, "%s (this CPU and build: %s%s%s)", isa_names[k->isa], list, why[0] ? "; amx" : "", why);
    else
        snprintf(buf, size, "none: %s", ra_error_message());
}
