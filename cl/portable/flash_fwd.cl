/* Portable fused attention forward (OpenCL C 1.2, any vendor).
 *
 * One work-item owns BLOCK_M / WG_SIZE query rows (1, 2 or 4; with
 * several, each K and V vector read from local memory feeds that many
 * FMAs). Per work-group: a BLOCK_M x D query tile
 * (pre-scaled by scale*log2 e, stored transposed so work-items read
 * consecutive words), then BLOCK_N-key K (transposed) and V tiles streamed
 * through local memory. Scores for a tile are vectors over keys (no
 * horizontal sums), the online softmax runs in base 2, and the accumulator
 * (vectors over D_v) is rescaled only when the row max moves. Only tiles
 * that intersect the visible band (causal / window) are loaded; masks apply
 * only to tiles that cross a band edge or the end of the keys.
 *
 * Variants are compile-time switches so plain attention pays nothing:
 * FLASHCL_CAUSAL (band bounded on the right), FLASHCL_WINDOW_LEFT (bounded
 * on the left), FLASHCL_SOFTCAP, FLASHCL_ALIBI, FLASHCL_BIAS (0 none, 1 fp32,
 * 2 fp16, 3 bf16), FLASHCL_MASK, FLASHCL_SINKS, FLASHCL_HEAD_DIM_V.
 *
 * Summation (FLASHCL_COMPENSATED, 0 or 1, default 1): the row sum and the
 * output accumulator are each kept as an unevaluated pair hi + lo. A
 * tile's keys are summed into lo, which holds only the previous rounding
 * error, so that sum starts near zero and its error is that of a BN-term
 * sum; then the pair is renormalised with Knuth's branch-free TwoSum,
 * exact in round-to-nearest. A row's error so stays a few ulps of O at any
 * seqlen_k instead of growing with the number of tiles added into one
 * running sum (fp32, evenly spread attention, 4M keys, D = 16: 7e-5 of
 * max|O| with the plain sums, 5e-8 compensated; tests/test_accuracy.c).
 * When the row max moves, hi and lo are rescaled by the same correction
 * (one rounding of hi per move, as before). The extra work is per tile
 * and per output element, not per key; the extra registers are DV per
 * work-item (acc_lo). Measured, fp32 N = 2048 against
 * FLASHCL_COMPENSATED=0 (the plain running sums, kept for comparison):
 * PoCL 3.1 on the 2-core AVX-512 CI machine, CPU time per call, D = 64
 * +0-2 %, D = 128 no slower (within the noise); H200 (NVIDIA OpenCL), D =
 * 64 2-3 % faster (254 registers, no spill), but D = 128 3.1x slower (114
 * vs 37 ms, B 8 H 16): 2 x 128 accumulator floats do not fit 255
 * registers (1.2 KB of spills). Passing -DFLASHCL_COMPENSATED=0 for GPUs
 * with D_v > 64 is the host's choice (src/paths/portable.c). TwoSum has
 * no multiply for -cl-mad-enable to contract, and OpenCL C may reassociate
 * additions only under -cl-unsafe-math-optimizations /
 * -cl-fast-relaxed-math (never passed); tests/test_accuracy.c checks the
 * result numerically all the same.
 *
 * Signature: cl/common/kernel_args.clh; launch contract: docs/kernel-abi.md.
 * Score modifiers of the variants: cl/common/variants.clh. */
/* The switches' defaults and ranges: flash_fwd_switches.clh. */
#include "flash_fwd_defaults.clh"
#include "flashcl_common.clh"
#if FLASHCL_LSE_FP64
#if FLASHCL_DTYPE != 3
#error "FLASHCL_LSE_FP64 needs FLASHCL_DTYPE 3: only fp64 sums have fp64 LSEs"
#endif
#define LSE_T double
#endif
#include "kernel_args.clh"
#include "band.clh"
#include "fwd_block.clh"

