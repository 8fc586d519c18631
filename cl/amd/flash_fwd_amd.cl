/* Fused attention forward on AMD matrix cores (MFMA wave64 on CDNA,
 * WMMA wave32 on RDNA3), or on their emulation (cl/amd/amd_frag.clh).
 *
 * A work-group owns FLASHCL_BLOCK_M query rows of one (batch, head); each
 * wave owns 16 of them. Q, and per tile of FLASHCL_BLOCK_N keys K and V,
 * sit in local memory as 16-bit storage bits (V transposed, so that every
 * operand is read with its reduction dimension contiguous; rows padded by
 * one fragment load, AB_N elements, against bank conflicts and for the
 * loads' alignment). Per tile, in each wave:
 *   S = Q K^T    (D / 16) x (BN / 16) mma, fp32 accumulators;
 *   scores       scaled to base 2, variant terms (cl/common/variants.clh),
 *                the band and the end of the keys masked, per accumulator
 *                element from its row and column;
 *   softmax      row max across the 16 lanes of a row, the running max,
 *                per-lane partial row sums (reduced once at the end);
 *   P            rounded to the storage type into the wave's local rows,
 *                read back as A fragments;
 *   O += P V     (BN / 16) x (D_v / 16) mma.
 * O and S share the accumulator layout, so the rescale of O uses each
 * element's own row. A row that sees no key writes O = 0 and LSE = -inf.
 * Head dims are padded to 16 (zeros in Q, K and V); rows past seqlen_q
 * are computed on zeros and not written.
 *
 * Signature: cl/common/kernel_args.clh; launch contract: docs/kernel-abi.md. */
/* The switches' defaults and ranges: flash_fwd_amd_switches.clh. */
#include "flash_fwd_amd_defaults.clh"
#include "flashcl_common.clh"
#include "kernel_args.clh"
#include "band.clh"
#include "fwd_block.clh"
#include "amd_frag.clh"

#if FLASHCL_WG_SIZE != FLASHCL_BLOCK_M / 16 * FRAG_LANES
#error "FLASHCL_WG_SIZE must be one wave per 16 rows: BLOCK_M / 16 * (64 MFMA, 32 WMMA)"
#endif

#define D FLASHCL_HEAD_DIM
#define DV FLASHCL_HEAD_DIM_V
#define BM FLASHCL_BLOCK_M
#define BN FLASHCL_BLOCK_N
#define WG FLASHCL_WG_SIZE
#define NB (BN / 16)       /* key blocks per tile */
#define LDQ (D + AB_N)     /* row of Q and K in local memory */
#define LDP (BN + AB_N)    /* row of V^T and P */

inline ulong elem_at(ulong head_base, ulong4 stride, int row, int d)
{
    return head_base + (ulong)row * stride.s2 + (ulong)d * stride.s3;
}

/* m[r * ld + d] = src[row0 + r, d], zero past `rows` and `cols`. */
inline void copy_rows(__local ushort *m, int ld, __global const ushort *src,
                      ulong head_base, ulong4 stride, int row0, int count,
                      int dim_padded, int rows, int cols)
{
    for (int idx = get_local_id(0); idx < count * dim_padded; idx += WG) {
        const int r = idx / dim_padded, d = idx % dim_padded;
        const int row = row0 + r;
        m[r * ld + d] = row < rows && d < cols
                            ? src[elem_at(head_base, stride, row, d)]
                            : (ushort)0;
    }
}

/* vt[d * LDP + j] = v[n0 + j, d]: the transpose, zero outside. */
inline void copy_value_tile(__local ushort *vt, __global const ushort *v,
                            ulong head_base, ulong4 stride, int n0,
                            int seqlen_k, int head_dim_v)
{
    for (int idx = get_local_id(0); idx < BN * DV; idx += WG) {
        const int j = idx / DV, d = idx % DV;
        const int key = n0 + j;
        vt[d * LDP + j] = key < seqlen_k && d < head_dim_v
                              ? v[elem_at(head_base, stride, key, d)]
                              : (ushort)0;
    }
}

