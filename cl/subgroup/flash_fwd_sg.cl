/* Subgroup fused attention forward (devices with cl_khr_subgroups or
 * cl_intel_subgroups; the host picks it: src/paths/subgroup.c).
 *
 * A subgroup of SG lanes owns SG_ROWS query rows; a work-group is
 * WG_SIZE / SG subgroups sharing one K tile and one V tile in local
 * memory. Lanes split the keys for Q K^T (lane l takes keys l, l + SG, ...
 * of a tile, so the transposed K tile is read as consecutive words) and
 * split D_v for P V (lane l owns output columns l, l + SG, ...), so no
 * work-item holds a whole row of scores or of O. The row max is a
 * sub_group_reduce_max per tile; each lane keeps its own part of the row
 * sum (rescaled with the max, which is uniform), added across the
 * subgroup once at the end. P reaches the lanes that own the output
 * columns by subgroup shuffles (intel_sub_group_shuffle, or
 * sub_group_broadcast of cl_khr_subgroups). Where cl_intel_subgroups
 * exists and rows are contiguous and aligned, K and V rows come in with
 * subgroup block reads (FLASHCL_SG_BLOCK_READ).
 *
 * The softmax runs in base 2 on scores pre-scaled by scale * log2 e, so any
 * sign of the scale works. Band edges, variants (cl/common/variants.clh,
 * shared with the portable and the reference kernels) and the compensated
 * sums (always on here) are the portable kernel's
 * (cl/portable/flash_fwd.cl explains the summation and its measurements);
 * here the extra accumulator is DV / SG values per row and lane.
 *
 * Arithmetic is fp32 (fp64 for fp64 storage), also for fp16/bf16 storage.
 * Measured, not used: Q K^T accumulated in half (cl_khr_fp16) on Intel's
 * CPU runtime, `flashcl run --seqlen 512 --heads 2`, inputs in [-1, 1):
 * fp16 D = 64 / 128, O error 8.4e-4 / 8.0e-4 of max |O| (fp32 arithmetic:
 * 3.4e-4 / 2.7e-4) and LSE error 1.1e-5 / 2.0e-5 (fp32: 1.2e-7 / 1.3e-7),
 * over flashcl's LSE tolerance of 1e-5; bf16 storage likewise. A half P V
 * would add the rounding of P on top.
 *
 * Control flow that reaches a subgroup function is uniform in the
 * subgroup: every condition on it depends on the row (per subgroup), the
 * tile or the work-group only.
 *
 * Signature: cl/common/kernel_args.clh; launch contract: docs/kernel-abi.md. */
/* The switches' defaults and ranges: flash_fwd_sg_switches.clh. */
#include "flash_fwd_sg_defaults.clh"
#include "flashcl_common.clh"
#include "kernel_args.clh"
#include "band.clh"
#include "fwd_block.clh"

#if FLASHCL_WG_SIZE < FLASHCL_SG_SIZE || FLASHCL_WG_SIZE % FLASHCL_SG_SIZE != 0
#error "FLASHCL_WG_SIZE must be a multiple of FLASHCL_SG_SIZE"
#endif
#if FLASHCL_BLOCK_M != FLASHCL_WG_SIZE / FLASHCL_SG_SIZE * FLASHCL_SG_ROWS
#error "FLASHCL_BLOCK_M must be (FLASHCL_WG_SIZE / FLASHCL_SG_SIZE) * FLASHCL_SG_ROWS"
#endif
#if FLASHCL_BLOCK_N < FLASHCL_SG_SIZE || FLASHCL_BLOCK_N % FLASHCL_SG_SIZE != 0
#error "FLASHCL_BLOCK_N must be a multiple of FLASHCL_SG_SIZE"
#endif
#if FLASHCL_HEAD_DIM_V % FLASHCL_SG_SIZE != 0
#error "FLASHCL_HEAD_DIM_V must be a multiple of FLASHCL_SG_SIZE"
#endif
/* fp32 only: 16-bit block reads need cl_intel_subgroups_short. */
#if FLASHCL_SG_BLOCK_READ && (!FLASHCL_SG_INTEL || !FLASHCL_DIM_CONTIGUOUS || \
                              FLASHCL_DTYPE != 0)
#error "FLASHCL_SG_BLOCK_READ needs FLASHCL_SG_INTEL, FLASHCL_DIM_CONTIGUOUS and fp32 storage"
#endif

