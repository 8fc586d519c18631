/* Split-KV attention for inference (issue 11): decoding, KV caches,
 * variable-length batches and paged KV, on any OpenCL 1.2 device.
 *
 * Three kernels with one argument list (kernel_args.clh's forward list,
 * then split_args.clh):
 *
 *   flashcl_split_append   copies k_new / v_new into the cache at each
 *                          sequence's length (FLASHCL_APPEND), before
 *   flashcl_split_fwd      one work-group per (query tile, KV head x
 *                          split, sequence): the query heads that share a
 *                          KV head are packed into the group's rows (row t
 *                          = query i * group_size + head g), so each K/V
 *                          tile is read once for all of them; the keys of a
 *                          sequence are cut into num_splits ranges of whole
 *                          BLOCK_N tiles, and with FLASHCL_SPLIT each group
 *                          writes its fp32 partial O and LSE to scratch,
 *   flashcl_split_combine  which merges them (cl/common/combine.clh), one
 *                          work-item per output element.
 *
 * One work-item per packed row, K and V tiles in local memory, online
 * softmax in base 2, the variants' score code from variants.clh, and the
 * compensated row sum and accumulator (FLASHCL_COMPENSATED): the portable
 * kernel's scheme (cl/portable/flash_fwd.cl, which says why), so a split
 * of a million keys is as accurate as the unsplit kernel.
 *
 * Sequences (FLASHCL_Q_VARLEN, FLASHCL_KV_MODE) are read on the device
 * and never trusted: prefix sums are clamped to [0, total] (an end below
 * its start is an empty sequence) and lengths to the maxima the host sized
 * the grid for; cache lengths to [0, capacity], new rows past the
 * capacity dropped; a cache row
 * (batch_idx) outside [0, kv_batch) makes the sequence see no keys and
 * receive nothing; a page outside [0, kv_batch) is skipped (its keys are
 * masked, appends into it dropped). */
#include "flashcl_common.clh"
#include "kernel_args.clh"
#include "split_args.clh"
#include "combine.clh"
#include "packed_span.clh"

#include "flash_split_defaults.clh"
#include "band.clh"
#include "kv_load.clh"

#if FLASHCL_HEAD_DIM < 1 || FLASHCL_HEAD_DIM > 256 || FLASHCL_HEAD_DIM % FLASHCL_VEC != 0
#error "FLASHCL_HEAD_DIM must be in 1..256 and a multiple of FLASHCL_VEC"
#endif
#if FLASHCL_HEAD_DIM_V < 1 || FLASHCL_HEAD_DIM_V > 256 || FLASHCL_HEAD_DIM_V % FLASHCL_VEC != 0
#error "FLASHCL_HEAD_DIM_V must be in 1..256 and a multiple of FLASHCL_VEC"
#endif
#if (FLASHCL_SPLIT_LANES != 0) + (FLASHCL_SPLIT_WIDE != 0) + (FLASHCL_SPLIT_MMA != 0) > 1
#error "FLASHCL_SPLIT_LANES, FLASHCL_SPLIT_WIDE and FLASHCL_SPLIT_MMA pick different kernels"
#endif
#if !FLASHCL_SPLIT_WIDE && !FLASHCL_SPLIT_LANES && !FLASHCL_SPLIT_MMA && FLASHCL_WG_SIZE != FLASHCL_BLOCK_M
#error "one work-item per packed row: FLASHCL_WG_SIZE must equal FLASHCL_BLOCK_M"
#endif
#if FLASHCL_BATCH_IDX && FLASHCL_KV_MODE != 2
#error "FLASHCL_BATCH_IDX needs a dense cache (FLASHCL_KV_MODE 2)"
#endif
#if (FLASHCL_K_QUANT && FLASHCL_HEAD_DIM % 4) || (FLASHCL_V_QUANT && FLASHCL_HEAD_DIM_V % 4)
#error "quantized rows are read four values at a time: pad the head dims to 4"
#endif
#if FLASHCL_APPEND && FLASHCL_KV_MODE < 2
#error "FLASHCL_APPEND needs a KV cache (FLASHCL_KV_MODE 2 or 3)"
#endif