inline ushort to_storage_bits(float x)
{
#if FLASHCL_DTYPE == 1
    return as_ushort(convert_half_rte(x));
#else
    return float_to_bf16_bits(x);
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) FRAG_KERNEL_ATTR void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS)
{
    __local ushort q_s[BM * LDQ] __attribute__((aligned(32)));
    __local ushort k_s[BN * LDQ] __attribute__((aligned(32)));
    __local ushort vt_s[DV * LDP] __attribute__((aligned(32)));
    __local ushort p_s[BM * LDP] __attribute__((aligned(32)));

    const int lane = frag_lane();
    const int wave = frag_wave();
    const int col = ACC_COL(lane);
    const int block = fwd_query_block();
    const int head = get_group_id(1);
    const int batch = get_group_id(2);
    const int kv_head = head / group_size;
    const int row0 = block * BM;
    const int wave_row0 = row0 + 16 * wave;
    const int row_last = min(seqlen_q, row0 + BM) - 1;

    const ulong q_head = fwd_head_base(base.s0, q_stride, batch, head);
    const ulong k_head = fwd_head_base(base.s1, k_stride, batch, kv_head);
    const ulong v_head = fwd_head_base(base.s2, v_stride, batch, kv_head);
    const ulong o_head = fwd_head_base(base.s3, o_stride, batch, head);

    copy_rows(q_s, LDQ, q, q_head, q_stride, row0, BM, D, seqlen_q, head_dim);

    /* Per accumulator element e (row ACC_ROW(lane, e)): running max (base
     * 2, score units) and this lane's part of the row sum. */
    float row_max[ACC_N], row_sum[ACC_N];
    const float sink = sink_logit(head, REAL_LOG2E FLASHCL_VARIANT_NAMES);
FRAG_UNROLL
    for (int e = 0; e < ACC_N; ++e) {
        row_max[e] = sink;
        row_sum[e] = sink != -INFINITY && col == 0 ? 1.0f : 0.0f;
    }
    acc_t acc_o[DV / 16];
FRAG_UNROLL
    for (int c = 0; c < DV / 16; ++c)
        acc_o[c] = (acc_t)(0.0f);

    const fwd_tiles tiles = fwd_key_tiles(row0, row_last, diag, window_left,
                                          window_right, seqlen_k, BN);
    for (int n0 = tiles.begin; n0 < tiles.end; n0 += BN) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile (and P) consumed */
        copy_rows(k_s, LDQ, k, k_head, k_stride, n0, BN, D, seqlen_k,
                  head_dim);
        copy_value_tile(vt_s, v, v_head, v_stride, n0, seqlen_k, head_dim_v);
        barrier(CLK_LOCAL_MEM_FENCE);

        acc_t s[NB];
FRAG_UNROLL
        for (int nb = 0; nb < NB; ++nb)
            s[nb] = (acc_t)(0.0f);
        FRAG_MMA_BLOCKS(s, NB, q_s + 16 * wave * LDQ, k_s, LDQ, D / 16, lane)

FRAG_UNROLL
        for (int e = 0; e < ACC_N; ++e) {
            const int row = wave_row0 + ACC_ROW(lane, e);
            const long diag_row = (long)row + diag;
#if FLASHCL_NEEDS_SCORE_PASS
            /* Rows past seqlen_q read the last row's terms (discarded). */
            const score_row terms = score_row_init(
                batch, head, min(row, seqlen_q - 1), diag,
                REAL_LOG2E FLASHCL_VARIANT_NAMES);
#endif
            float tile_max = -INFINITY;
FRAG_UNROLL
            for (int nb = 0; nb < NB; ++nb) {
                const int key = n0 + 16 * nb + col;
                float x = acc_get(s[nb], e) * scale_log2;
#if FLASHCL_NEEDS_SCORE_PASS
                x = score_apply(&terms, min(key, seqlen_k - 1), x
                                    FLASHCL_VARIANT_NAMES);
#endif
                const bool hidden = band_hides(key, diag_row, window_left,
                                               window_right, seqlen_k);
                x = hidden ? -INFINITY : x;
                s[nb] = acc_set(s[nb], e, x);
                tile_max = fmax(tile_max, x);
            }
            const float new_max = fmax(row_max[e], frag_row_max(tile_max, lane));
            /* A row that has seen no key keeps max -inf: P = 0, never NaN. */
            const bool none = new_max == -INFINITY;
            const float correction = none ? 1.0f : exp2(row_max[e] - new_max);
            row_max[e] = new_max;
            row_sum[e] *= correction;
FRAG_UNROLL
            for (int c = 0; c < DV / 16; ++c)
                acc_o[c] = acc_set(acc_o[c], e,
                                   acc_get(acc_o[c], e) * correction);
            __local ushort *p_row = p_s + (16 * wave + ACC_ROW(lane, e)) * LDP;
FRAG_UNROLL
            for (int nb = 0; nb < NB; ++nb) {
                const float prob =
                    none ? 0.0f : exp2(acc_get(s[nb], e) - new_max);
                row_sum[e] += prob;
                p_row[16 * nb + col] = to_storage_bits(prob);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* P of every lane written */

        FRAG_MMA_BLOCKS(acc_o, DV / 16, p_s + 16 * wave * LDP, vt_s, LDP, NB,
                        lane)
    }

FRAG_UNROLL
    for (int e = 0; e < ACC_N; ++e) {
        const int row = wave_row0 + ACC_ROW(lane, e);
        const float sum = frag_row_sum(row_sum[e], lane);
        const float inv_sum = sum > 0 ? 1.0f / sum : 0.0f;
        if (row < seqlen_q) {
FRAG_UNROLL
            for (int c = 0; c < DV / 16; ++c) {
                const int d = 16 * c + col;
                if (d < head_dim_v)
                    store_elem(o, elem_at(o_head, o_stride, row, d),
                               acc_get(acc_o[c], e) * inv_sum);
            }
            if (write_lse && col == 0) {
                const ulong at = lse_base + batch * lse_stride.s0 +
                                 head * lse_stride.s1 +
                                 (ulong)row * lse_stride.s2;
                lse[at] = sum > 0 ? (row_max[e] + log2(sum)) * M_LN2_F
                                  : -INFINITY;
            }
        }
    }
}