#if FLASHCL_SG_INTEL
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#else
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#endif

#define SG FLASHCL_SG_SIZE
#define ROWS FLASHCL_SG_ROWS
#define D FLASHCL_HEAD_DIM
#define DV FLASHCL_HEAD_DIM_V
#define BM FLASHCL_BLOCK_M
#define BN FLASHCL_BLOCK_N
#define WG FLASHCL_WG_SIZE
#define KEYS_PER_LANE (BN / SG)
#define COLS_PER_LANE (DV / SG)

/* Value of lane `src` (uniform) to every lane. */
#if FLASHCL_SG_INTEL
#define SG_BROADCAST(x, src) intel_sub_group_shuffle((x), (uint)(src))
#else
#define SG_BROADCAST(x, src) sub_group_broadcast((x), (uint)(src))
#endif

#if FLASHCL_SG_REQD
#define SG_REQD_ATTR __attribute__((intel_reqd_sub_group_size(SG)))
#else
#define SG_REQD_ATTR
#endif

/* (hi, lo) <- hi + lo as fl(hi + lo) and its exact error (Knuth's TwoSum). */
#define TWO_SUM(hi, lo)                                                        \
    do {                                                                       \
        const real_t two_sum_s = (hi) + (lo);                                  \
        const real_t two_sum_b = two_sum_s - (hi);                             \
        (lo) = ((hi) - (two_sum_s - two_sum_b)) + ((lo) - two_sum_b);          \
        (hi) = two_sum_s;                                                      \
    } while (0)

/* q_tile[r * D + d] = q[row0 + r, d] * scale_log2, zero outside. */
inline void load_query_tile(__local real_t *q_tile, __global const STORAGE_T *q,
                            ulong head_base, ulong4 stride, int row0,
                            int seqlen_q, int head_dim, real_t scale_log2)
{
    for (int idx = get_local_id(0); idx < BM * D; idx += WG) {
        const int r = idx / D, d = idx % D, row = row0 + r;
        real_t value = 0;
        if (row < seqlen_q && d < head_dim)
            value = load_elem(q, elem_offset(head_base, stride, row, d)) *
                    scale_log2;
        q_tile[idx] = value;
    }
}

#if FLASHCL_SG_BLOCK_READ
/* Element `at` + lane of a contiguous row, one block read for the
 * subgroup. */
inline real_t block_read_row(__global const STORAGE_T *base, ulong at)
{
    return as_float(intel_sub_group_block_read((__global const uint *)(base + at)));
}

/* Tile rows go to subgroups; a row's chunks of SG elements are one block
 * read each when the whole chunk is inside the row, else element loads. */
inline void load_rows_block(__local real_t *tile, bool transposed, int width,
                            __global const STORAGE_T *src, ulong head_base,
                            ulong4 stride, int n0, int seqlen_k, int dim)
{
    const int lane = get_sub_group_local_id();
    const int sg = get_sub_group_id(), sgs = WG / SG;
    for (int j = sg; j < BN; j += sgs) {
        const int key = n0 + j;
        const ulong row_at = elem_offset(head_base, stride, key, 0);
        for (int c0 = 0; c0 < width; c0 += SG) {
            const int d = c0 + lane;
            real_t value = 0;
            if (key < seqlen_k && c0 + SG <= dim)
                value = block_read_row(src, row_at + (ulong)c0);
            else if (key < seqlen_k && d < dim)
                value = load_elem(src, row_at + (ulong)d);
            if (d < width) {
                if (transposed)
                    tile[d * BN + j] = value;
                else
                    tile[j * width + d] = value;
            }
        }
    }
}
#endif

/* k_t[d * BN + j] = k[n0 + j, d]; zero past the keys and head_dim. */
inline void load_key_tile(__local real_t *k_t, __global const STORAGE_T *k,
                          ulong head_base, ulong4 stride, int n0, int seqlen_k,
                          int head_dim)
{
#if FLASHCL_SG_BLOCK_READ
    load_rows_block(k_t, true, D, k, head_base, stride, n0, seqlen_k, head_dim);
#else
    fwd_load_rows(k_t, true, D, BN, WG, k, head_base, stride, n0, seqlen_k,
                  head_dim);
#endif
}