#define D FLASHCL_HEAD_DIM
#define DV FLASHCL_HEAD_DIM_V
/* include/flashcl.h's FLASHCL_MAX_SPLITS, which the host enforces. */
#define FLASHCL_MAX_SPLITS_CL 256
#define BM FLASHCL_BLOCK_M
#define BN FLASHCL_BLOCK_N
#define VEC FLASHCL_VEC
#define DV_VECS (DV / VEC)
#define BN_VECS (BN / VEC)

#define vec_t FLASHCL_CONCAT(FLASHCL_REAL, VEC)
#define vload_vec FLASHCL_CONCAT(vload, VEC)
#define vstore_vec FLASHCL_CONCAT(vstore, VEC)

/* ---- sequences -------------------------------------------------------- */

/* One sequence as the device reads it. */
typedef struct seq_info {
    int nq, nk;        /* query rows, visible keys (after clamping) */
    int q_row0;        /* first row in the q / o / lse views */
    int q_batch;       /* batch index in those views (0 when packed) */
    int kv_row;        /* cache row, or first packed key (varlen) */
    int cache_len;     /* keys before the append (cache modes) */
    long diag;         /* the aligned diagonal: key of query 0 */
} seq_info;

inline int read_len(__global const int *a, ulong base, ulong stride, int b)
{
    return a[base + (ulong)b * stride];
}

inline seq_info sequence(const int b FLASHCL_FWD_ARGS(FLASHCL_KPARAM)
                             FLASHCL_SPLIT_ARGS(FLASHCL_KPARAM))
{
    seq_info s;
#if FLASHCL_Q_VARLEN
    const packed_span rows = packed_span_of(cu_q, len_base.s0, len_stride.s0,
                                            b, total_q, seqlen_q);
    s.q_row0 = rows.first;
    s.nq = rows.count;
    s.q_batch = 0;
#else
    s.q_row0 = 0;
    s.nq = seqlen_q;
    s.q_batch = b;
#endif
    s.cache_len = 0;
#if FLASHCL_KV_MODE == 0
    s.kv_row = b;
    s.nk = seqlen_k;
#elif FLASHCL_KV_MODE == 1
    const packed_span keys = packed_span_of(cu_k, len_base.s1, len_stride.s1,
                                            b, total_k, seqlen_k);
    s.kv_row = keys.first;
    s.nk = keys.count;
#else
    /* seqlen_k is the capacity; the new rows go after the cached ones,
     * and those past the capacity are dropped: a cache is the caller's
     * data, so an append never writes over cached rows. */
    s.cache_len = clamp(read_len(seqlens, len_base.s2, len_stride.s2, b), 0,
                        seqlen_k);
    s.nk = min(s.cache_len, seqlen_k - seqlen_new) + seqlen_new;
    s.kv_row = b;
#if FLASHCL_BATCH_IDX
    s.kv_row = read_len(batch_idx, len_base.s3, len_stride.s3, b);
    if (s.kv_row < 0 || s.kv_row >= kv_batch) {
        s.kv_row = 0;
        s.nk = 0;
        s.cache_len = -1; /* nothing appended */
    }
#endif
#endif
    s.diag = aligned_diag(top_left, s.nq, s.nk);
    return s;
}

/* Element offset of key row `key` (head `kv_head`, dim 0) of K or V, and
 * whether it may be read: paged caches map the key through the block
 * table, and a page index out of range reads nothing. */
