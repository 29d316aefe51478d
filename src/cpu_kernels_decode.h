/* Attention of a decode step.
 *
 * A decode step has one query (or a few) per head. The item layout above
 * would use one lane of each vector and read each head's 256 bytes of a
 * cache row separately, kilobytes apart: a long context's attention then
 * runs at a fraction of the memory's rate. Here every head is done at once,
 * key by key: each K and V row is read whole and in order (the prefetchers
 * stream it), vectors run along head_dim (q·K[j], o += p V[j]). The keys are
 * split into at most DEC_CHUNKS chunks of whole BK blocks, fixed by the
 * context alone (not the thread count, so results do not depend on it); the
 * chunks run in parallel, each with its own online softmax state, merged in
 * order at the end (flash-decoding). Within a chunk the blocks and the
 * softmax are the block kernel's (absolute blocks of BK keys, scores in log2
 * units, the same 2^x): results match it to rounding of the sums' order.
 *
 * Part of the CPU kernels (cpu_kernels_impl.h includes it once per
 * instruction set, after cpu_kernels_prefill.h, whose blocks, exp2 and
 * attention_items it uses); not a header of its own. */
#define DEC_MAX_N 4      /* tokens per step this path takes */
#define DEC_CHUNKS 8     /* key chunks at most */
#define DEC_CHUNK_MIN 512 /* keys per chunk at least */


/* A bf16 cache row's elements [0, VL) widened to fp32 in registers (exact). */
#if ATTN_SIMD == 512
static inline vf vload_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
static inline __m256 vload_bf16_half(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#elif ATTN_SIMD == 256
static inline vf vload_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
#endif

static inline const float *dec_widen(float *dst, const uint16_t *src, int hd)
{
    for (int d = 0; d < hd; d++)
        dst[d] = ra_bf16_to_f32(src[d]);
    return dst;
}

/* a · b over hd elements; a is the (aligned) query, b a head's slice of a
 * cache row in the cache's dtype, widened in registers. */
static inline float dec_dot(const float *a, const void *bv, enum ra_dtype dt, int hd)
{
#if ATTN_SIMD
    if (hd % VL == 0) {
        vf acc = vzero();
        if (dt == RA_DTYPE_F32)
            for (int d = 0; d < hd; d += VL)
                acc = vfma(vload(a + d), vloadu((const float *)bv + d), acc);
        else
            for (int d = 0; d < hd; d += VL)
                acc = vfma(vload(a + d), vload_bf16((const uint16_t *)bv + d), acc);
        return vsum(acc);
    }
#endif
#if ATTN_SIMD == 512
    if (hd % 8 == 0) { /* small heads (stories260K: 8) in half vectors */
        __m256 acc = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d),
                                  dt == RA_DTYPE_F32 ? _mm256_loadu_ps((const float *)bv + d)
                                                     : vload_bf16_half((const uint16_t *)bv + d),
                                  acc);
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        return _mm_cvtss_f32(h);
    }
#endif
    /* Scalar code: bf16 rows widened first, so that both dtypes run the
     * one loop (the compiler's order of the sums is then the same). */
    float wide[dt == RA_DTYPE_F32 ? 1 : hd];
    const float *b = dt == RA_DTYPE_F32 ? bv : dec_widen(wide, bv, hd);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < hd; d++)
        s += a[d] * b[d];
    return s;
}

/* o += p v over hd elements, o aligned, v a head's slice of a cache row in the cache's dtype */
static inline void dec_axpy(float *o, float p, const void *vv, enum ra_dtype dt, int hd)
{
#if ATTN_SIMD
    if (hd % VL == 0) {
        const vf pv = vset1(p);
        if (dt == RA_DTYPE_F32)
            for (int d = 0; d < hd; d += VL)
                vstore(o + d, vfma(pv, vloadu((const float *)vv + d), vload(o + d)));
        else
            for (int d = 0; d < hd; d += VL)
                vstore(o + d, vfma(pv, vload_bf16((const uint16_t *)vv + d), vload(o + d)));
        return;
    }
#endif
#if ATTN_SIMD == 512
    if (hd % 8 == 0) {
        const __m256 pv = _mm256_set1_ps(p);
        for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(o + d, _mm256_fmadd_ps(pv,
                                                    dt == RA_DTYPE_F32 ? _mm256_loadu_ps((const float *)vv + d)
                                                                       : vload_bf16_half((const uint16_t *)vv + d),
                                                    _mm256_loadu_ps(o + d)));
        return;
    }
#endif
    float wide[dt == RA_DTYPE_F32 ? 1 : hd];
    const float *v = dt == RA_DTYPE_F32 ? vv : dec_widen(wide, vv, hd);
#pragma omp simd
    for (int d = 0; d < hd; d++)
        o[d] += p * v[d];
}

