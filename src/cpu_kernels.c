/* Which kernel table runs; see cpu_kernels.h. */
#include "cpu_kernels.h"
#include "status.h"

#include "config.h"

const struct ra_cpu_kernels *ra_cpu_kernels_for(enum ra_cpu_isa isa)
{
    switch (isa) {
    case RA_CPU_ISA_PORTABLE:
        return &ra_cpu_kernels_portable;
#ifdef RA_HAVE_X86_KERNELS
    case RA_CPU_ISA_AVX2:
        return &ra_cpu_kernels_avx2;
    case RA_CPU_ISA_AVX512:
        return &ra_cpu_kernels_avx512;
#endif
#ifdef RA_HAVE_AVX512BF16_KERNELS
    case RA_CPU_ISA_AVX512BF16:
        return &ra_cpu_kernels_avx512bf16;
#endif
    default:
        return NULL;
    }
}

int ra_cpu_kernels_active(const struct ra_cpu_kernels **out)
{
    enum ra_cpu_isa isa;
    int rc = ra_cpu_isa_active(&isa);
    if (rc != RA_OK)
        return rc;
    *out = ra_cpu_kernels_for(isa);
    if (!*out)
        return ra_error_set(RA_EUNSUPPORTED, "cpu kernels: this build has no %s kernels (configure found no compiler flags for them)",
                            ra_cpu_isa_name(isa));
    return RA_OK;
}