/* v_tile[j * DV + d] = v[n0 + j, d]; zero past the keys and head_dim_v. */
inline void load_value_tile(__local real_t *v_tile, __global const STORAGE_T *v,
                            ulong head_base, ulong4 stride, int n0,
                            int seqlen_k, int head_dim_v)
{
#if FLASHCL_SG_BLOCK_READ
    load_rows_block(v_tile, false, DV, v, head_base, stride, n0, seqlen_k,
                    head_dim_v);
#else
    fwd_load_rows(v_tile, false, DV, BN, WG, v, head_base, stride, n0,
                  seqlen_k, head_dim_v);
#endif
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) SG_REQD_ATTR void
flashcl_attention_fwd(FLASHCL_FWD_PARAMS)
{
    __local real_t q_tile[BM * D];
    __local real_t k_t[D * BN];
    __local real_t v_tile[BN * DV];

    const int lane = get_sub_group_local_id();
    const int sg = get_sub_group_id();
    const int block = fwd_query_block();
    const int head = get_group_id(1);
    const int batch = get_group_id(2);
    const int kv_head = head / group_size;
    const int row0 = block * BM;
    const int my_row0 = row0 + sg * ROWS; /* this subgroup's first row */
    const int row_last = min(seqlen_q, row0 + BM) - 1;

    const ulong q_head = fwd_head_base(base.s0, q_stride, batch, head);
    const ulong k_head = fwd_head_base(base.s1, k_stride, batch, kv_head);
    const ulong v_head = fwd_head_base(base.s2, v_stride, batch, kv_head);
    const ulong o_head = fwd_head_base(base.s3, o_stride, batch, head);

    score_row extras[ROWS];
    real_t row_max[ROWS], lane_sum[ROWS];
    real_t acc[ROWS][COLS_PER_LANE];
    real_t sum_lo[ROWS], acc_lo[ROWS][COLS_PER_LANE];
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        extras[r] = score_row_init(batch, head, my_row0 + r, diag,
                                   REAL_LOG2E FLASHCL_VARIANT_NAMES);
        row_max[r] = -INFINITY;
        lane_sum[r] = 0;
#if FLASHCL_SINKS
        /* The sink is one more logit with no value vector; lane 0 holds
         * its share of the sum. */
        row_max[r] = sink_logit(head, REAL_LOG2E FLASHCL_VARIANT_NAMES);
        lane_sum[r] = row_max[r] != -INFINITY && lane == 0 ? 1 : 0;
#endif
#pragma unroll
        for (int c = 0; c < COLS_PER_LANE; ++c)
            acc[r][c] = 0;
        sum_lo[r] = 0;
#pragma unroll
        for (int c = 0; c < COLS_PER_LANE; ++c)
            acc_lo[r][c] = 0;
    }

    load_query_tile(q_tile, q, q_head, q_stride, row0, seqlen_q, head_dim,
                    scale_log2);

    /* Only tiles that intersect the group's visible band. */
    const fwd_tiles tiles = fwd_key_tiles(row0, row_last, diag, window_left,
                                          window_right, seqlen_k, BN);
    for (int n0 = tiles.begin; n0 < tiles.end; n0 += BN) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile fully consumed */
        load_key_tile(k_t, k, k_head, k_stride, n0, seqlen_k, head_dim);
        load_value_tile(v_tile, v, v_head, v_stride, n0, seqlen_k, head_dim_v);
        barrier(CLK_LOCAL_MEM_FENCE);

        /* s[r][t]: row r's score of key n0 + t * SG + lane. */
        real_t s[ROWS][KEYS_PER_LANE];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int t = 0; t < KEYS_PER_LANE; ++t)
                s[r][t] = 0;
        __local const real_t *q_rows = q_tile + sg * ROWS * D;
        for (int d = 0; d < D; ++d) {
            real_t kv[KEYS_PER_LANE];
#pragma unroll
            for (int t = 0; t < KEYS_PER_LANE; ++t)
                kv[t] = k_t[d * BN + t * SG + lane];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                const real_t qv = q_rows[r * D + d];
#pragma unroll
                for (int t = 0; t < KEYS_PER_LANE; ++t)
                    s[r][t] = fma(qv, kv[t], s[r][t]);
            }
        }

        /* Band edges inside this tile (work-group-uniform test). */
        const bool crosses_band =
            band_tile_crosses(n0, BN, row0, row_last, diag, window_left,
                              window_right, seqlen_k);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