/* The largest of mx and st[0, nk) (st aligned). This, the rescale of the
 * output and the rounding of P to bf16 run in vectors, as dec_exp does: a
 * lane at a time they took a fifth of the bf16 decode attention's time with
 * its rows in cache, and a sixth from memory. */
static inline float dec_max(const float *st, int nk, float mx)
{
    int j = 0;
#if ATTN_SIMD
    vf m = vset1(mx);
    for (; j + VL <= nk; j += VL)
        m = vmax(vload(st + j), m); /* m where either is NaN: a NaN score is skipped, as below */
    mx = vmaxall(m);
#endif
    for (; j < nk; j++)
        mx = st[j] > mx ? st[j] : mx;
    return mx;
}

/* o[0, hd) *= a (o aligned) */
static inline void dec_scale(float *o, float a, int hd)
{
    int d = 0;
#if ATTN_SIMD
    for (; d + VL <= hd; d += VL)
        vstore(o + d, vmul(vload(o + d), vset1(a)));
#endif
    for (; d < hd; d++)
        o[d] *= a;
}

/* st[0, nk) rounded to bf16 values in place, to nearest even: by vcvtneps2bf16
 * as the prefill's pack_pairs rounds P (P = 2^x >= 2^-126 is never subnormal,
 * so its flush to zero never applies and the result is ra_f32_to_bf16's). */
static inline void dec_round_bf16(float *st, int nk)
{
    int j = 0;
#if defined(RA_KERNELS_BF16DP)
    for (; j + VL <= nk; j += VL)
        vstore(st + j, _mm512_castsi512_ps(_mm512_slli_epi32(
                           _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(vload(st + j))), 16)));
#endif
    for (; j < nk; j++)
        st[j] = ra_bf16_to_f32(ra_f32_to_bf16(st[j]));
}

/* st[0, nk) = 2^(st - mx) in place; returns their sum. */
static inline float dec_exp(float *st, int nk, float mx)
{
    float sum = 0;
    int j = 0;
#if ATTN_SIMD
    vf sv = vzero();
    for (; j + VL <= nk; j += VL) {
        const vf p = vexp2_neg(vsub(vload(st + j), vset1(mx)));
        vstore(st + j, p);
        sv = vadd(sv, p);
    }
    sum = vsum(sv);
#endif
    for (; j < nk; j++) {
        st[j] = exp2_neg_s(st[j] - mx);
        sum += st[j];
    }
    return sum;
}

/* Per chunk state: per query row r (token r / n_heads, head r % n_heads)
 * the running max m, sum l, output o[hd]; scores st[BK] of the block. */
struct dec_chunk {
    float *o, *m, *l, *st;
};

/* What the chunks share: per query row r its scaled query qs[r*ldo...], the
 * offset of its KV head in a cache row and its position (the last key it
 * sees); and whether P is rounded to bf16 before P·V (bf16 rows on the
 * AVX512-BF16 build, see attention()). */
struct dec_rows {
    const float *qs;
    const uint16_t *qb; /* with round_p: the same queries in bf16, for vdpbf16ps */
    const int *koff, *pos;
    int rows, round_p;
    size_t ldo;
};

#if defined(RA_KERNELS_BF16DP)
/* q · k for a bf16 query and a bf16 row (hd a multiple of 32): vdpbf16ps
 * takes 32 of each per instruction, with the products dec_dot forms from the
 * same values (exact in fp32), summed in pairs. */
static inline float dec_dot_dp(const uint16_t *q, const uint16_t *k, int hd)
{
    __m512 acc = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 32)
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512(k + d), (__m512bh)_mm512_load_si512(q + d));
    return _mm512_reduce_add_ps(acc);
}
#endif

#if ATTN_SIMD == 512
/* O += P·V for a group of rows over the keys [kb, kb+nkb) of a block, with
 * their outputs in 24 registers (nvec = head_dim/16 vectors a row, 24/nvec
 * rows): each V row is still read whole and in order, but the outputs are
 * loaded and stored once a block instead of once a key (faster from cache
 * and in decode at long contexts: jobs/README.md); reading a block head by
 * head instead, to keep one head's output in registers, loses the hardware
 * prefetch. The same fma(p, v, o) in the same key order as
 * dec_axpy, so the results are the same bit for bit. */
