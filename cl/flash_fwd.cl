/* Portable fused attention forward (OpenCL C 1.2, any vendor).
 *
 * One work-item owns one query row. Per work-group: a BLOCK_M x D query tile
 * (pre-scaled by scale*log2 e, stored transposed so work-items read
 * consecutive words), then BLOCK_N-key K (transposed) and V tiles streamed
 * through local memory. Scores for a tile are vectors over keys (no
 * horizontal sums), the online softmax runs in base 2, and the accumulator
 * (vectors over D) is rescaled only when the row max moves. Causal: tiles
 * wholly above the diagonal are never loaded, masks apply only to tiles
 * that cross it or the end of the keys.
 *
 * Signature and launch contract: docs/kernel-abi.md. */
#include "flashcl_common.clh"

#ifndef FLASHCL_HEAD_DIM
#define FLASHCL_HEAD_DIM 64
#endif
#ifndef FLASHCL_BLOCK_M
#define FLASHCL_BLOCK_M 64
#endif
#ifndef FLASHCL_BLOCK_N
#define FLASHCL_BLOCK_N 64
#endif
#ifndef FLASHCL_WG_SIZE
#define FLASHCL_WG_SIZE FLASHCL_BLOCK_M
#endif
#ifndef FLASHCL_VEC
#define FLASHCL_VEC 4
#endif
#ifndef FLASHCL_DIM_CONTIGUOUS
#define FLASHCL_DIM_CONTIGUOUS 0
#endif

#if FLASHCL_VEC != 2 && FLASHCL_VEC != 4 && FLASHCL_VEC != 8 && FLASHCL_VEC != 16
#error "FLASHCL_VEC must be 2, 4, 8 or 16"
#endif
#if FLASHCL_HEAD_DIM < 1 || FLASHCL_HEAD_DIM > 256 || FLASHCL_HEAD_DIM % FLASHCL_VEC != 0
#error "FLASHCL_HEAD_DIM must be in 1..256 and a multiple of FLASHCL_VEC"
#endif
#if FLASHCL_BLOCK_N < FLASHCL_VEC || FLASHCL_BLOCK_N % FLASHCL_VEC != 0 || FLASHCL_BLOCK_N > 256
#error "FLASHCL_BLOCK_N must be a multiple of FLASHCL_VEC, at most 256"
#endif
#if FLASHCL_BLOCK_M < 1 || FLASHCL_BLOCK_M > 1024
#error "FLASHCL_BLOCK_M must be in 1..1024"
#endif
#if FLASHCL_WG_SIZE != FLASHCL_BLOCK_M
#error "the portable kernel runs one work-item per query row: FLASHCL_WG_SIZE must equal FLASHCL_BLOCK_M"
#endif

#define D FLASHCL_HEAD_DIM
#define BM FLASHCL_BLOCK_M
#define BN FLASHCL_BLOCK_N
#define VEC FLASHCL_VEC
#define D_VECS (D / VEC)
#define BN_VECS (BN / VEC)

#define vec_t FLASHCL_CONCAT(float, VEC)
#define vload_vec FLASHCL_CONCAT(vload, VEC)
#define vstore_vec FLASHCL_CONCAT(vstore, VEC)

inline float vec_max_lanes(vec_t v)
{
#if VEC == 16
    float8 v8 = fmax(v.lo, v.hi);
    float4 v4 = fmax(v8.lo, v8.hi);
#elif VEC == 8
    float4 v4 = fmax(v.lo, v.hi);
#elif VEC == 4
    float4 v4 = v;
#endif
#if VEC >= 4
    float2 v2 = fmax(v4.lo, v4.hi);
#else
    float2 v2 = v;
#endif
    return fmax(v2.x, v2.y);
}

inline float vec_sum_lanes(vec_t v)
{
#if VEC == 16
    float8 v8 = v.lo + v.hi;
    float4 v4 = v8.lo + v8.hi;
#elif VEC == 8
    float4 v4 = v.lo + v.hi;
#elif VEC == 4
    float4 v4 = v;
#endif
#if VEC >= 4
    float2 v2 = v4.lo + v4.hi;
#else
    float2 v2 = v;
#endif
    return v2.x + v2.y;
}

