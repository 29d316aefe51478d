/* Block-quantized weights: ggml's formats, computed on where they lie.
 *
 * A GGUF file's Q8_0, Q4_0, Q4_1, Q4_K and Q6_K matrices stay in the mapping
 * in ggml's own block layouts (struct ra_block_*), so a file maps without
 * conversion and a rank reads half (Q8_0) to a quarter (Q4_*) of the bytes of
 * bf16 per token. Decode is a GEMV bound by those bytes: the activations are
 * quantized per block to int8 (struct ra_block_q8x, ra_block_q8k) and the
 * dot products run on the CPU's int8 units. Prefill (ra_quant_matmul, more
 * tokens than a decode step) picks, per instruction set, the faster of those
 * int8 products and dequantizing panels of weights for the fp32 or bf16 GEMM.
 *
 * The kernels of every instruction set are in the binary and chosen at run
 * time, as the CPU kernels are (cpu_isa.h): RA_QUANT_ISA=amx|avx512vnni|
 * avxvnni|avx2|portable forces one; it never exceeds what RA_CPU_ISA allows
 * (avx2 kernels there: at most avx2 here). Every kernel is checked against a
 * double-precision product on the dequantized weights (tests/test_quant.c). */
#ifndef RA_QUANT_H
#define RA_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "panel.h"

#define RA_QK 32    /* elements per block of Q8_0, Q4_0, Q4_1 */
#define RA_QK_K 256 /* elements per super-block of Q4_K, Q6_K */

/* ggml's layouts, byte for byte (d, m, dmin: IEEE half). */
struct ra_block_q8_0 { /* x = d * q */
    uint16_t d;
    int8_t qs[RA_QK];
};
struct ra_block_q4_0 { /* x = d * (q - 8); element j in byte j's low nibble, j + 16 in its high */
    uint16_t d;
    uint8_t qs[RA_QK / 2];
};
struct ra_block_q4_1 { /* x = d * q + m; nibbles as Q4_0 */
    uint16_t d, m;
    uint8_t qs[RA_QK / 2];
};
struct ra_block_q4_k { /* 8 sub-blocks of 32: x = d * sc * q - dmin * mn, 6-bit sc and mn packed in scales */
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[RA_QK_K / 2];
};
struct ra_block_q6_k { /* 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q = 4 low bits from ql, 2 high from qh */
    uint8_t ql[RA_QK_K / 2];
    uint8_t qh[RA_QK_K / 4];
    int8_t scales[RA_QK_K / 16];
    uint16_t d;
};
_Static_assert(sizeof(struct ra_block_q8_0) == 34, "ggml's block_q8_0");
_Static_assert(sizeof(struct ra_block_q4_0) == 18, "ggml's block_q4_0");
_Static_assert(sizeof(struct ra_block_q4_1) == 20, "ggml's block_q4_1");
_Static_assert(sizeof(struct ra_block_q4_k) == 144, "ggml's block_q4_K");
_Static_assert(sizeof(struct ra_block_q6_k) == 210, "ggml's block_q6_K");

/* Activations as the 32-element formats' dot products read them: x[j] ~ d *
 * qs[j], d = max|x| / 127, and s = d * sum(qs), the term Q4_0's -8 and Q4_1's
 * m multiply. d and s are fp32 (ggml keeps fp16): no rounding beyond the int8
 * quantization itself. */
struct ra_block_q8x {
    float d, s;
    int8_t qs[RA_QK];
};
/* The same for the K formats, as ggml's block_q8_K: one d per 256, and the
 * sums of each 16 quants (bsums), which the K formats' mins multiply. */
struct ra_block_q8k {
    float d;
    int8_t qs[RA_QK_K];
    int16_t bsums[RA_QK_K / 16];
};

/* The weight type of ggml type T (RA_GGML_Q8_0 -> RA_DTYPE_Q8_0, also F32,
 * F16, BF16); RA_EUNSUPPORTED naming the type for any other. */
int ra_quant_from_ggml(uint32_t t, enum ra_dtype *out);
/* ggml's type id of a weight type. */
uint32_t ra_quant_to_ggml(enum ra_dtype t);

/* Bytes of one token's activation blocks for a K-element row of weights of
 * type wtype: K / 32 ra_block_q8x (Q8_0, Q4_0, Q4_1) or K / 256 ra_block_q8k
 * (Q4_K, Q6_K). */
size_t ra_quant_act_row_bytes(enum ra_dtype wtype, int64_t k);