inline bool key_row(const seq_info *s, int b, int kv_head, int key,
                    ulong base, ulong4 stride, ulong *at
                        FLASHCL_SPLIT_ARGS(FLASHCL_KPARAM))
{
#if FLASHCL_KV_MODE == 3
    const int page = table[table_base + (ulong)b * table_stride +
                           (ulong)(key / page_size)];
    if (page < 0 || page >= kv_batch)
        return false;
    *at = base + (ulong)page * stride.s0 + (ulong)kv_head * stride.s1 +
          (ulong)(key % page_size) * stride.s2;
#elif FLASHCL_KV_MODE == 1
    *at = base + (ulong)kv_head * stride.s1 +
          (ulong)(s->kv_row + key) * stride.s2;
#else
    *at = base + (ulong)s->kv_row * stride.s0 + (ulong)kv_head * stride.s1 +
          (ulong)key * stride.s2;
#endif
    return true;
}

/* The keys a work-group runs (query tile from packed row t0, part
 * `split`): [begin, end), whole BN tiles of the sequence cut into
 * num_splits ranges, so a tile never straddles two parts, then narrowed to
 * what the tile's query rows can see under the causal mask and the left
 * window. Shared by the three attention kernels. */
typedef struct key_range {
    int begin, end;
} key_range;

inline key_range split_keys(const seq_info *s, int t0, int g_size, int split,
                            int num_splits, int window_left, int window_right)
{
    const int i_first = t0 / g_size;
    const int i_last = min(s->nq - 1, (t0 + BM - 1) / g_size);
    const int tiles = (s->nk + BN - 1) / BN;
    const int per_split = (tiles + num_splits - 1) / num_splits;
    key_range r;
    r.begin = min(s->nk, split * per_split * BN);
    r.end = min(s->nk, (split + 1) * per_split * BN);
    /* the band's keys within the split's */
#if FLASHCL_CAUSAL
    r.end = (int)min((long)r.end,
                     max(0L, band_right_end(i_last, s->diag, window_right)));
#else
    (void)i_last;
    (void)window_right;
#endif
#if FLASHCL_WINDOW_LEFT
    r.begin = (int)max((long)r.begin,
                       band_tile_first(band_key_begin(i_first, s->diag,
                                                      window_left, s->nk),
                                       BN) * BN);
#else
    (void)i_first;
#endif
    return r;
}

/* The visible keys of packed row t: [lo, hi], empty for a row past the
 * sequence (the lane-group and tensor-core kernels). Plain inline, not
 * always_inline: forced inlining of its struct return left a
 * llvm.experimental.noalias.scope.decl that Oclgrind cannot run even at
 * -cl-opt-disable, so the lane-group kernel could not be checked there;
 * clang inlines it anyway (scripts/nv_kernel_check.sh's 65 PTX files
 * byte for byte the same, 2026-12-07). */
typedef struct row_range {
    int lo, hi;
} row_range;

inline row_range visible_keys(const seq_info *s, int t, int g_size,
                              int window_left, int window_right)
{
    const int i = t / g_size;
    const long diag_row = (long)i + s->diag;
    const long lo = band_row_lo(diag_row, window_left);
    /* a row past the sequence sees no key: hi = -1 */
    const long hi = band_row_hi(diag_row, window_right, i < s->nq ? s->nk : 0);
    /* keys are in [0, nk): clamped there, the bounds fit an int */
    row_range v;
    v.lo = (int)clamp(lo, -1L, (long)s->nk);
    v.hi = (int)clamp(hi, -1L, (long)s->nk);
    return v;
}

/* ---- append ------------------------------------------------------------ */