/* Offset of element (row, d) of one head's matrix. */
inline ulong elem_offset(ulong head_base, ulong4 stride, int row, int d)
{
    return head_base + (ulong)row * stride.s2 +
#if FLASHCL_DIM_CONTIGUOUS
           (ulong)d;
#else
           (ulong)d * stride.s3;
#endif
}

/* q_t[d * BM + r] = q[row0 + r, d] * scale_log2, zero outside the problem. */
inline void load_query_tile(__local float *q_t, __global const STORAGE_T *q,
                            ulong head_base, ulong4 stride, int row0,
                            int seqlen_q, int head_dim, float scale_log2)
{
    for (int idx = get_local_id(0); idx < BM * D; idx += BM) {
        int r = idx / D, d = idx % D;
        int row = row0 + r;
        float value = 0.0f;
        if (row < seqlen_q && d < head_dim)
            value = load_elem(q, elem_offset(head_base, stride, row, d)) *
                    scale_log2;
        q_t[d * BM + r] = value;
    }
}

/* k_t[d * BN + j] = k[n0 + j, d]; v_tile[j * D + d] = v[n0 + j, d]. */
inline void load_kv_tile(__local float *k_t, __local float *v_tile,
                         __global const STORAGE_T *k,
                         __global const STORAGE_T *v, ulong k_head,
                         ulong v_head, ulong4 k_stride, ulong4 v_stride,
                         int n0, int seqlen_k, int head_dim)
{
    for (int idx = get_local_id(0); idx < BN * D; idx += BM) {
        int j = idx / D, d = idx % D;
        int key = n0 + j;
        float k_value = 0.0f, v_value = 0.0f;
        if (key < seqlen_k && d < head_dim) {
            k_value = load_elem(k, elem_offset(k_head, k_stride, key, d));
            v_value = load_elem(v, elem_offset(v_head, v_stride, key, d));
        }
        k_t[d * BN + j] = k_value;
        v_tile[j * D + d] = v_value;
    }
}