#if FLASHCL_HEAD_DIM % FLASHCL_VEC != 0 || FLASHCL_HEAD_DIM_V % FLASHCL_VEC != 0
#error "FLASHCL_HEAD_DIM and FLASHCL_HEAD_DIM_V must be multiples of FLASHCL_VEC"
#endif
#if FLASHCL_BLOCK_N < FLASHCL_VEC || FLASHCL_BLOCK_N % FLASHCL_VEC != 0
#error "FLASHCL_BLOCK_N must be a multiple of FLASHCL_VEC"
#endif
#if FLASHCL_BLOCK_M % FLASHCL_WG_SIZE != 0
#error "FLASHCL_WG_SIZE must divide FLASHCL_BLOCK_M (each work-item owns BLOCK_M / WG_SIZE rows)"
#endif
#if FLASHCL_BLOCK_M / FLASHCL_WG_SIZE != 1 && FLASHCL_BLOCK_M / FLASHCL_WG_SIZE != 2 && FLASHCL_BLOCK_M / FLASHCL_WG_SIZE != 4
#error "FLASHCL_BLOCK_M / FLASHCL_WG_SIZE (query rows per work-item) must be 1, 2 or 4"
#endif

#define D FLASHCL_HEAD_DIM
#define DV FLASHCL_HEAD_DIM_V
#define D_STAGE (D > DV ? D : DV)
#define BM FLASHCL_BLOCK_M
#define BN FLASHCL_BLOCK_N
#define WG FLASHCL_WG_SIZE
#define ROWS (BM / WG)
/* The sums P V goes into: the low parts when compensated. */
#if FLASHCL_COMPENSATED
#define PV_SUM acc_lo
#else
#define PV_SUM acc
#endif
#define VEC FLASHCL_VEC
#define DV_VECS (DV / VEC)
#define BN_VECS (BN / VEC)

#define vec_t FLASHCL_CONCAT(FLASHCL_REAL, VEC)
#define half_vec_t FLASHCL_CONCAT(FLASHCL_REAL, 8)
#define quarter_vec_t FLASHCL_CONCAT(FLASHCL_REAL, 4)
#define pair_t FLASHCL_CONCAT(FLASHCL_REAL, 2)
#define vload_vec FLASHCL_CONCAT(vload, VEC)
#define vstore_vec FLASHCL_CONCAT(vstore, VEC)

inline real_t vec_max_lanes(vec_t v)
{
#if VEC == 16
    half_vec_t v8 = fmax(v.lo, v.hi);
    quarter_vec_t v4 = fmax(v8.lo, v8.hi);
#elif VEC == 8
    quarter_vec_t v4 = fmax(v.lo, v.hi);
#elif VEC == 4
    quarter_vec_t v4 = v;
#endif
#if VEC >= 4
    pair_t v2 = fmax(v4.lo, v4.hi);
#else
    pair_t v2 = v;
#endif
    return fmax(v2.x, v2.y);
}

inline real_t vec_sum_lanes(vec_t v)
{
#if VEC == 16
    half_vec_t v8 = v.lo + v.hi;
    quarter_vec_t v4 = v8.lo + v8.hi;
#elif VEC == 8
    quarter_vec_t v4 = v.lo + v.hi;
#elif VEC == 4
    quarter_vec_t v4 = v;
#endif
#if VEC >= 4
    pair_t v2 = v4.lo + v4.hi;
#else
    pair_t v2 = v;
#endif
    return v2.x + v2.y;
}

/* TWO_SUM (Knuth's TwoSum): cl/common/flashcl_common.clh. */

/* elem_offset: cl/common/fwd_block.clh. */

/* q_t[d * BM + r] = q[row0 + r, d] * scale_log2, zero outside the problem. */
inline void load_query_tile(__local real_t *q_t, __global const STORAGE_T *q,
                            ulong head_base, ulong4 stride, int row0,
                            int seqlen_q, int head_dim, real_t scale_log2)
{
    for (int idx = get_local_id(0); idx < BM * D; idx += WG) {
        int r = idx / D, d = idx % D;
        int row = row0 + r;
        real_t value = 0;
        if (row < seqlen_q && d < head_dim)
            value = load_elem(q, elem_offset(head_base, stride, row, d)) *
                    scale_log2;
        q_t[d * BM + r] = value;
    }
}