/* Work-item (d, new row j x KV head, sequence b) copies K[d] and V[d]. */
__kernel void flashcl_split_append(FLASHCL_SPLIT_PARAMS)
{
#if FLASHCL_APPEND
    const int d = get_global_id(0);
    const int kv_heads = get_global_size(1) / seqlen_new;
    const int row = get_global_id(1) / kv_heads;
    const int kv_head = get_global_id(1) % kv_heads;
    const int b = get_global_id(2);
    const seq_info s = sequence(b FLASHCL_FWD_ARGS(FLASHCL_KNAME)
                                    FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    if (s.cache_len < 0 || row >= seqlen_k - s.cache_len)
        return; /* skipped sequence, or a row past the capacity */
    const int key = s.cache_len + row;
    ulong kat, vat;
    if (!key_row(&s, b, kv_head, key, base.s1, k_stride, &kat
                     FLASHCL_SPLIT_ARGS(FLASHCL_KNAME)) ||
        !key_row(&s, b, kv_head, key, base.s2, v_stride, &vat
                     FLASHCL_SPLIT_ARGS(FLASHCL_KNAME)))
        return;
    const ulong k_from = k_new_base + (ulong)b * k_new_stride.s0 +
                         (ulong)kv_head * k_new_stride.s1 +
                         (ulong)row * k_new_stride.s2;
    const ulong v_from = v_new_base + (ulong)b * v_new_stride.s0 +
                         (ulong)kv_head * v_new_stride.s1 +
                         (ulong)row * v_new_stride.s2;
#if FLASHCL_K_QUANT
    /* a quantized row is one item's: its scale needs the whole row */
    ulong ks = 0, kz = 0;
    key_row(&s, b, kv_head, key, quant_base.s0, k_scale_stride, &ks
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    key_row(&s, b, kv_head, key, quant_base.s2, k_zero_stride, &kz
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    if (d == 0)
        kvq_append_row(FLASHCL_K_QUANT, (__global uchar *)k_cache, kat,
                       k_stride.s3, k_new, k_from, k_new_stride.s3, head_dim,
                       k_scale, ks, k_scale_stride.s3, k_zero, kz,
                       k_zero_stride.s3);
#else
    if (d < head_dim)
        k_cache[kat + (ulong)d * k_stride.s3] =
            k_new[k_from + (ulong)d * k_new_stride.s3];
#endif
#if FLASHCL_V_QUANT
    ulong vs = 0, vz = 0;
    key_row(&s, b, kv_head, key, quant_base.s1, v_scale_stride, &vs
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    key_row(&s, b, kv_head, key, quant_base.s3, v_zero_stride, &vz
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    if (d == 0)
        kvq_append_row(FLASHCL_V_QUANT, (__global uchar *)v_cache, vat,
                       v_stride.s3, v_new, v_from, v_new_stride.s3,
                       head_dim_v, v_scale, vs, v_scale_stride.s3, v_zero, vz,
                       v_zero_stride.s3);
#else
    if (d < head_dim_v)
        v_cache[vat + (ulong)d * v_stride.s3] =
            v_new[v_from + (ulong)d * v_new_stride.s3];
#endif
#endif
}

/* ---- status ------------------------------------------------------------ */

/* 1 when sequence b's prefix sums needed a clamp or a cut. */
inline int span_clamped(__global const int *cu, ulong at, ulong stride, int b,
                        int total, int most)
{
    const int start = cu[at + (ulong)b * stride];
    const int end = cu[at + (ulong)(b + 1) * stride];
    return start < 0 || start > total || end < 0 || end > total ||
           end < start || end - start > most;
}

/* Work-item b: what the other kernels clamp or skip for sequence b, added
 * to the caller's counters (include/flashcl.h's FLASHCL_INFER_STATUS_*),
 * which the host zeroes before. */
__kernel void flashcl_split_status(FLASHCL_SPLIT_PARAMS)
{
    const int b = get_global_id(0);
    int dropped = 0, pages = 0, clamped = 0, rows = 0;
#if FLASHCL_Q_VARLEN
    clamped += span_clamped(cu_q, len_base.s0, len_stride.s0, b, total_q,
                            seqlen_q);
#endif
#if FLASHCL_KV_MODE == 1
    clamped += span_clamped(cu_k, len_base.s1, len_stride.s1, b, total_k,
                            seqlen_k);
#elif FLASHCL_KV_MODE >= 2
    const int len = read_len(seqlens, len_base.s2, len_stride.s2, b);
    clamped += len < 0 || len > seqlen_k;
    const seq_info s = sequence(b FLASHCL_FWD_ARGS(FLASHCL_KNAME)
                                    FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    if (s.cache_len < 0) {
        rows = 1;
        dropped = seqlen_new;
    } else {
        dropped = seqlen_new - (s.nk - s.cache_len);
#if FLASHCL_KV_MODE == 3
        const int used = (s.nk + page_size - 1) / page_size;
        for (int p = 0; p < used; ++p) {
            const int page = table[table_base + (ulong)b * table_stride +
                                   (ulong)p];
            if (page >= 0 && page < kv_batch)
                continue;
            ++pages;
            /* the appended rows this page would have held */
            const int lo = max(p * page_size, s.cache_len);
            const int hi = min((p + 1) * page_size, s.nk);
            dropped += max(0, hi - lo);
        }
#endif
    }
#endif
    __global int *out = infer_status + status_base;
    if (dropped)
        atomic_add(out + 0, dropped);
    if (pages)
        atomic_add(out + 1, pages);
    if (clamped)
        atomic_add(out + 2, clamped);
    if (rows)
        atomic_add(out + 3, rows);
}

/* ---- attention ----------------------------------------------------------- */

#if FLASHCL_SPLIT_MMA
#include "split_mma.clh"
#elif FLASHCL_SPLIT_LANES
#include "split_lanes.clh"
#elif FLASHCL_SPLIT_WIDE
#include "split_wide.clh"
#else
/* Keys [n0, n0 + BN) of the sequence into k_t (transposed) and v_tile;
 * false when the tile's page is out of range (then nothing is loaded). A
 * tile never crosses a page: BN divides page_size (host). */
inline bool load_kv_tile(__local real_t *k_t, __local real_t *v_tile,
                         const seq_info *s, int b, int kv_head, int n0,
                         __global const STORAGE_T *k,
                         __global const STORAGE_T *v, ulong4 base,
                         ulong4 k_stride, ulong4 v_stride, int head_dim,
                         int head_dim_v FLASHCL_SPLIT_ARGS(FLASHCL_KPARAM))
{
    ulong k0, v0;
    if (!key_row(s, b, kv_head, n0, base.s1, k_stride, &k0
                     FLASHCL_SPLIT_ARGS(FLASHCL_KNAME)))
        return false;
    key_row(s, b, kv_head, n0, base.s2, v_stride, &v0
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    /* the rows' scales (quantized storage), found as the rows are */
    ulong ks = 0, kz = 0, vs = 0, vz = 0;
#if FLASHCL_K_QUANT
    key_row(s, b, kv_head, n0, quant_base.s0, k_scale_stride, &ks
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    key_row(s, b, kv_head, n0, quant_base.s2, k_zero_stride, &kz
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
#endif
#if FLASHCL_V_QUANT
    key_row(s, b, kv_head, n0, quant_base.s1, v_scale_stride, &vs
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    key_row(s, b, kv_head, n0, quant_base.s3, v_zero_stride, &vz
                FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
#endif
    const int rows = min(BN, s->nk - n0);
#if FLASHCL_K_QUANT
    for (int idx = get_local_id(0); idx < BN * D / 4; idx += BM) {
        const int j = idx / (D / 4), d = idx % (D / 4) * 4;
        const float4 quad =
            j < rows && d < head_dim
                ? kv_quad(FLASHCL_K_QUANT, true, k, k0 + (ulong)j * k_stride.s2,
                          k_stride.s3, d, head_dim, k_scale,
                          ks + (ulong)j * k_scale_stride.s2, k_scale_stride.s3,
                          k_zero, kz + (ulong)j * k_zero_stride.s2,
                          k_zero_stride.s3)
                : (float4)(0);
        k_t[d * BN + j] = quad.s0;
        k_t[(d + 1) * BN + j] = quad.s1;
        k_t[(d + 2) * BN + j] = quad.s2;
        k_t[(d + 3) * BN + j] = quad.s3;
    }
#else
    for (int idx = get_local_id(0); idx < BN * D; idx += BM) {
        const int j = idx / D, d = idx % D;
        k_t[d * BN + j] =
            j < rows && d < head_dim
                ? load_elem(k, k0 + (ulong)j * k_stride.s2 +
                                   (ulong)d * k_stride.s3)
                : 0;
    }
#endif
#if FLASHCL_V_QUANT
    for (int idx = get_local_id(0); idx < BN * DV / 4; idx += BM) {
        const int j = idx / (DV / 4), d = idx % (DV / 4) * 4;
        const float4 quad =
            j < rows && d < head_dim_v
                ? kv_quad(FLASHCL_V_QUANT, false, v,
                          v0 + (ulong)j * v_stride.s2, v_stride.s3, d,
                          head_dim_v, v_scale,
                          vs + (ulong)j * v_scale_stride.s2, v_scale_stride.s3,
                          v_zero, vz + (ulong)j * v_zero_stride.s2,
                          v_zero_stride.s3)
                : (float4)(0);
        vstore4(quad, 0, v_tile + j * DV + d);
    }
#else
    for (int idx = get_local_id(0); idx < BN * DV; idx += BM) {
        const int j = idx / DV, d = idx % DV;
        v_tile[j * DV + d] =
            j < rows && d < head_dim_v
                ? load_elem(v, v0 + (ulong)j * v_stride.s2 +
                                   (ulong)d * v_stride.s3)
                : 0;
    }
#endif
    return true;
}

/* acc scaled by `correction`, then P V of the tile added, P = exp2(scores
 * - new_max); returns `sum` plus P, added key by key (the plain
 * accumulators, or the compensated kernel's low parts). */
inline real_t add_tile_pv(vec_t acc[DV_VECS], real_t sum, real_t correction,
                          const real_t scores[BN], real_t new_max,
                          __local const real_t *v_tile)
{
    for (int c = 0; c < DV_VECS; ++c)
        acc[c] *= correction;
    for (int j = 0; j < BN; ++j) {
        const real_t prob = exp2(scores[j] - new_max);
        sum += prob;
        __local const real_t *v_row = v_tile + j * DV;
        for (int c = 0; c < DV_VECS; ++c)
            acc[c] = fma((vec_t)(prob), vload_vec(c, v_row), acc[c]);
    }
    return sum;
}

__kernel __attribute__((reqd_work_group_size(FLASHCL_WG_SIZE, 1, 1))) void
flashcl_split_fwd(FLASHCL_SPLIT_PARAMS)
{
    FLASHCL_LOCAL_QKV_TILES(D);

    const int lid = get_local_id(0);
    /* declares b, kv_heads, split, kv_head, s, g_size, t0 */
#include "split_group.clh"
    const int t = t0 + lid;
    const int i = t / g_size;
    const int head = kv_head * g_size + t % g_size;
    const bool row_ok = i < s.nq;

    const ulong q_at = base.s0 + (ulong)s.q_batch * q_stride.s0 +
                       (ulong)(s.q_row0) * q_stride.s2;
    for (int idx = lid; idx < BM * D; idx += BM) {
        const int r = idx / D, d = idx % D;
        const int tr = t0 + r, ir = tr / g_size;
        const int hr = kv_head * g_size + tr % g_size;
        real_t value = 0;
        if (ir < s.nq && d < head_dim)
            value = load_elem(q, q_at + (ulong)hr * q_stride.s1 +
                                     (ulong)ir * q_stride.s2 +
                                     (ulong)d * q_stride.s3) *
                    scale_log2;
        q_t[d * BM + r] = value;
    }

    const score_row extras = score_row_init(
        b, head, i, s.diag, REAL_LOG2E FLASHCL_VARIANT_NAMES);
    vec_t acc[DV_VECS];
    for (int c = 0; c < DV_VECS; ++c)
        acc[c] = (vec_t)(0);
    real_t row_max = -INFINITY, row_sum = 0;
#if FLASHCL_COMPENSATED
    vec_t acc_lo[DV_VECS];
    for (int c = 0; c < DV_VECS; ++c)
        acc_lo[c] = (vec_t)(0);
    real_t sum_lo = 0;
#endif
#if FLASHCL_SINKS
    if (split == 0) { /* the sink joins the row once, in split 0 */
        row_max = sink_logit(head, REAL_LOG2E FLASHCL_VARIANT_NAMES);
        row_sum = row_max == -INFINITY ? 0 : 1;
    }
#endif

    const key_range keys = split_keys(&s, t0, g_size, split, num_splits,
                                      window_left, window_right);
    const int kv_begin = keys.begin, kv_end = keys.end;
    for (int n0 = kv_begin; n0 < kv_end; n0 += BN) {
        barrier(CLK_LOCAL_MEM_FENCE); /* previous tile consumed */
        /* Every work-item reads the same table entry: uniform. */
        const bool page_ok = load_kv_tile(
            k_t, v_tile, &s, b, kv_head, n0, k, v, base, k_stride, v_stride,
            head_dim, head_dim_v FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!page_ok)
            continue; /* a skipped page: its keys are masked */

        vec_t score[BN_VECS];
        for (int jb = 0; jb < BN_VECS; ++jb)
            score[jb] = (vec_t)(0);
        for (int d = 0; d < D; ++d) {
            const real_t q_value = q_t[d * BM + lid];
            for (int jb = 0; jb < BN_VECS; ++jb)
                score[jb] = fma((vec_t)(q_value), vload_vec(jb, k_t + d * BN),
                                score[jb]);
        }
        real_t scores[BN];
        for (int jb = 0; jb < BN_VECS; ++jb)
            vstore_vec(score[jb], jb, scores);

        const long hi = band_row_hi(extras.diag_row, window_right, s.nk);
        const long lo = band_row_lo(extras.diag_row, window_left);
        for (int j = 0; j < BN; ++j) {
            const int key = n0 + j;
            scores[j] = kv_mask_nan(scores[j]); /* a bad quantized key */
#if FLASHCL_NEEDS_SCORE_PASS
            if (row_ok && key <= hi)
                scores[j] = score_apply(&extras, key, scores[j]
                                            FLASHCL_VARIANT_NAMES);
#endif
            if (key > hi || key < lo)
                scores[j] = -INFINITY;
        }
        real_t tile_max = -INFINITY;
        for (int j = 0; j < BN; ++j)
            tile_max = fmax(tile_max, scores[j]);
        const real_t new_max = fmax(row_max, tile_max);
        if (new_max == -INFINITY)
            continue; /* nothing seen yet: stay at max -inf, never NaN */
        const real_t correction = exp2(row_max - new_max);
        row_max = new_max;
#if FLASHCL_COMPENSATED
        /* The tile goes into the low parts, then each pair is
         * renormalised once per tile (cl/portable/flash_fwd.cl). */
        row_sum *= correction;
        const real_t tile_sum =
            add_tile_pv(acc_lo, 0, correction, scores, new_max, v_tile);
        sum_lo = sum_lo * correction + tile_sum;
        TWO_SUM(real_t, row_sum, sum_lo);
        for (int c = 0; c < DV_VECS; ++c) {
            vec_t hi = acc[c] * correction;
            TWO_SUM(vec_t, hi, acc_lo[c]);
            acc[c] = hi;
        }
#else
        row_sum = add_tile_pv(acc, row_sum * correction, correction, scores,
                              new_max, v_tile);
#endif
    }
    if (!row_ok)
        return;
#if FLASHCL_COMPENSATED
    row_sum += sum_lo;
    for (int c = 0; c < DV_VECS; ++c)
        acc[c] += acc_lo[c];
#endif

    real_t out[DV];
    const real_t inv_sum = row_sum > 0 ? 1 / row_sum : 0;
    for (int c = 0; c < DV_VECS; ++c)
        vstore_vec(acc[c] * inv_sum, c, out);
    const float lse_value =
        row_sum > 0 ? (float)((row_max + log2(row_sum)) * REAL_LN2) : -INFINITY;
#if FLASHCL_SPLIT
    const ulong row_index =
        (((ulong)split * get_num_groups(2) + b) * (ulong)(kv_heads * g_size) +
         head) * (ulong)seqlen_q + i;
    for (int d = 0; d < head_dim_v; ++d)
        o_part[row_index * DV + d] = (float)out[d];
    lse_part[row_index] = lse_value;
#else
    const ulong o_at = base.s3 + (ulong)s.q_batch * o_stride.s0 +
                       (ulong)head * o_stride.s1 +
                       (ulong)(s.q_row0 + i) * o_stride.s2;
    for (int d = 0; d < head_dim_v; ++d)
        store_elem(o, o_at + (ulong)d * o_stride.s3, out[d]);
    if (write_lse)
        lse[lse_base + (ulong)s.q_batch * lse_stride.s0 +
            (ulong)head * lse_stride.s1 +
            (ulong)(s.q_row0 + i) * lse_stride.s2] = lse_value;
#endif
}
#endif /* the attention kernels */

/* ---- merge --------------------------------------------------------------- */

/* Work-group (KV head x packed row t, sequence b) of COMBINE_WG items:
 * one output row from the num_splits partials. The items share the
 * partials' weights through local memory and each sums whole columns, its
 * loads over the splits independent of each other (a work-item per output
 * element, looping over the splits alone, waited a memory latency per
 * split: ~100 us for 99 splits on the H200, longer than the attention). */
#define COMBINE_WG 64
__kernel __attribute__((reqd_work_group_size(COMBINE_WG, 1, 1))) void
flashcl_split_combine(FLASHCL_SPLIT_PARAMS)
{
    __local float weight[FLASHCL_MAX_SPLITS_CL];
    const int lid = get_local_id(0);
    const int rows = seqlen_q * group_size;
    const int kv_head = get_global_id(1) / rows, t = get_global_id(1) % rows;
    const int kv_heads = get_global_size(1) / rows;
    const int b = get_global_id(2), batch = get_global_size(2);
    const seq_info s = sequence(b FLASHCL_FWD_ARGS(FLASHCL_KNAME)
                                    FLASHCL_SPLIT_ARGS(FLASHCL_KNAME));
    const int i = t / group_size, head = kv_head * group_size + t % group_size;
    if (i >= s.nq)
        return; /* uniform over the work-group */
    const ulong heads_q = (ulong)kv_heads * group_size;
    const ulong row0 = ((ulong)b * heads_q + head) * (ulong)seqlen_q + i;
    const ulong split_step = (ulong)batch * heads_q * (ulong)seqlen_q;
    const int parts = min(num_splits, FLASHCL_MAX_SPLITS_CL);
    for (int p = lid; p < parts; p += COMBINE_WG)
        weight[p] = lse_part[row0 + p * split_step];
    barrier(CLK_LOCAL_MEM_FENCE);
    float m = -INFINITY;
    for (int p = 0; p < parts; ++p)
        m = fmax(m, weight[p]);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int p = lid; p < parts; p += COMBINE_WG)
        weight[p] = m == -INFINITY ? 0.0f : combine_weight(weight[p], m);
    barrier(CLK_LOCAL_MEM_FENCE);
    float sum = 0;
    for (int p = 0; p < parts; ++p)
        sum += weight[p];
    const ulong o_at = base.s3 + (ulong)s.q_batch * o_stride.s0 +
                       (ulong)head * o_stride.s1 +
                       (ulong)(s.q_row0 + i) * o_stride.s2;
    for (int d = lid; d < head_dim_v; d += COMBINE_WG) {
        float value = 0;
#pragma unroll 8
        for (int p = 0; p < parts; ++p) {
            const float w = weight[p];
            if (w != 0) /* a partial that saw no key is never read */
                value += w * o_part[(row0 + p * split_step) * DV + d];
        }
        store_elem(o, o_at + (ulong)d * o_stride.s3, sum > 0 ? value / sum : 0);
    }
    if (write_lse && lid == 0)
        lse[lse_base + (ulong)s.q_batch * lse_stride.s0 +
            (ulong)head * lse_stride.s1 +
            (ulong)(s.q_row0 + i) * lse_stride.s2] = combine_lse(m, sum);
}