__kernel __attribute__((reqd_work_group_size(FLASHCL_WG_SIZE, 1, 1))) void
flashcl_attention_fwd(__global const STORAGE_T *q, __global const STORAGE_T *k,
                      __global const STORAGE_T *v, __global STORAGE_T *o,
                      __global float *lse, const ulong4 q_stride,
                      const ulong4 k_stride, const ulong4 v_stride,
                      const ulong4 o_stride, const ulong4 lse_stride,
                      const ulong4 base, const ulong lse_base,
                      const int seqlen_q, const int seqlen_k,
                      const int head_dim, const int group_size,
                      const float scale_log2, const int write_lse)
{
    /* The query tile's space is reused to stage the output. */
    __local vec_t q_t_vecs[BM * D / VEC];
    __local vec_t k_t_vecs[BN * D / VEC];
    __local vec_t v_tile_vecs[BN * D / VEC];
    __local float *q_t = (__local float *)q_t_vecs;
    __local float *k_t = (__local float *)k_t_vecs;
    __local float *v_tile = (__local float *)v_tile_vecs;

    const int lid = get_local_id(0);
    const int num_blocks = get_num_groups(0);
#if FLASHCL_CAUSAL
    /* Later query blocks see more keys: start them first. */
    const int block = num_blocks - 1 - (int)get_group_id(0);
#else
    const int block = get_group_id(0);
#endif
    const int head = get_group_id(1);
    const int batch = get_group_id(2);
    const int kv_head = head / group_size;
    const int row0 = block * BM;
    const int row = row0 + lid;
    /* Query i sees key j iff j <= i + diag (bottom-right alignment). */
    const int diag = seqlen_k - seqlen_q;

    const ulong q_head = base.s0 + batch * q_stride.s0 + head * q_stride.s1;
    const ulong k_head = base.s1 + batch * k_stride.s0 + kv_head * k_stride.s1;
    const ulong v_head = base.s2 + batch * v_stride.s0 + kv_head * v_stride.s1;
    const ulong o_head = base.s3 + batch * o_stride.s0 + head * o_stride.s1;

    load_query_tile(q_t, q, q_head, q_stride, row0, seqlen_q, head_dim,
                    scale_log2);

    vec_t acc[D_VECS];
    for (int c = 0; c < D_VECS; ++c)
        acc[c] = (vec_t)(0.0f);
    float row_max = -INFINITY;
    float row_sum = 0.0f;

    int kv_end = seqlen_k;
#if FLASHCL_CAUSAL
    kv_end = min(seqlen_k, min(seqlen_q, row0 + BM) + diag);
#endif
    for (int n0 = 0; n0 < kv_end; n0 += BN) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile fully consumed */
        load_kv_tile(k_t, v_tile, k, v, k_head, v_head, k_stride, v_stride,
                     n0, seqlen_k, head_dim);
        barrier(CLK_LOCAL_MEM_FENCE);

        vec_t score[BN_VECS];
        for (int jb = 0; jb < BN_VECS; ++jb)
            score[jb] = (vec_t)(0.0f);
        for (int d = 0; d < D; ++d) {
            float q_value = q_t[d * BM + lid];
#pragma unroll
            for (int jb = 0; jb < BN_VECS; ++jb)
                score[jb] = fma((vec_t)(q_value),
                                vload_vec(jb, k_t + d * BN), score[jb]);
        }

        float scores[BN];
#pragma unroll
        for (int jb = 0; jb < BN_VECS; ++jb)
            vstore_vec(score[jb], jb, scores);
        const bool crosses_end = n0 + BN > seqlen_k;
        const bool crosses_diag = FLASHCL_CAUSAL && n0 + BN - 1 > row0 + diag;
        if (crosses_end || crosses_diag) {
            const int last_key = FLASHCL_CAUSAL ? min(seqlen_k - 1, row + diag)
                                                : seqlen_k - 1;
#pragma unroll
            for (int j = 0; j < BN; ++j)
                if (n0 + j > last_key)
                    scores[j] = -INFINITY;
        }

        vec_t tile_max_vec = vload_vec(0, scores);
#pragma unroll
        for (int jb = 1; jb < BN_VECS; ++jb)
            tile_max_vec = fmax(tile_max_vec, vload_vec(jb, scores));
        const float new_max = fmax(row_max, vec_max_lanes(tile_max_vec));

        /* A row that has seen no key yet keeps max -inf: skip, never NaN. */
        if (new_max != -INFINITY) {
            const float correction = exp2(row_max - new_max);
            row_max = new_max;
            vec_t prob_sum = (vec_t)(0.0f);
#pragma unroll
            for (int jb = 0; jb < BN_VECS; ++jb) {
                vec_t prob = exp2(vload_vec(jb, scores) - (vec_t)(new_max));
                prob_sum += prob;
                vstore_vec(prob, jb, scores);
            }
            row_sum = row_sum * correction + vec_sum_lanes(prob_sum);
            for (int c = 0; c < D_VECS; ++c)
                acc[c] *= correction;
#pragma unroll 4
            for (int j = 0; j < BN; ++j) {
                const vec_t prob = (vec_t)(scores[j]);
                __local const float *v_row = v_tile + j * D;
                for (int c = 0; c < D_VECS; ++c)
                    acc[c] = fma(prob, vload_vec(c, v_row), acc[c]);
            }
        }
    }

    /* Stage O through local memory so the global writes are coalesced. */
    const float inv_sum = row_sum > 0.0f ? 1.0f / row_sum : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int c = 0; c < D_VECS; ++c)
        vstore_vec(acc[c] * inv_sum, c, q_t + lid * D);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int idx = lid; idx < BM * D; idx += BM) {
        int r = idx / D, d = idx % D;
        int out_row = row0 + r;
        if (out_row < seqlen_q && d < head_dim)
            store_elem(o, elem_offset(o_head, o_stride, out_row, d),
                       q_t[r * D + d]);
    }
    if (write_lse && row < seqlen_q) {
        const ulong at = lse_base + batch * lse_stride.s0 +
                         head * lse_stride.s1 + (ulong)row * lse_stride.s2;
        lse[at] = row_sum > 0.0f ? (row_max + log2(row_sum)) * M_LN2_F
                                 : -INFINITY;
    }
}
