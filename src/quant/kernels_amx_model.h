/* The AMX kernels on a plain-C model of the tiles, for tests.
 *
 * ra_quant_kernels_amx_model is the amx table's code (kernels_amx.h) with
 * each tile instruction replaced by a function of the same semantics (Intel
 * SDM, palette 1: 8 tiles of up to 16 rows of 64 bytes) on the calling
 * thread's own tile state. Where the hardware would fault (#GP, #UD: a tile
 * used unconfigured, rows or colsb out of range, the shapes of a tdpbsud not
 * matching, the same tile twice) the model prints one line naming the
 * instruction and the cause and aborts; the model is stricter than the
 * hardware in one place, a start_row other than 0 (set only when an
 * interrupted instruction restarts). In builds with the AVX512-VNNI kernels
 * (RA_HAVE_AVX512VNNI_KERNELS), compiled with their flags: it runs where
 * ra_quant_isa_supported(RA_QUANT_ISA_AVX512VNNI). */
#ifndef RA_QUANT_KERNELS_AMX_MODEL_H
#define RA_QUANT_KERNELS_AMX_MODEL_H

#include "quant.h"

extern const struct ra_quant_kernels ra_quant_kernels_amx_model;

/* The calling thread's model: instructions run, and whether tiles are configured now. */
struct ra_amx_model_stats {
    long loadconfig, loadd, stored, zero, dpbsud, release;
    int configured;
};
void ra_amx_model_stats(struct ra_amx_model_stats *out);

/* The tile instructions (ldtilecfg, tileloadd, tilestored, tilezero,
 * tdpbsud, tilerelease); t, c, a, b: tile numbers. */
void ra_amx_model_loadconfig(const void *cfg);
void ra_amx_model_loadd(int t, const void *base, long stride);
void ra_amx_model_stored(int t, void *base, long stride);
void ra_amx_model_zero(int t);
void ra_amx_model_dpbsud(int c, int a, int b);
void ra_amx_model_release(void);

#endif