#define DEC_PV_REGS 24
static inline __attribute__((always_inline)) vf dec_pv_load(const int bf16, const char *row, int e)
{
    return bf16 ? vload_bf16((const uint16_t *)row + e) : vloadu((const float *)row + e);
}
static inline __attribute__((always_inline)) void dec_pv_regs(const int nvec, const int bf16, float *o, size_t ldo,
                                                              const float *st, const int *koff, const char *vc,
                                                              size_t row_bytes, int nkb)
{
#define DEC_ROW(s) ((s) / nvec)
#define DEC_OFF(s) ((size_t)DEC_ROW(s) * ldo + VL * ((s) % nvec))
#define DEC_X(m) m(0) m(1) m(2) m(3) m(4) m(5) m(6) m(7) m(8) m(9) m(10) m(11) m(12) m(13) m(14) m(15) m(16) \
    m(17) m(18) m(19) m(20) m(21) m(22) m(23)
#define DEC_DECL(s) vf a##s = vload(o + DEC_OFF(s));
#define DEC_FMA(s) a##s = vfma(vset1(st[DEC_ROW(s) * BK + j]), \
                               dec_pv_load(bf16, vrow, koff[DEC_ROW(s)] + VL * ((s) % nvec)), a##s);
#define DEC_STORE(s) vstore(o + DEC_OFF(s), a##s);
    DEC_X(DEC_DECL)
    for (int j = 0; j < nkb; j++) {
        const char *vrow = vc + (size_t)j * row_bytes;
        DEC_X(DEC_FMA)
    }
    DEC_X(DEC_STORE)
#undef DEC_ROW
#undef DEC_OFF
#undef DEC_X
#undef DEC_DECL
#undef DEC_FMA
#undef DEC_STORE
}

/* dec_pv_regs over the rows [0, rows - rows % group); returns that count (0
 * where it does not apply: head_dim not 16, 32, 64 or 128, or a row that
 * sees fewer than all nkb keys). */