/* Full tiles of unpadded rows of contiguous fp32 (fp64) words are copied
 * a vector at a time: with one word per step, the index arithmetic and
 * the loads of the element loops took about a quarter of the kernel's
 * time under PoCL (perf, fp32 D = 64 N = 2048, 256 x 64 tiles). */
#define VECTOR_TILE_LOADS                                                      \
    (FLASHCL_DIM_CONTIGUOUS && (FLASHCL_DTYPE == 0 || FLASHCL_DTYPE == 3))

/* k_t[d * BN + j] = k[n0 + j, d]; zero past the keys and past head_dim. */
inline void load_key_tile(__local real_t *k_t, __global const STORAGE_T *k,
                          ulong head_base, ulong4 stride, int n0, int seqlen_k,
                          int head_dim)
{
#if VECTOR_TILE_LOADS
    if (head_dim == D && n0 + BN <= seqlen_k) {
        for (int idx = get_local_id(0); idx < BN * (D / VEC); idx += WG) {
            const int j = idx / (D / VEC), d0 = idx % (D / VEC) * VEC;
            real_t lanes[VEC];
            vstore_vec(vload_vec(0, k + elem_offset(head_base, stride, n0 + j,
                                                    d0)),
                       0, lanes);
#pragma unroll
            for (int e = 0; e < VEC; ++e)
                k_t[(d0 + e) * BN + j] = lanes[e];
        }
        return;
    }
#endif
    fwd_load_rows(k_t, true, D, BN, WG, k, head_base, stride, n0, seqlen_k,
                  head_dim);
}

/* v_tile[j * DV + d] = v[n0 + j, d]; zero past the keys and head_dim_v. */
inline void load_value_tile(__local real_t *v_tile, __global const STORAGE_T *v,
                            ulong head_base, ulong4 stride, int n0,
                            int seqlen_k, int head_dim_v)
{
#if VECTOR_TILE_LOADS
    if (head_dim_v == DV && n0 + BN <= seqlen_k) {
        for (int idx = get_local_id(0); idx < BN * DV_VECS; idx += WG) {
            const int j = idx / DV_VECS, d0 = idx % DV_VECS * VEC;
            vstore_vec(vload_vec(0, v + elem_offset(head_base, stride, n0 + j,
                                                    d0)),
                       idx, v_tile);
        }
        return;
    }
#endif
    fwd_load_rows(v_tile, false, DV, BN, WG, v, head_base, stride, n0,
                  seqlen_k, head_dim_v);
}

/* Masks, the variants' score pass and the online-softmax step for one row
 * of a tile: scores become probabilities (0 for a row that has seen no key
 * yet, whose max stays -inf, so never NaN); returns the factor that
 * rescales the row's earlier sum and output. */
inline real_t softmax_tile_row(real_t *scores, real_t *row_max,
                               real_t *tile_sum, const score_row *extras,
                               int n0, int row, bool crosses_band, long hi,
                               long lo, int seqlen_q, int seqlen_k
                                   FLASHCL_VARIANT_ARGS(FLASHCL_KPARAM))
{
#if FLASHCL_NEEDS_SCORE_PASS
    if (row < seqlen_q) {
#pragma unroll 4
        for (int j = 0; j < BN; ++j) {
            const int key = min(n0 + j, seqlen_k - 1);
            scores[j] = score_apply(extras, key, scores[j]
                                        FLASHCL_VARIANT_NAMES);
        }
    }
#else
    (void)extras;
    (void)row;
    (void)seqlen_q;
    (void)seqlen_k;
#endif
    if (crosses_band) {
#pragma unroll
        for (int j = 0; j < BN; ++j)
            if (n0 + j > hi || n0 + j < lo)
                scores[j] = -INFINITY;
    }
    vec_t tile_max_vec = vload_vec(0, scores);
#pragma unroll
    for (int jb = 1; jb < BN_VECS; ++jb)
        tile_max_vec = fmax(tile_max_vec, vload_vec(jb, scores));
    const real_t new_max = fmax(*row_max, vec_max_lanes(tile_max_vec));
    if (new_max == -INFINITY) {
#pragma unroll
        for (int jb = 0; jb < BN_VECS; ++jb)
            vstore_vec((vec_t)(0), jb, scores);
        *tile_sum = 0;
        return 1;
    }
    const real_t correction = exp2(*row_max - new_max);
    *row_max = new_max;
    vec_t prob_sum = (vec_t)(0);
#pragma unroll
    for (int jb = 0; jb < BN_VECS; ++jb) {
        vec_t prob = exp2(vload_vec(jb, scores) - (vec_t)(new_max));
        prob_sum += prob;
        vstore_vec(prob, jb, scores);
    }
    *tile_sum = vec_sum_lanes(prob_sum);
    return correction;
}