/* ------------------------------------------------------------------ reference
 * Plain C, one thread: the oracle the kernels are tested against and what the
 * programs use off the hot path. */

/* dst[0..n) = the values of n elements of type t (whole blocks); ggml's
 * dequantize_row_* (the GGUF reader's conversion, checked against gguf-py). */
int ra_quant_dequantize(enum ra_dtype t, const void *src, float *dst, int64_t n);

/* Quantizes n floats (whole blocks) to type t, as llama.cpp's reference
 * quantizers without an importance matrix: Q8_0, Q4_0, Q4_1 round to the
 * block's scale; Q4_K and Q6_K search each sub-block's scale and min. For
 * runahead-quantize. RA_EINVAL for a partial block or a non-finite value. */
int ra_quant_quantize(enum ra_dtype t, const float *src, void *dst, int64_t n);

/* xq = x (k floats) as the activation blocks of weight type wtype
 * (ra_quant_act_row_bytes bytes): d = max|x| / 127 and q = roundf(x * (127 /
 * max|x|)) (ties away from zero; a zero block has d = 0 and every q 0). The
 * kernels' quantize_act gives the same bytes. */
void ra_quant_act_ref(enum ra_dtype wtype, const float *x, void *xq, int64_t k);

/* ------------------------------------------------------------------ kernels */

enum ra_quant_isa {
    RA_QUANT_ISA_PORTABLE = 0, /* plain C */
    RA_QUANT_ISA_AVX2,         /* AVX2 + FMA: vpmaddubsw + vpmaddwd */
    RA_QUANT_ISA_AVXVNNI,      /* AVX2 + AVX-VNNI (VEX vpdpbusd: Alder Lake, Sapphire Rapids, Zen 5) */
    RA_QUANT_ISA_AVX512VNNI,   /* AVX-512F/BW + AVX512-VNNI (Cascade Lake, Zen 4 and later) */
    RA_QUANT_ISA_AMX,          /* AVX512-VNNI's kernels, the prefill GEMM on AMX-INT8 tiles (Sapphire Rapids);
                                  Linux must grant the tile state (arch_prctl), asked once per process */
    RA_QUANT_ISA_COUNT
};

struct ra_quant_kernels {
    enum ra_quant_isa isa;
    /* ra_quant_act_ref, vectorised: the same bytes. */
    void (*quantize_act)(void *xq, const float *x, int64_t k, enum ra_dtype wtype);
    /* y[t*ldy + r] = w[r] . x_t for t < n, r < rows: w [rows][k] in wtype's
     * blocks (row r at r * ra_dtype_row_bytes(wtype, k)), xq n tokens'
     * activation blocks (ra_quant_act_row_bytes apart). One thread; any n >= 1,
     * fastest in groups of up to 4 tokens, which share each weight load; a
     * token's outputs are the same bits whatever the other tokens of the call. */
    void (*gemv)(float *y, int ldy, const void *xq, int n, const void *w, enum ra_dtype wtype, int64_t rows,
                 int64_t k);
    /* dst[0..count) = the values of count elements of wtype (whole blocks);
     * ra_quant_dequantize's floats exactly. One thread. */
    void (*dequantize)(float *dst, const void *w, enum ra_dtype wtype, int64_t count);
    /* The prefill GEMM on packed panels (panel.h; 64-byte aligned):
     * ra_qpanel_gemm_ref's y, the integer sums exact, the float order the
     * kernel's own, and a token's outputs independent of the other tokens of
     * the call. One thread. */
    void (*gemm)(float *y, int ldy, const struct ra_qact *a, int n_tok, const void *panels, int np, int ncols);
    /* ra_qact_quantize_ref, vectorised: the same bytes. */
    void (*quantize_qact)(struct ra_qact *a, int t, const float *x);
    /* Non-zero: gemm is exact only for u < 128 (AVX2's vpmaddubsw sums pairs
     * of products into int16): Q4_0, Q4_1, Q4_K, Q6_K panels, not Q8_0's. */
    int gemm_u7;
};

/* "portable", "avx2", "avxvnni", "avx512vnni", "amx" */
const char *ra_quant_isa_name(enum ra_quant_isa isa);
/* Non-zero if this build has kernels for isa, the CPU and OS run them and
 * the CPU kernels in use (RA_CPU_ISA) allow them. */