#if FLASHCL_NEEDS_SCORE_PASS
            if (my_row0 + r < seqlen_q) {
#pragma unroll
                for (int t = 0; t < KEYS_PER_LANE; ++t) {
                    const int key = min(n0 + t * SG + lane, seqlen_k - 1);
                    s[r][t] = score_apply(&extras[r], key, s[r][t]
                                              FLASHCL_VARIANT_NAMES);
                }
            }
#endif
            if (crosses_band) {
                const long hi = band_row_hi(extras[r].diag_row, window_right,
                                            seqlen_k);
                const long lo = band_row_lo(extras[r].diag_row, window_left);
#pragma unroll
                for (int t = 0; t < KEYS_PER_LANE; ++t) {
                    const long key = n0 + t * SG + lane;
                    if (key > hi || key < lo)
                        s[r][t] = -INFINITY;
                }
            }
        }

        /* Online softmax per row; max uniform across the subgroup. */
        real_t correction[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            real_t m = s[r][0];
#pragma unroll
            for (int t = 1; t < KEYS_PER_LANE; ++t)
                m = fmax(m, s[r][t]);
            const real_t new_max = fmax(row_max[r], sub_group_reduce_max(m));
            /* A row that has seen no key keeps max -inf: p = 0, never NaN. */
            const bool dead = new_max == -INFINITY;
            correction[r] = dead ? 1 : exp2(row_max[r] - new_max);
            row_max[r] = new_max;
            real_t psum = 0;
#pragma unroll
            for (int t = 0; t < KEYS_PER_LANE; ++t) {
                s[r][t] = dead ? 0 : exp2(s[r][t] - new_max);
                psum += s[r][t];
            }
            lane_sum[r] *= correction[r];
            sum_lo[r] = sum_lo[r] * correction[r] + psum;
            TWO_SUM(lane_sum[r], sum_lo[r]);
#pragma unroll
            for (int c = 0; c < COLS_PER_LANE; ++c)
                acc_lo[r][c] *= correction[r];
        }

        /* P V: key t * SG + src's probability, from lane src to all. The
         * lane loop stays rolled: unrolled, Intel's CPU compiler spilled
         * (fp32 D = 64 N = 2048, 8 rows x 8 subgroups x 128 keys: about
         * 20 % slower) and every compile took longer. */
#pragma unroll
        for (int t = 0; t < KEYS_PER_LANE; ++t) {
            for (int src = 0; src < SG; ++src) {
                __local const real_t *v_row = v_tile + (t * SG + src) * DV;
                real_t vv[COLS_PER_LANE];
#pragma unroll
                for (int c = 0; c < COLS_PER_LANE; ++c)
                    vv[c] = v_row[c * SG + lane];
#pragma unroll
                for (int r = 0; r < ROWS; ++r) {
                    const real_t p = SG_BROADCAST(s[r][t], src);
#pragma unroll
                    for (int c = 0; c < COLS_PER_LANE; ++c)
                        acc_lo[r][c] = fma(p, vv[c], acc_lo[r][c]);
                }
            }
        }
        /* The high parts are read and written once per tile. */
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int c = 0; c < COLS_PER_LANE; ++c) {
                real_t hi = acc[r][c] * correction[r];
                TWO_SUM(hi, acc_lo[r][c]);
                acc[r][c] = hi;
            }
    }

#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        const real_t row_sum = sub_group_reduce_add(lane_sum[r] + sum_lo[r]);
#pragma unroll
        for (int c = 0; c < COLS_PER_LANE; ++c)
            acc[r][c] += acc_lo[r][c];
        const int row = my_row0 + r;
        if (row >= seqlen_q)
            continue;
        const real_t inv_sum = row_sum > 0 ? 1 / row_sum : 0;
        /* Lanes write consecutive columns: coalesced without staging. */
#pragma unroll
        for (int c = 0; c < COLS_PER_LANE; ++c) {
            const int d = c * SG + lane;
            if (d < head_dim_v)
                store_elem(o, elem_offset(o_head, o_stride, row, d),
                           acc[r][c] * inv_sum);
        }
        if (write_lse && lane == 0) {
            const ulong at = lse_base + batch * lse_stride.s0 +
                             head * lse_stride.s1 + (ulong)row * lse_stride.s2;
            lse[at] = row_sum > 0
                          ? (float)((row_max[r] + log2(row_sum)) * REAL_LN2)
                          : -INFINITY;
        }
    }
}