/* Packed batches (FLASHCL_VARLEN, FlashAttention's varlen): grid batch b
 * is sequence b, with the rows and keys its prefix sums give (read on the
 * device and clamped, packed_span.clh), its own diagonal and its own
 * offsets into the packed tensors; its blocks past its rows return at
 * once. Without it, the grid's batch is the tensors' batch. */
#if FLASHCL_VARLEN
#include "packed_span.clh"
#define PORTABLE_VARLEN_PARAMS FLASHCL_VARLEN_ARGS(FLASHCL_KPARAM)
#else
#define PORTABLE_VARLEN_PARAMS
#endif

typedef struct fwd_sequence {
    int batch;     /* the tensors' batch index (0 in a packed batch) */
    int nq, nk;    /* its query rows and keys */
    long diag;     /* its band's diagonal */
    ulong q0, k0;  /* its first row and key in the tensors */
} fwd_sequence;

#if FLASHCL_VARLEN
#define FWD_SEQUENCE(b)                                                        \
    fwd_sequence_of(b, seqlen_q, seqlen_k, diag, cu_q, cu_k, len_base,       \
                    len_stride, total_q, total_k)
inline fwd_sequence fwd_sequence_of(int b, int seqlen_q, int seqlen_k,
                                    long diag, __global const int *cu_q,
                                    __global const int *cu_k, ulong4 len_base,
                                    ulong4 len_stride, int total_q,
                                    int total_k)
{
    const packed_span rows = packed_span_of(cu_q, len_base.s0, len_stride.s0,
                                            b, total_q, seqlen_q);
    const packed_span keys = packed_span_of(cu_k, len_base.s1, len_stride.s1,
                                            b, total_k, seqlen_k);
    (void)diag;
    const fwd_sequence s = {0, rows.count, keys.count,
                            aligned_diag(FLASHCL_VARLEN == 2, rows.count,
                                         keys.count),
                            rows.first, keys.first};
    return s;
}
#else
#define FWD_SEQUENCE(b) fwd_sequence_of(b, seqlen_q, seqlen_k, diag)
inline fwd_sequence fwd_sequence_of(int b, int seqlen_q, int seqlen_k,
                                    long diag)
{
    const fwd_sequence s = {b, seqlen_q, seqlen_k, diag, 0, 0};
    return s;
}
#endif