int ra_quant_isa_supported(enum ra_quant_isa isa);
/* The kernels of isa, or NULL if this build has none. */
const struct ra_quant_kernels *ra_quant_kernels_for(enum ra_quant_isa isa);
/* The kernels in use: RA_QUANT_ISA, else the best supported. RA_EINVAL or
 * RA_EUNSUPPORTED (naming the variable and what is supported) otherwise. */
int ra_quant_kernels_active(const struct ra_quant_kernels **out);
/* One line for --version: "avx512vnni (this CPU and build: avx512vnni, avx2, portable)"; where
 * the CPU has AMX-INT8 tiles the OS or Linux withholds, why ("...; amx: ..."). */
void ra_quant_isa_describe(char *buf, size_t size);

/* ------------------------------------------------------------------ the op */

struct ra_gemm_bf16;
struct ra_quant_matmul; /* per backend: scratch for quantized activations and dequantized panels */

/* Up to this many tokens a matmul is a decode step: the int8 GEMV, which
 * reads the weights once. */
#define RA_QMM_GEMV_MAX_N 4
/* Up to this many tokens the automatic choice keeps the int8 GEMV where
 * the kernels are SIMD (the weights are read a few times only: dequantizing
 * them costs more than the products). */
#define RA_QMM_INT8_MAX_N 16

/* How prefill (more than RA_QMM_GEMV_MAX_N tokens) multiplies: the int8
 * products on quantized activations (llama.cpp's scheme), or panels of
 * weights dequantized for sgemm (f32) or for the bf16 unit (bf16), where
 * the activations are not quantized. auto: the fastest here (matmul.c). */
enum ra_quant_gemm {
    RA_QUANT_GEMM_AUTO = 0,
    RA_QUANT_GEMM_INT8, /* the int8 GEMM on packed panels (panel.h) */
    RA_QUANT_GEMM_F32,
    RA_QUANT_GEMM_BF16,
    RA_QUANT_GEMM_GEMV, /* int8 too, as the GEMV over groups of 4 tokens (the weights as stored) */
    RA_QUANT_GEMM_COUNT
};
/* "auto", "int8", "f32", "bf16", "gemv"; the parse sets RA_EINVAL naming RA_QUANT_GEMM. */
const char *ra_quant_gemm_name(enum ra_quant_gemm g);
int ra_quant_gemm_parse(const char *s, enum ra_quant_gemm *out);

/* bf16: the backend's bf16 unit, or NULL (prefill may dequantize to bf16 for
 * it). The kernels are those in use (ra_quant_kernels_active); the prefill
 * path is RA_QUANT_GEMM's (int8|f32|bf16|gemv|auto; bf16 without a unit is
 * RA_EUNSUPPORTED). */
int ra_quant_matmul_create(struct ra_quant_matmul **out, int n_threads, struct ra_gemm_bf16 *bf16);
void ra_quant_matmul_free(struct ra_quant_matmul *qm);
/* Forces the prefill path (tests, benchmarks); RA_EUNSUPPORTED for bf16
 * without a bf16 unit. */
int ra_quant_matmul_set_gemm(struct ra_quant_matmul *qm, enum ra_quant_gemm g);
/* Whether prefill may use the bf16 unit (the backend's --compute-dtype f32
 * says no; default yes): without it a forced or chosen bf16 path runs f32. */
void ra_quant_matmul_allow_bf16(struct ra_quant_matmul *qm, int allow);
/* The path prefill takes here on wtype's weights for more than
 * RA_QMM_INT8_MAX_N tokens: the forced one, else the fastest (never AUTO). */
enum ra_quant_gemm ra_quant_matmul_prefill_path(const struct ra_quant_matmul *qm, enum ra_dtype wtype);
/* Runs on another supported instruction set's kernels (tests, benchmarks);
 * RA_EUNSUPPORTED where ra_quant_isa_supported says no. */
int ra_quant_matmul_set_isa(struct ra_quant_matmul *qm, enum ra_quant_isa isa);

/* y[n][w->rows] (row stride ldy) = x[n][w->cols] (row stride ldx) . wᵀ for
 * a block-quantized w, on up to n_threads OpenMP threads. The CPU backend's
 * matmul for these types. */
int ra_quant_matmul(struct ra_quant_matmul *qm, float *y, int ldy, const float *x, int ldx,
                    const struct ra_tensor *w, int n, int n_threads);

/* One line on how prefill computes on quantized weights here ("int8
 * avx512vnni", "dequantized to bf16, oneDNN ..."), for --version and reports. */
void ra_quant_matmul_describe(const struct ra_quant_matmul *qm, char *buf, size_t size);

#endif