static int dec_pv_blocks(const struct dec_chunk *c, const struct dec_rows *q, const char *vblk, size_t row_bytes,
                         enum ra_dtype dt, int hd, int nkb, const int *nk)
{
    const int nvec = hd / VL, bf16 = dt == RA_DTYPE_BF16;
    if (hd % VL != 0 || nvec > 8 || DEC_PV_REGS % nvec != 0)
        return 0;
    const int group = DEC_PV_REGS / nvec, done = q->rows - q->rows % group;
    for (int r = 0; r < done; r++)
        if (nk[r] != nkb)
            return 0;
    for (int r0 = 0; r0 < done; r0 += group) {
        float *o = c->o + r0 * q->ldo;
        const float *st = c->st + r0 * BK;
        const int *koff = q->koff + r0;
        switch (nvec * 2 + bf16) {
        case 2: dec_pv_regs(1, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 3: dec_pv_regs(1, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 4: dec_pv_regs(2, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 5: dec_pv_regs(2, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 8: dec_pv_regs(4, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 9: dec_pv_regs(4, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 16: dec_pv_regs(8, 0, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        case 17: dec_pv_regs(8, 1, o, q->ldo, st, koff, vblk, row_bytes, nkb); break;
        default: return 0;
        }
    }
    return done;
}
#endif

/* Asks for rows [0, n) of row_bytes each into the cache hierarchy ahead of
 * use (hint T2). One thread's decode attention over bf16 rows falls well
 * short of the read bandwidth from memory: the hardware prefetchers stop
 * running ahead while a block is computed. Asking for the block's V rows
 * during its K pass, and for the next block's K rows before its P·V, closes
 * much of that gap. Only for bf16 rows on the AVX-512 builds: f32 rows gain
 * nothing, and the AVX2 build, which has more arithmetic per row, loses
 * (jobs/README.md has the figures). */
static inline void dec_prefetch(const char *rows, int n, size_t row_bytes)
{
    for (size_t b = 0; b < (size_t)n * row_bytes; b += 64)
        __builtin_prefetch(rows + b, 0, 1); /* prefetcht2 on x86 */
}

/* Keys [k0, k1) (whole blocks from k0) for every row, from a fresh state.
 * Each K and V row is read once, whole and in order; its elements are
 * widened in registers when the cache is bf16. */
static void dec_run_chunk(const struct dec_chunk *c, const struct dec_rows *q, const void *k_cache,
                          const void *v_cache, int k0, int k1, const struct ra_attention_shape *s)
{
    const int hd = s->head_dim, rows = q->rows;
    const enum ra_dtype dt = s->kv_dtype;
    const size_t row_bytes = (size_t)s->kv_stride * ra_dtype_size(dt), esize = ra_dtype_size(dt), ldo = q->ldo;
    const char *kc = k_cache, *vc = v_cache;
    const int ahead = ATTN_SIMD == 512 && dt == RA_DTYPE_BF16; /* see dec_prefetch */
    for (int r = 0; r < rows; r++) {
        c->m[r] = -FLT_MAX;
        c->l[r] = 0;
        memset(c->o + r * ldo, 0, sizeof(float) * (size_t)hd);
    }
    for (int kb = k0; kb < k1; kb += BK) {
        const int nkb = k1 - kb < BK ? k1 - kb : BK;
        for (int j = 0; j < nkb; j++) { /* S: row by row of K, every head */
            const char *krow = kc + (size_t)(kb + j) * row_bytes;
            if (ahead)
                dec_prefetch(vc + (size_t)(kb + j) * row_bytes, 1, row_bytes);
#if defined(RA_KERNELS_BF16DP)
            if (q->qb) {
                for (int r = 0; r < rows; r++)
                    if (kb + j <= q->pos[r])
                        c->st[r * BK + j] = dec_dot_dp(q->qb + r * ldo, (const uint16_t *)krow + q->koff[r], hd);
                continue;
            }
#endif
            for (int r = 0; r < rows; r++)
                if (kb + j <= q->pos[r])
                    c->st[r * BK + j] = dec_dot(q->qs + r * ldo, krow + (size_t)q->koff[r] * esize, dt, hd);
        }
        int nk[RA_ATTN_MAX_HEADS_DEC];
        for (int r = 0; r < rows; r++) { /* the online softmax, row by row */
            nk[r] = q->pos[r] - kb + 1 < nkb ? q->pos[r] - kb + 1 : nkb;
            if (nk[r] <= 0)
                continue;
            float *st = c->st + r * BK;
            const float mx = dec_max(st, nk[r], c->m[r]);
            const float sum = dec_exp(st, nk[r], mx), alpha = exp2_neg_s(c->m[r] - mx);
            c->l[r] = c->l[r] * alpha + sum;
            c->m[r] = mx;
            dec_scale(c->o + r * ldo, alpha, hd);
            if (q->round_p)
                dec_round_bf16(st, nk[r]);
        }
        if (ahead && kb + BK < k1)
            dec_prefetch(kc + (size_t)(kb + BK) * row_bytes, k1 - kb - BK < BK ? k1 - kb - BK : BK, row_bytes);
        int r0 = 0; /* rows whose P·V is done */
#if ATTN_SIMD == 512
        r0 = dec_pv_blocks(c, q, vc + (size_t)kb * row_bytes, row_bytes, dt, hd, nkb, nk);
#endif
        for (int j = 0; j < nkb; j++) { /* O += P·V: row by row of V */
            const char *vrow = vc + (size_t)(kb + j) * row_bytes;
            for (int r = r0; r < rows; r++)
                if (j < nk[r])
                    dec_axpy(c->o + r * ldo, c->st[r * BK + j], vrow + (size_t)q->koff[r] * esize, dt, hd);
        }
    }
}

/* The chunks' scratch, per calling thread, grown as needed (no allocation
 * per step once it has grown). */
static __thread float *dec_buf;
static __thread size_t dec_floats;

/* Queries t < n at positions start + t over keys [0, start + n); with LAST,
 * query t sees keys [0, last[t]] instead (any row of keys), and the keys read
 * are [0, max last[t] + 1). */
static int attention_decode(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                            const struct ra_attention_shape *s, int round_qp, int n_threads, const int *last)
{
    const int hd = s->head_dim, nh = s->n_heads, rows = nh * n;
    int keys = start + n;
    if (last) {
        keys = 0;
        for (int t = 0; t < n; t++)
            keys = last[t] + 1 > keys ? last[t] + 1 : keys;
    }
    const size_t ldo = (size_t)((hd + 15) / 16 * 16);
    int nc = (keys + DEC_CHUNK_MIN - 1) / DEC_CHUNK_MIN;
    nc = nc > DEC_CHUNKS ? DEC_CHUNKS : nc;
    const int per = ((keys + nc - 1) / nc + BK - 1) / BK * BK;
    nc = (keys + per - 1) / per;
    const size_t ml = ((size_t)rows + 15) / 16 * 16; /* m and l, each rounded to 64 bytes */
    const size_t chunk_floats = (size_t)rows * (ldo + BK) + 2 * ml;
    const size_t q_floats = (size_t)rows * ldo + ((size_t)rows * ldo / 2 + 15) / 16 * 16; /* qs, qb: 64-byte multiples */
    const size_t need = q_floats + (size_t)nc * chunk_floats + 16;
    if (need > dec_floats) {
        free(dec_buf);
        dec_floats = 0;
        if (posix_memalign((void **)&dec_buf, 64, need * sizeof(float)) != 0) {
            dec_buf = NULL;
            return ra_error_set(RA_ENOMEM, "attention: cannot allocate %zu bytes of decode scratch", need * 4);
        }
        dec_floats = need;
    }
    float *qs = dec_buf;
    uint16_t *qb = (uint16_t *)(dec_buf + (size_t)rows * ldo); /* 64-byte aligned: ldo is a multiple of 16 */
    const float scale = 1.4426950408889634f / sqrtf((float)hd); /* scores in log2 units */
    int koff[RA_ATTN_MAX_HEADS_DEC], pos[RA_ATTN_MAX_HEADS_DEC];
    for (int r = 0; r < rows; r++) {
        const int t = r / nh, h = r % nh;
        koff[r] = h / (nh / s->n_kv_heads) * hd;
        pos[r] = last ? last[t] : start + t;
        for (int d = 0; d < hd; d++) {
            const float x = q[(size_t)t * s->q_stride + (size_t)h * hd + d] * scale;
            if (round_qp)
                qb[r * ldo + d] = ra_f32_to_bf16(x);
            qs[r * ldo + d] = round_qp ? ra_bf16_to_f32(qb[r * ldo + d]) : x;
        }
    }
    const struct dec_rows dr = { .qs = qs, .qb = round_qp && hd % 32 == 0 ? qb : NULL, .koff = koff, .pos = pos,
                                 .rows = rows, .round_p = round_qp, .ldo = ldo };
    struct dec_chunk ch[DEC_CHUNKS];
    for (int c = 0; c < nc; c++) {
        float *base = dec_buf + q_floats + (size_t)c * chunk_floats;
        ch[c] = (struct dec_chunk){ base, base + (size_t)rows * ldo, base + (size_t)rows * ldo + ml,
                                    base + (size_t)rows * ldo + 2 * ml };
    }
#pragma omp parallel for schedule(dynamic, 1) if (nc > 1) num_threads(n_threads)
    for (int c = 0; c < nc; c++)
        dec_run_chunk(&ch[c], &dr, k_cache, v_cache, c * per, (c + 1) * per < keys ? (c + 1) * per : keys, s);
    for (int r = 0; r < rows; r++) { /* merge the chunks in order */
        float mx = -FLT_MAX;
        for (int c = 0; c < nc; c++)
            mx = ch[c].m[r] > mx ? ch[c].m[r] : mx;
        float l = 0, w[DEC_CHUNKS];
        for (int c = 0; c < nc; c++) {
            w[c] = exp2_neg_s(ch[c].m[r] - mx);
            l += ch[c].l[r] * w[c];
        }
        float *o = out + (size_t)(r / nh) * s->q_stride + (size_t)(r % nh) * hd;
        for (int d = 0; d < hd; d++) {
            float a = 0;
            for (int c = 0; c < nc; c++)
                a += ch[c].o[r * ldo + d] * w[c];
            o[d] = a / l;
        }
    }
    return RA_OK;
}

static int attention_check(const struct ra_attention_shape *s)
{
    if (s->head_dim > RA_ATTN_MAX_HEAD_DIM || s->n_heads % s->n_kv_heads != 0)
        return ra_error_set(RA_EUNSUPPORTED, "attention: head dimension %d exceeds %d or heads %d/%d do not group",
                            s->head_dim, RA_ATTN_MAX_HEAD_DIM, s->n_heads, s->n_kv_heads);
    if (s->kv_dtype != RA_DTYPE_F32 && s->kv_dtype != RA_DTYPE_BF16)
        return ra_error_set(RA_EUNSUPPORTED, "attention: %s KV rows are not supported (f32 or bf16)",
                            ra_dtype_name(s->kv_dtype));
    return RA_OK;
}

/* Whether Q and P are rounded to bf16 for the products. */
static int attention_round_qp(const struct ra_attention_shape *s)
{
#if defined(RA_KERNELS_BF16DP)
    /* bf16 rows take bf16 products in this build's prefill (Q and P rounded
     * to bf16 for vdpbf16ps); a decode step rounds Q and P alike, so that a
     * span of a few tokens computes what the block kernel would, up to the
     * order of the sums (and P rounded at its chunk's running max). */
    return s->kv_dtype == RA_DTYPE_BF16 && s->head_dim % 2 == 0;
#else
    (void)s;
    return 0;
#endif
}

static int attention(float *out, const float *q, const void *k_cache, const void *v_cache, int start, int n,
                     const struct ra_attention_shape *s, int n_threads)
{
    int rc = attention_check(s);
    if (rc != RA_OK)
        return rc;
    const int round_qp = attention_round_qp(s);
    if (n <= DEC_MAX_N && s->n_heads * n <= RA_ATTN_MAX_HEADS_DEC)
        return attention_decode(out, q, k_cache, v_cache, start, n, s, round_qp, n_threads, NULL);
    return attention_items(out, q, k_cache, v_cache, start, NULL, n, s, n_threads);
}

/* last[t - t0] = the last key row at or before query t's position (-1: none), t in [t0, t1). */
static void visible_keys(int *last, const struct ra_rows *qr, int t0, int t1, const struct ra_rows *kr)
{
    int lo = 0, hi = kr->n; /* keys [0, lo) are at or before the query, [hi, n) after it */
    for (int t = t0; t < t1; t++) {
        const int p = ra_rows_pos(qr, t);
        hi = kr->n;
        while (lo < hi) { /* binary search: a sparse list over a long cache skips most keys */
            const int mid = lo + (hi - lo) / 2;
            if (ra_rows_pos(kr, mid) <= p)
                lo = mid + 1;
            else
                hi = mid;
        }
        last[t - t0] = lo - 1;
    }
}

/* More than a decode step's queries at positions: the block kernel with each query's key limit. */
static int attention_rows_items(float *out, const float *q, const struct ra_rows *qr, const void *k_cache,
                                const void *v_cache, const struct ra_rows *kr, const struct ra_attention_shape *s,
                                int n_threads)
{
    int *last = malloc(sizeof(int) * (size_t)qr->n);
    if (!last)
        return ra_error_set(RA_ENOMEM, "attention: cannot allocate the limits of %d queries", qr->n);
    visible_keys(last, qr, 0, qr->n, kr);
    const int rc = attention_items(out, q, k_cache, v_cache, 0, last, qr->n, s, n_threads);
    free(last);
    return rc;
}

/* Attention at positions (see struct ra_cpu_kernels.attention_rows). One
 * contiguous span of queries over the contiguous keys up to it is the span
 * kernel's call, decided here once. Otherwise both lists are sorted, so the
 * keys a query sees are a prefix of the key rows, [0, last[t]]: up to
 * DEC_MAX_N queries (a decode step) take the decode path with exactly those;
 * more take the span's block kernel with each query's limit, as `attention`
 * chooses between them for a span. */
static int attention_rows(float *out, const float *q, const struct ra_rows *qr, const void *k_cache,
                          const void *v_cache, const struct ra_rows *kr, const struct ra_attention_shape *s,
                          int n_threads)
{
    int rc = attention_check(s);
    if (rc != RA_OK)
        return rc;
    const int rel = qr->start - kr->start; /* the first query's row among the keys */
    if (!qr->pos && !kr->pos && rel >= 0 && kr->n >= rel + qr->n)
        return qr->n > 0 ? attention(out, q, k_cache, v_cache, rel, qr->n, s, n_threads) : RA_OK;
    if (qr->n > DEC_MAX_N || s->n_heads * qr->n > RA_ATTN_MAX_HEADS_DEC)
        return attention_rows_items(out, q, qr, k_cache, v_cache, kr, s, n_threads);
    int last[DEC_MAX_N];
    int seen = 0;
    visible_keys(last, qr, 0, qr->n, kr);
    for (int t = 0; t < qr->n; t++)
        seen |= last[t] >= 0;
    if (seen)
        rc = attention_decode(out, q, k_cache, v_cache, 0, qr->n, s, attention_round_qp(s), n_threads, last);
    for (int t = 0; t < qr->n; t++) /* a query before every key attends to nothing (not 0/0) */
        if (last[t] < 0)
            for (int h = 0; h < s->n_heads; h++)
                memset(out + (size_t)t * s->q_stride + (size_t)h * s->head_dim, 0, sizeof(float) * (size_t)s->head_dim);
    return rc;
}