__kernel __attribute__((reqd_work_group_size(FLASHCL_WG_SIZE, 1, 1))) void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS PORTABLE_VARLEN_PARAMS)
{
    /* The query tile's space is reused to stage the output. */
    FLASHCL_LOCAL_QKV_TILES(D_STAGE);

    const int lid = get_local_id(0);
    const int block = fwd_query_block();
    const int head = get_group_id(1);
    const int sequence = get_group_id(2);
    const fwd_sequence seq = FWD_SEQUENCE(sequence);
    const int batch = seq.batch, nq = seq.nq, nk = seq.nk;
    const long band_diag = seq.diag;
    const int kv_head = head / group_size;
    const int row0 = block * BM;
#if FLASHCL_VARLEN
    if (row0 >= nq)
        return; /* uniform: the block is past this sequence's rows */
#endif
    const int row_last = min(nq, row0 + BM) - 1;

    const ulong q_head = fwd_head_base(base.s0 + seq.q0 * q_stride.s2,
                                       q_stride, batch, head);
    const ulong k_head = fwd_head_base(base.s1 + seq.k0 * k_stride.s2,
                                       k_stride, batch, kv_head);
    const ulong v_head = fwd_head_base(base.s2 + seq.k0 * v_stride.s2,
                                       v_stride, batch, kv_head);
    const ulong o_head = fwd_head_base(base.s3 + seq.q0 * o_stride.s2,
                                       o_stride, batch, head);

    /* This work-item's rows: row0 + i * WG + lid, so that the work-items
     * of a group read consecutive words of the transposed query tile. */
    score_row extras[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i)
        extras[i] = score_row_init(sequence, head, row0 + i * WG + lid,
                                   band_diag, REAL_LOG2E FLASHCL_VARIANT_NAMES);

    load_query_tile(q_t, q, q_head, q_stride, row0, nq, head_dim,
                    scale_log2);

    /* Output accumulator and row sum; with FLASHCL_COMPENSATED each is the
     * pair acc + acc_lo, row_sum + sum_lo (see the top of this file). */
    vec_t acc[ROWS][DV_VECS];
    real_t row_max[ROWS], row_sum[ROWS];
#if FLASHCL_COMPENSATED
    vec_t acc_lo[ROWS][DV_VECS];
    real_t sum_lo[ROWS];
#endif
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        for (int c = 0; c < DV_VECS; ++c)
            acc[i][c] = (vec_t)(0);
#if FLASHCL_COMPENSATED
        for (int c = 0; c < DV_VECS; ++c)
            acc_lo[i][c] = (vec_t)(0);
        sum_lo[i] = 0;
#endif
        row_max[i] = -INFINITY;
        row_sum[i] = 0;
#if FLASHCL_SINKS
        /* The sink is one more logit in the row with no value vector. */
        row_max[i] = sink_logit(head, REAL_LOG2E FLASHCL_VARIANT_NAMES);
        row_sum[i] = row_max[i] == -INFINITY ? 0 : 1;
#endif
    }

    /* Only tiles that intersect the rows' visible band. */
    const fwd_tiles tiles = fwd_key_tiles(row0, row_last, band_diag,
                                          window_left, window_right, nk, BN);
    for (int n0 = tiles.begin; n0 < tiles.end; n0 += BN) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile fully consumed */
        load_key_tile(k_t, k, k_head, k_stride, n0, nk, head_dim);
        load_value_tile(v_tile, v, v_head, v_stride, n0, nk, head_dim_v);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* Each K vector read feeds the FMAs of all ROWS rows. */
        vec_t score[ROWS][BN_VECS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
            for (int jb = 0; jb < BN_VECS; ++jb)
                score[i][jb] = (vec_t)(0);
        for (int d = 0; d < D; ++d) {
            real_t q_value[ROWS];
#pragma unroll
            for (int i = 0; i < ROWS; ++i)
                q_value[i] = q_t[d * BM + i * WG + lid];
#pragma unroll
            for (int jb = 0; jb < BN_VECS; ++jb) {
                const vec_t key = vload_vec(jb, k_t + d * BN);
#pragma unroll
                for (int i = 0; i < ROWS; ++i)
                    score[i][jb] = fma((vec_t)(q_value[i]), key, score[i][jb]);
            }
        }

        real_t scores[ROWS][BN];
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
            for (int jb = 0; jb < BN_VECS; ++jb)
                vstore_vec(score[i][jb], jb, scores[i]);

        /* Band edges inside this tile: keys outside [lo, hi] are masked. */
        const bool crosses_band =
            band_tile_crosses(n0, BN, row0, row_last, band_diag, window_left,
                              window_right, nk);
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const long hi = band_row_hi(extras[i].diag_row, window_right, nk);
            const long lo = band_row_lo(extras[i].diag_row, window_left);
            real_t tile_sum;
            const real_t correction = softmax_tile_row(
                scores[i], &row_max[i], &tile_sum, &extras[i], n0,
                row0 + i * WG + lid, crosses_band, hi, lo, nq,
                nk FLASHCL_VARIANT_NAMES);
#if FLASHCL_COMPENSATED
            /* The tile goes into the low parts (rescaled like the high
             * parts), then each pair is renormalised once per tile. */
            row_sum[i] *= correction;
            sum_lo[i] = sum_lo[i] * correction + tile_sum;
            TWO_SUM(real_t, row_sum[i], sum_lo[i]);
            for (int c = 0; c < DV_VECS; ++c) {
                acc[i][c] *= correction;
                acc_lo[i][c] *= correction;
            }
#else
            row_sum[i] = row_sum[i] * correction + tile_sum;
            for (int c = 0; c < DV_VECS; ++c)
                acc[i][c] *= correction;
#endif
        }

        /* Each V vector read feeds the FMAs of all ROWS rows. The sums
         * are copied to a fully unrolled local array: PoCL keeps private
         * arrays that live across barriers in memory, and indexed by a
         * loop counter acc stayed there, a load and a store per FMA. */
        vec_t part[ROWS][DV_VECS];
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
#pragma unroll
            for (int c = 0; c < DV_VECS; ++c)
                part[i][c] = PV_SUM[i][c];
#pragma unroll 4
        for (int j = 0; j < BN; ++j) {
            __local const real_t *v_row = v_tile + j * DV;
            vec_t prob[ROWS];
#pragma unroll
            for (int i = 0; i < ROWS; ++i)
                prob[i] = (vec_t)(scores[i][j]);
#pragma unroll
            for (int c = 0; c < DV_VECS; ++c) {
                const vec_t value = vload_vec(c, v_row);
#pragma unroll
                for (int i = 0; i < ROWS; ++i)
                    part[i][c] = fma(prob[i], value, part[i][c]);
            }
        }
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
#pragma unroll
            for (int c = 0; c < DV_VECS; ++c)
                PV_SUM[i][c] = part[i][c];
#if FLASHCL_COMPENSATED
        /* The high parts are read and written once per tile. */
#pragma unroll
        for (int i = 0; i < ROWS; ++i)
            for (int c = 0; c < DV_VECS; ++c) {
                vec_t hi = acc[i][c];
                TWO_SUM(vec_t, hi, acc_lo[i][c]);
                acc[i][c] = hi;
            }
#endif
    }

    /* Stage O through local memory so the global writes are coalesced. */
    barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
#if FLASHCL_COMPENSATED
        row_sum[i] += sum_lo[i];
        for (int c = 0; c < DV_VECS; ++c)
            acc[i][c] += acc_lo[i][c];
#endif
#if FLASHCL_DEBUG_CORRUPT
        const real_t inv_sum =
            (row_sum[i] > 0 ? 1 / row_sum[i] : 0) * (real_t)1.0625f;
#else
        const real_t inv_sum = row_sum[i] > 0 ? 1 / row_sum[i] : 0;
#endif
        for (int c = 0; c < DV_VECS; ++c)
            vstore_vec(acc[i][c] * inv_sum, c, q_t + (i * WG + lid) * DV);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int idx = lid; idx < BM * DV; idx += WG) {
        int r = idx / DV, d = idx % DV;
        int out_row = row0 + r;
        if (out_row < nq && d < head_dim_v)
            store_elem(o, elem_offset(o_head, o_stride, out_row, d),
                       q_t[r * DV + d]);
    }
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        const int row = row0 + i * WG + lid;
        if (write_lse && row < nq) {
            const ulong at = lse_base + seq.q0 * lse_stride.s2 +
                             batch * lse_stride.s0 +
                             head * lse_stride.s1 +
                             (ulong)row * lse_stride.s2;
            lse[at] = row_sum[i] > 0
                          ? (LSE_T)((row_max[i] + log2(row_sum[i])) * REAL_LN2)
                          : -INFINITY;
        }
    }
}
