/*
 * flashcl: fused FlashAttention-style attention in OpenCL C, for any vendor's
 * OpenCL 1.2+ driver.
 *
 * One header, C11. Everything is prefixed flashcl_ / FLASHCL_. Handles are
 * opaque; every call returns a flashcl_status; flashcl_status_string() names
 * it and flashcl_context_last_error() gives the detail of the last failure
 * on a context (the full build log after a kernel compile failure).
 *
 * Thread safety: a flashcl_context may be shared by several threads, each
 * enqueueing on its own cl_command_queue (or on the context's queue). The
 * program cache is locked inside; a kernel compile runs outside that lock,
 * so launches of already-compiled kernels never wait for another thread's
 * compile, and two threads asking for the same new kernel compile it once.
 *
 * Diagnostics are per thread: flashcl_context_last_error(ctx) describes the
 * last call this thread made on ctx, and only when that call failed; every
 * call clears it first, so after a success it is "". Another thread's calls
 * never change what this thread reads.
 *
 * Stable and experimental API: everything in this header is stable (covered
 * by the ABI policy in docs/api.md) except the section marked EXPERIMENTAL,
 * which tools use and which may change in any minor version.
 */
#ifndef FLASHCL_H
#define FLASHCL_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(FLASHCL_SHARED_BUILD)
#define FLASHCL_API __declspec(dllexport)
#elif defined(__GNUC__) && __GNUC__ >= 4
#define FLASHCL_API __attribute__((visibility("default")))
#else
#define FLASHCL_API
#endif

/* ------------------------------------------------------------------ */
/* Version                                                             */
/* ------------------------------------------------------------------ */
/* The version's one source: the build reads these three lines for the
 * CMake package, flashcl.pc and the SONAME (cmake/flashcl_version.cmake),
 * so each stays `#define NAME <number>`. */
#define FLASHCL_VERSION_MAJOR 0
#define FLASHCL_VERSION_MINOR 3
#define FLASHCL_VERSION_PATCH 0
#define FLASHCL_VERSION_NUMBER                                                 \
    (FLASHCL_VERSION_MAJOR * 10000 + FLASHCL_VERSION_MINOR * 100 +            \
     FLASHCL_VERSION_PATCH)
#define FLASHCL_STRINGIFY_(x) #x
#define FLASHCL_STRINGIFY(x) FLASHCL_STRINGIFY_(x)
#define FLASHCL_VERSION_STRING                                                 \
    FLASHCL_STRINGIFY(FLASHCL_VERSION_MAJOR)                                   \
    "." FLASHCL_STRINGIFY(FLASHCL_VERSION_MINOR) "." FLASHCL_STRINGIFY(        \
        FLASHCL_VERSION_PATCH)

/** Runtime version of the library, as FLASHCL_VERSION_NUMBER (major*10000 +
 *  minor*100 + patch); compare with the macro to detect a header/library
 *  mismatch. */
FLASHCL_API unsigned flashcl_version_number(void);

/** Runtime version of the library as "major.minor.patch"; static storage. */
FLASHCL_API const char *flashcl_version_string(void);

/* ------------------------------------------------------------------ */
/* Status                                                              */
/* ------------------------------------------------------------------ */
typedef enum flashcl_status {
    FLASHCL_SUCCESS = 0,
    FLASHCL_ERROR_NULL_ARGUMENT,       /* a required pointer or cl_mem is NULL */
    FLASHCL_ERROR_INVALID_DIMENSION,   /* a size is negative or a product overflows */
    FLASHCL_ERROR_HEAD_GROUPING,       /* heads_q is not a multiple of heads_kv */
    FLASHCL_ERROR_HEAD_DIM_UNSUPPORTED,/* head_dim outside 1..256 */
    FLASHCL_ERROR_DTYPE_UNSUPPORTED,   /* unknown dtype, or one the device lacks */
    FLASHCL_ERROR_INVALID_LAYOUT,      /* unknown layout enum, misaligned offset */
    FLASHCL_ERROR_OUT_OF_BOUNDS,       /* a view reaches outside its cl_mem */
    FLASHCL_ERROR_CONTEXT_MISMATCH,    /* buffer or queue of another cl_context */
    FLASHCL_ERROR_ALIASING,            /* an output overlaps an input */
    FLASHCL_ERROR_INVALID_VALUE,       /* e.g. a NaN/negative scale, bad enum */
    FLASHCL_ERROR_DEVICE_NOT_FOUND,    /* device spec matched nothing */
    FLASHCL_ERROR_NO_OPENCL,           /* no OpenCL platform or device at all */
    FLASHCL_ERROR_BUILD_FAILED,        /* kernel compile failed (log in last error) */
    FLASHCL_ERROR_OPENCL,              /* an OpenCL call failed (code in last error) */
    FLASHCL_ERROR_OUT_OF_MEMORY,       /* host or device allocation failed */
    FLASHCL_ERROR_UNSUPPORTED,         /* valid request this build/device cannot run */
    FLASHCL_ERROR_BACKEND,             /* the reference backend (CLBlast) failed */
    FLASHCL_STATUS_COUNT_              /* not a status; keeps the table honest */
} flashcl_status;

/** Short, static English name of a status ("success", "head grouping", ...).
 *  Unknown values give "unknown status". */
FLASHCL_API const char *flashcl_status_string(flashcl_status status);

/* ------------------------------------------------------------------ */
/* Context                                                             */
/* ------------------------------------------------------------------ */
typedef struct flashcl_context flashcl_context;

/** Create a context on the device named by `device_spec`.
 *
 *  `device_spec` NULL or "" means: the FLASHCL_DEVICE environment variable if
 *  set and non-empty, else the first GPU, else the first device. Grammar:
 *    "N"         index over all devices of all platforms, in platform order
 *    "P:D"       device D of platform P
 *    "gpu" | "cpu" | "accelerator"   first device of that type
 *    anything else: case-insensitive substring of the device name, device
 *    vendor, platform name or platform vendor ("nvidia", "h200", "pocl");
 *    the first match wins.
 *  A spec that matches nothing fails with FLASHCL_ERROR_DEVICE_NOT_FOUND and
 *  the message (flashcl_last_create_error()) names the spec's source
 *  (FLASHCL_DEVICE="..." or device spec "...") and lists the devices
 *  available; a spec of only white space, here or in FLASHCL_DEVICE, fails
 *  with FLASHCL_ERROR_INVALID_VALUE.
 *  The context creates and owns its cl_context and in-order queue (with
 *  profiling enabled). */
FLASHCL_API flashcl_status flashcl_context_create(flashcl_context **out,
                                                  const char *device_spec);

/** Create a context around the caller's queue: flashcl uses the queue's
 *  cl_context and device, retains them for its lifetime and releases only
 *  that retain; it never releases anything it did not create. */
FLASHCL_API flashcl_status
flashcl_context_create_from_queue(flashcl_context **out, cl_command_queue queue);

/** Release a context and everything it created (programs, its own queue and
 *  cl_context). NULL is accepted and ignored. Work already enqueued by
 *  flashcl must be finished (clFinish) before release. Release stores
 *  nothing in the persistent binary cache (binaries are stored when built)
 *  and is quick. Memory it cannot return: once the reference backend ran
 *  on the context, CLBlast's process-wide program cache keeps that
 *  cl_context and its programs, about 235 KB per context (measured on
 *  PoCL), until flashcl_clear_reference_cache(); a process that creates
 *  and releases many contexts calls it now and then. */
FLASHCL_API void flashcl_context_release(flashcl_context *ctx);

/** Detail of the last call this thread made on ctx, when it failed (""
 *  after a success, or when this thread made no call on ctx): names the
 *  offending argument, or holds the full build log after
 *  FLASHCL_ERROR_BUILD_FAILED. The text is this thread's own copy: other
 *  threads cannot change or free it. Valid until this thread's next flashcl
 *  call. */
FLASHCL_API const char *flashcl_context_last_error(const flashcl_context *ctx);

/** Detail of the last failed flashcl_context_create*() on this thread (no
 *  context exists to hold it), e.g. the list of devices for an unmatched
 *  spec. */
FLASHCL_API const char *flashcl_last_create_error(void);

/** The OpenCL objects the context uses (not retained for the caller). */
FLASHCL_API cl_command_queue flashcl_context_queue(const flashcl_context *ctx);
/** The context's cl_context (not retained for the caller). */
FLASHCL_API cl_context flashcl_context_cl_context(const flashcl_context *ctx);
/** The context's cl_device_id (not retained for the caller). */
FLASHCL_API cl_device_id flashcl_context_device(const flashcl_context *ctx);

/* ------------------------------------------------------------------ */
/* Attention                                                           */
/* ------------------------------------------------------------------ */

/** Storage type of Q, K, V and O. Accumulation is always fp32. fp16 uses
 *  vload_half/vstore_half and bf16 bit shifts, so no cl_khr_fp16 is needed. */
typedef enum flashcl_dtype {
    FLASHCL_DTYPE_FP32 = 0, /* default */
    FLASHCL_DTYPE_FP16 = 1,
    FLASHCL_DTYPE_BF16 = 2,
    /** fp64 storage and fp64 accumulation; needs cl_khr_fp64 (else
     *  FLASHCL_ERROR_UNSUPPORTED). The LSE output is fp32 unless the
     *  descriptor's `lse_dtype` asks for fp64. Never split (num_splits
     *  reads as 1): the partials are fp32. */
    FLASHCL_DTYPE_FP64 = 3
} flashcl_dtype;

/** Default element order used for a tensor whose strides are all zero (and
 *  for the host-memory call). */
typedef enum flashcl_layout {
    FLASHCL_LAYOUT_BNHD = 0, /* [batch, seq, heads, dim] (FlashAttention's); default */
    FLASHCL_LAYOUT_BHND = 1  /* [batch, heads, seq, dim] (PyTorch SDPA's) */
} flashcl_layout;

/** Where the diagonal sits when seqlen_q != seqlen_k: for the causal mask,
 *  the window and ALiBi alike, whether or not `causal` is set. */
typedef enum flashcl_causal_align {
    /** Query i sees key j iff j <= i + seqlen_k - seqlen_q (FlashAttention
     *  >= 2.1; the default). */
    FLASHCL_CAUSAL_BOTTOM_RIGHT = 0,
    /** Query i sees key j iff j <= i (PyTorch's is_causal). */
    FLASHCL_CAUSAL_TOP_LEFT = 1,
    /** Query i sees key j iff k_position + j <= q_position + i: the
     *  positions of the descriptor's first query row and first key in a
     *  longer sequence, so that a chunk of queries against a chunk of keys
     *  (context parallelism, ring attention) masks, and ALiBi measures
     *  distance, as the whole call would. Dense calls only: not with the
     *  inference fields (KV cache, varlen, num_splits > 1). */
    FLASHCL_CAUSAL_ABSOLUTE = 2
} flashcl_causal_align;

/** Which implementation computes the call. */
typedef enum flashcl_backend {
    FLASHCL_BACKEND_AUTO = 0, /* FLASHCL_BACKEND env var, else the fused kernel */
    FLASHCL_BACKEND_FUSED = 1,
    /** Unfused: CLBlast GEMMs + a mask/softmax kernel, O(N^2) scratch. */
    FLASHCL_BACKEND_REFERENCE = 2
} flashcl_backend;

/** Storage of the K or V cache (flashcl_attention_desc.k_storage /
 *  v_storage), set apart from Q/O's dtype. docs/kv-quantization.md lays
 *  out every row and scale. A call computes attention over the
 *  dequantized values, in fp32. Quantized types need the KV-cache fields
 *  (cache_seqlens). */
typedef enum flashcl_kv_storage {
    /** The descriptor's dtype (the default). */
    FLASHCL_KV_SAME = 0,
    /** fp8 e4m3 (bias 7, no infinity, 0x7f/0xff NaN, max 448): value =
     *  scale * fp8; scale per tensor or per KV head. */
    FLASHCL_KV_FP8_E4M3 = 1,
    /** fp8 e5m2 (bias 15, IEEE-like, max 57344): value = scale * fp8. */
    FLASHCL_KV_FP8_E5M2 = 2,
    /** int8, symmetric: value = scale * q, one fp32 scale per (cache row
     *  or page, token, KV head). */
    FLASHCL_KV_INT8 = 3,
    /** uint4, two per byte (element 2i in the low nibble of byte i, 2i+1
     *  in the high one): value = scale * (q - zero), an fp32 scale and an
     *  fp32 zero point per group of 32 along head_dim (head_dim % 32 ==
     *  0). */
    FLASHCL_KV_INT4 = 4
} flashcl_kv_storage;

/** A strided view of one 4-D tensor inside a cl_mem.
 *
 *  Element (b, h, s, d) lives at byte `offset + elem_size * (b*stride_batch +
 *  h*stride_head + s*stride_seq + d*stride_dim)`. Strides are in elements.
 *  If all four strides are zero the tensor is packed in the descriptor's
 *  `layout` (LSE: packed [batch, heads_q, seqlen_q]). `offset` must be a
 *  multiple of the element size. The whole view must lie inside the buffer's
 *  CL_MEM_SIZE. */
typedef struct flashcl_tensor {
    cl_mem buffer;
    size_t offset;       /* bytes */
    size_t stride_batch; /* elements */
    size_t stride_head;
    size_t stride_seq;
    size_t stride_dim;   /* for LSE: unused, leave 0 */
} flashcl_tensor;

/** Parameters of one attention forward call.
 *
 *  Initialise it with FLASHCL_ATTENTION_DESC_INIT (or
 *  flashcl_attention_desc_init()), which sets `struct_size` and zeroes the
 *  rest: every zero field means its default. A descriptor whose
 *  `struct_size` is 0 is rejected (FLASHCL_ERROR_INVALID_VALUE), so a
 *  forgotten initialiser is caught rather than misread.
 *
 *  ABI: fields are only ever appended. `struct_size` tells the library which
 *  fields the caller's header had: a smaller (older) descriptor reads as if
 *  the missing fields were zero; a larger (newer) one is accepted when every
 *  byte past the fields this library knows is zero, else rejected with
 *  FLASHCL_ERROR_UNSUPPORTED. See "ABI policy" in docs/api.md.
 *
 *  O[b, h, i, :] = sum_j softmax_j(scale * Q[b,h,i,:] . K[b,h/g,j,:]) V[b,h/g,j,:]
 *  with g = heads_q / heads_kv (GQA/MQA). */
typedef struct flashcl_attention_desc {
    /** sizeof(flashcl_attention_desc) as the caller compiled it (set by
     *  FLASHCL_ATTENTION_DESC_INIT). */
    size_t struct_size;

    /* Shape. heads_kv 0 means heads_q. */
    int64_t batch;
    int64_t heads_q;
    int64_t heads_kv;
    int64_t seqlen_q;
    int64_t seqlen_k;
    int64_t head_dim; /* 1..256 */

    flashcl_dtype dtype;
    flashcl_layout layout; /* default layout for zero-stride tensors */

    /** Softmax scale; 0 means 1/sqrt(head_dim) unless `explicit_scale` is
     *  set. Any finite value with |scale| <= FLASHCL_MAX_SCALE, negative
     *  included. Scores scale * q.k must stay finite in fp32. */
    float scale;
    /** Non-zero: causal mask aligned as `causal_align` says. */
    int causal;
    flashcl_causal_align causal_align;
    flashcl_backend backend;

    /* Device tensors (for flashcl_attention_forward). */
    flashcl_tensor q, k, v; /* inputs */
    flashcl_tensor o;       /* output, same dtype, [.., seqlen_q, .., head_dim] */
    /** Optional log-sum-exp output: fp32 (fp64 with `lse_dtype`), natural
     *  log, [batch, heads_q, seqlen_q]; lse.buffer NULL means not wanted.
     *  A row that sees no key gets -inf. */
    flashcl_tensor lse;

    /* ---- variants (all off when zero) -------------------------------
     * The diagonal: diag = seqlen_k - seqlen_q (bottom-right), 0
     * (top-left) or q_position - k_position (absolute). Scores are
     * s = scale * q.k, then softcap, then ALiBi and
     * bias are added, then causal/window/boolean masks remove keys. */

    /** Non-zero: sliding window. Query i sees key j iff
     *  i + diag - window_left <= j <= i + diag + window_right; -1 means
     *  unbounded on that side; any value >= -1 is accepted (bounds beyond
     *  the sequences mean the same as unbounded). Combined with causal
     *  (which caps the right side at 0). window_left or window_right
     *  non-zero while window is 0 is rejected (FLASHCL_ERROR_INVALID_VALUE)
     *  rather than ignored. */
    int window;
    int64_t window_left;
    int64_t window_right;

    /** ALiBi: fp32 slopes, bias -slope * |i + diag - j| on the scaled
     *  score. Slope of (b, h) at alibi_slopes.offset + 4 * (b *
     *  stride_batch + h * stride_head); both strides zero means packed
     *  [heads_q] shared by every batch. buffer NULL: off. */
    flashcl_tensor alibi_slopes;

    /** Additive bias on the scores, element (b, h, i, j) at offset +
     *  elem_size * (b*stride_batch + h*stride_head + i*stride_seq +
     *  j*stride_dim). Strides are literal: 0 broadcasts over that axis.
     *  dtype bias_dtype (fp32/fp16/bf16). -inf entries mask. NULL: off. */
    flashcl_tensor bias;
    flashcl_dtype bias_dtype;

    /** Boolean mask, uint8 (non-zero = attend), same addressing and stride
     *  rules as `bias` with elem_size 1. NULL: off. */
    flashcl_tensor mask;

    /** Softcap: s <- softcap * tanh(s / softcap), applied to the scaled
     *  score before ALiBi, bias and masks. 0: off; else in
     *  [FLASHCL_MIN_SOFTCAP, FLASHCL_MAX_SCALE]. */
    float softcap;

    /** Attention sinks: one fp32 logit per query head that joins each
     *  row's softmax (max and denominator) without a value vector. Element
     *  h at offset + 4 * h * stride_head (0: packed). NULL: off. The LSE
     *  output includes the sink: LSE = log(exp(sink) + sum_j exp(s_j)); a
     *  row that sees no key then gets O = 0 and LSE = sink. */
    flashcl_tensor sinks;

    /** Head dim of V and O when it differs from Q/K's (1..256); 0 means
     *  head_dim. */
    int64_t head_dim_v;

    /** Non-zero: `scale` is used as given, so scale = 0 means exactly 0
     *  (uniform attention over the visible keys). Zero: scale 0 means the
     *  default 1/sqrt(head_dim). */
    int explicit_scale;

    /** Non-zero: fp32 storage may run on TF32 tensor cores where a path
     *  has them (NVIDIA `mma.sync` m16n8k8 tf32: Q, K, V and P rounded to
     *  10 mantissa bits, fp32 accumulation; relative error about 1e-3,
     *  between bf16's and fp32's), as PyTorch's `allow_tf32`. Zero (the
     *  default): fp32 is computed to fp32 accuracy (on NVIDIA sm_80+ by
     *  the same tensor cores, each operand split into TF32 high and low
     *  parts, three products). Paths without TF32 compute exact fp32
     *  either way. Ignored for other dtypes. */
    int allow_tf32;

    /* ---- inference (issue 11): split-KV, KV cache, varlen, paged KV ----
     * All off when zero. docs/api.md "Inference" explains them. Lengths
     * and page indices are int32 device buffers (flashcl_tensor with
     * buffer, offset in bytes, stride_batch in elements; other strides
     * unused). Values read on the device are never trusted: see each
     * field for what is clamped and what is skipped. */

    /** Split-KV ("flash-decoding"): the key range of each (sequence, KV
     *  head) is cut into this many parts computed by separate work-groups
     *  and merged exactly (natural-log LSE). 0: chosen from the device's
     *  compute units and the shape (1 when the work already fills the
     *  device); 1: never split; n > 1: exactly n parts (parts past the
     *  keys are empty), at most FLASHCL_MAX_SPLITS. Splitting needs
     *  scratch owned by the context (flashcl_context_set_split_scratch_
     *  limit); a forced n whose scratch exceeds the cap fails with
     *  FLASHCL_ERROR_OUT_OF_MEMORY, an automatic choice shrinks to fit.
     *  fp64 calls are never split (the partials are fp32). */
    int num_splits;

    /** KV cache: int32 [batch], valid keys of each sequence's cache row.
     *  k and v are then the cache, [kv_batch, seqlen_k (capacity),
     *  heads_kv, head_dim] (or pages, see block_table); sequence b
     *  attends keys [0, min(cache_seqlens[b] + seqlen_new, seqlen_k)).
     *  Read on the device and clamped to [0, seqlen_k]. */
    flashcl_tensor cache_seqlens;
    /** Optional int32 [batch]: cache row of sequence b (FlashAttention's
     *  cache_batch_idx); NULL: row b. An index outside [0, kv_batch) makes
     *  that sequence skipped: it sees no keys (O = 0, LSE = -inf, or the
     *  sink with sinks) and nothing is appended. Not with block_table. */
    flashcl_tensor cache_batch_idx;
    /** Rows of the K/V tensors' batch axis: cache rows, or pages when
     *  paged; 0 means batch (dense cache) and is required when paged. */
    int64_t kv_batch;
    /** In-place append (needs cache_seqlens): k_new/v_new [batch,
     *  seqlen_new, heads_kv, head_dim(_v)] in the descriptor's dtype are
     *  written into the cache at rows cache_seqlens[b] .. + seqlen_new - 1
     *  before attention, in the same call; the call's event covers both.
     *  Rows that would land at or past seqlen_k (the capacity) are
     *  dropped: cached rows are never written over.
     *  The query rows then end at the last new key (bottom-right causal).
     *  seqlen_new 0: no append. */
    flashcl_tensor k_new, v_new;
    int64_t seqlen_new;

    /** Variable-length batches (FlashAttention's varlen): int32 [batch + 1]
     *  prefix sums. cu_seqlens_q set: q, o are packed [1, seqlen_q
     *  (total rows), heads_q, head_dim] (strides: batch ignored), LSE
     *  [1, heads_q, seqlen_q], sequence b owns rows cu_seqlens_q[b] ..
     *  cu_seqlens_q[b+1] - 1 and has at most max_seqlen_q of them.
     *  cu_seqlens_k likewise packs k and v ([1, seqlen_k total, ...],
     *  max_seqlen_k); not with cache_seqlens. cu_seqlens_q also works with
     *  a KV cache (not with an append). Read on the device: each
     *  start and end is clamped to [0, total], an end below its start
     *  means an empty sequence, and a length above max_seqlen_* is cut to
     *  it (rows past it are not written). Calls on the split-KV kernels
     *  (varlen, a cache, num_splits > 1) need max_seqlen_q (dense:
     *  seqlen_q) * heads_q / heads_kv <= INT32_MAX - 4096, else
     *  FLASHCL_ERROR_INVALID_DIMENSION. */
    flashcl_tensor cu_seqlens_q, cu_seqlens_k;
    int64_t max_seqlen_q, max_seqlen_k;

    /** Paged KV (needs cache_seqlens): int32 [batch, max_pages] (stride_
     *  batch: elements between rows; 0 packed). k and v are then pages,
     *  [kv_batch (pages), page_size, heads_kv, head_dim]; key j of
     *  sequence b is row j % page_size of page block_table[b, j /
     *  page_size]. page_size: a multiple of 16, at most 65536; capacity
     *  (seqlen_k) must be max_pages * page_size. A page index outside
     *  [0, kv_batch) makes that page's keys skipped (masked, and appends
     *  into it dropped). */
    flashcl_tensor block_table;
    int64_t page_size;
    int64_t max_pages;

    /** Optional int32 [4] device output: what the device clamped or
     *  skipped in this call, so that a serving engine can detect a bad
     *  batch without a host-side check (indices FLASHCL_INFER_STATUS_*;
     *  `offset` in bytes, other fields unused). Every successful call
     *  that computes something overwrites the four counters, in the same
     *  commands as O (the call's event covers them); an empty problem
     *  leaves them alone. Needs a field read on the device (cache_seqlens
     *  or cu_seqlens_*); with it, a packed varlen batch runs on the split-KV
     *  kernels. Must not overlap any other tensor. NULL: not wanted.
     *  docs/inference-checks.md says what each counter counts. */
    flashcl_tensor infer_status;

    /** With causal_align = FLASHCL_CAUSAL_ABSOLUTE: the position of query
     *  row 0 and of key 0 in the whole sequence, each in [0,
     *  FLASHCL_MAX_POSITION]; the diagonal is then diag = q_position -
     *  k_position. Must be 0 under the other alignments (never ignored).
     *  Since 0.3. */
    int64_t q_position, k_position;

    /* ---- quantized KV cache (issue 45; docs/kv-quantization.md) -------
     * Needs cache_seqlens (dense or paged cache). With a quantized type,
     * k / v views count bytes: strides and offset in bytes, and an int4
     * row holds head_dim / 2 bytes (stride_dim steps over bytes, each
     * holding two values). Scales and zero points are fp32 views in
     * elements, read on the device: a key whose K scale, zero point or
     * value decodes to a non-finite number is masked (for every query);
     * a V element that decodes to a non-finite number reads as 0. Since
     * 0.3. */

    /** Storage of the K cache and of the V cache (they may differ, e.g.
     *  int8 keys with int4 values). FLASHCL_KV_SAME (0): the dtype. */
    flashcl_kv_storage k_storage, v_storage;
    /** fp8 only: non-zero means one scale per KV head (k_scale is
     *  [heads_kv], element h at offset + 4 * h * stride_head; 0 strides:
     *  packed); zero means one scale for the whole tensor ([1]). */
    int k_scale_per_head, v_scale_per_head;
    /** Scales, fp32, required for every quantized type (NULL otherwise):
     *  fp8: [1] or [heads_kv] (k_scale_per_head); int8: the shape of the
     *  cache without head_dim, [kv_batch, heads_kv, seqlen_k (page_size
     *  when paged)] with strides (batch, head, seq), stride_dim unused;
     *  int4: [kv_batch, heads_kv, seqlen_k or page_size, head_dim / 32],
     *  one per group of 32 values. All-zero strides: packed in `layout`
     *  like K itself. An append writes the new rows' int8/int4 scales. */
    flashcl_tensor k_scale, v_scale;
    /** int4 zero points, fp32, the int4 scale's shape (own strides);
     *  required for int4, NULL for every other type. */
    flashcl_tensor k_zero, v_zero;

    /** Storage of `lse`: FLASHCL_DTYPE_FP32 (0, the default) or, for an
     *  fp64 call only, FLASHCL_DTYPE_FP64, so that partial results merged
     *  by their LSEs (flashcl_combine_partials, ring attention) keep fp64
     *  accuracy: an fp32 LSE carries ~1e-7 relative rounding into every
     *  merge weight. fp64 LSEs are written by the fused forward of a dense
     *  call; the reference backend, the inference fields, the host call
     *  and the backward (which reads `lse`) refuse them with
     *  FLASHCL_ERROR_UNSUPPORTED, any other dtype with
     *  FLASHCL_ERROR_DTYPE_UNSUPPORTED. Since 0.3. */
    flashcl_dtype lse_dtype;
} flashcl_attention_desc;

/** The counters of flashcl_attention_desc.infer_status, each a number of
 *  sequences or rows of this call. */
enum flashcl_infer_status_index {
    /** Appended rows (k_new/v_new) not written: past the capacity, into a
     *  page out of range, or of a sequence whose cache row is out of
     *  range. */
    FLASHCL_INFER_STATUS_APPENDS_DROPPED = 0,
    /** block_table entries out of [0, kv_batch) among the pages that hold
     *  a sequence's visible keys (their keys were masked). */
    FLASHCL_INFER_STATUS_PAGES_SKIPPED = 1,
    /** Sequences whose lengths were clamped or cut: cache_seqlens[b]
     *  outside [0, seqlen_k]; a cu_seqlens entry outside [0, total], an end
     *  below its start, or a length above max_seqlen_* (counted once per
     *  sequence and array). */
    FLASHCL_INFER_STATUS_LENGTHS_CLAMPED = 2,
    /** Sequences whose cache_batch_idx is outside [0, kv_batch) (they saw
     *  no keys). */
    FLASHCL_INFER_STATUS_ROWS_SKIPPED = 3,
    FLASHCL_INFER_STATUS_COUNT = 4
};

/** Largest num_splits accepted. */
#define FLASHCL_MAX_SPLITS 256

/** Largest |scale| and softcap accepted: scale * log2(e), which the kernels
 *  fold into one multiply, stays finite in fp32 with room to spare. */
#define FLASHCL_MAX_SCALE 1e30f
/** Largest q_position / k_position (2^30 - 1): the diagonal they make stays
 *  inside the kernels' 32-bit row arithmetic. */
#define FLASHCL_MAX_POSITION 1073741823
/** Smallest softcap accepted (besides 0, off): softcap * log2(e) stays a
 *  normal fp32 number, so no device flushes it to zero. */
#define FLASHCL_MIN_SOFTCAP 1e-30f

/** Initialiser of a descriptor: struct_size set, everything else zero
 *  (defaults). `flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;` */
#ifdef __cplusplus
/* C++ before C++20 has no designated initialisers, and g++ -Wextra warns
 * for every field a brace list leaves out, but not for an empty list. So
 * in C++ the braces hold one whole descriptor (copied, not a field list),
 * value-initialised with struct_size set by a function: constexpr from
 * C++14, as the C list is a constant, and still braces, so every form of
 * the earlier `{sizeof(...)}` (`d = INIT`, `d INIT`, `new T INIT`, inside
 * an aggregate's list) keeps compiling. */
#if __cplusplus >= 201402L
#define FLASHCL_INIT_FN_ static constexpr
#else
#define FLASHCL_INIT_FN_ static inline
#endif
FLASHCL_INIT_FN_ flashcl_attention_desc flashcl_attention_desc_initial_(void)
{
    flashcl_attention_desc desc = {};
    desc.struct_size = sizeof desc;
    return desc;
}
#define FLASHCL_ATTENTION_DESC_INIT {flashcl_attention_desc_initial_()}
#else /* designated, so -Wmissing-field-initializers stays quiet */
#define FLASHCL_ATTENTION_DESC_INIT {.struct_size = sizeof(flashcl_attention_desc)}
#endif

/** The same as FLASHCL_ATTENTION_DESC_INIT for a descriptor in memory:
 *  zeroes *desc and sets struct_size. NULL is ignored. */
FLASHCL_API void flashcl_attention_desc_init(flashcl_attention_desc *desc);

/** Enqueue attention forward on `queue` (NULL: the context's queue), after
 *  the `num_events_in_wait_list` events, returning in `*event` (if not NULL)
 *  an event that completes when O and LSE are written; release it with
 *  clReleaseEvent.
 *
 *  The queue must belong to the context's cl_context and device. On any
 *  error nothing is enqueued and no output is touched; the status says what
 *  was wrong and flashcl_context_last_error() names the argument. A problem
 *  with zero batch, heads or seqlen_q is a successful no-op (the event, if
 *  asked for, is a marker); seqlen_k == 0 writes O = 0 and LSE = -inf. The
 *  first call for a new (device, head dim, dtype, ...) compiles a kernel. */
FLASHCL_API flashcl_status flashcl_attention_forward(
    flashcl_context *ctx, cl_command_queue queue,
    const flashcl_attention_desc *desc, cl_uint num_events_in_wait_list,
    const cl_event *event_wait_list, cl_event *event);

/** Host-memory convenience: copies q, k, v (packed in desc->layout, element
 *  type desc->dtype) to the device, runs attention on the context's queue,
 *  waits, and copies O (and LSE, if `lse` is not NULL: fp32 [batch,
 *  heads_q, seqlen_q]) back. The desc's tensor fields are ignored. On error
 *  `o` and `lse` are not written. */
FLASHCL_API flashcl_status flashcl_attention_forward_host(
    flashcl_context *ctx, const flashcl_attention_desc *desc, const void *q,
    const void *k, const void *v, void *o, float *lse);

/* ------------------------------------------------------------------ */
/* Backward                                                            */
/* ------------------------------------------------------------------ */

/** What flashcl_attention_backward writes, besides the forward's own
 *  descriptor (which it reads). Initialise it with
 *  FLASHCL_BACKWARD_DESC_INIT or flashcl_backward_desc_init(); its
 *  struct_size must be this header's sizeof (0 or another size:
 *  FLASHCL_ERROR_INVALID_VALUE).
 *
 *  Every tensor follows the forward's view rules (all-zero strides: packed
 *  in the forward descriptor's layout) and is stored in its dtype. The
 *  gradients are those of the function the forward computes, for every
 *  variant: ALiBi, bias and mask are constants (no gradient is computed
 *  for them); a row that sees no key gets zero gradients. */
typedef struct flashcl_backward_desc {
    /** sizeof(flashcl_backward_desc) (FLASHCL_BACKWARD_DESC_INIT sets it). */
    size_t struct_size;
    /** dO, the loss's gradient with respect to O: o's shape (head_dim_v). */
    flashcl_tensor d_o;
    /** Outputs, overwritten: dQ in q's shape, dK in k's and dV in v's
     *  (heads_kv heads; GQA/MQA: the sum over each KV head's query heads,
     *  taken in a fixed order). */
    flashcl_tensor d_q, d_k, d_v;
    /** Optional output: fp32 [heads_q], the sink logits' gradient, summed
     *  over batch and rows; element h at offset + 4 * h * stride_head (0:
     *  packed). Only with desc->sinks; buffer NULL: not wanted. */
    flashcl_tensor d_sinks;
    /** 0 (default): bitwise-reproducible gradients (the same inputs give
     *  the same bits on every call, whatever the timing). 1: a path may
     *  trade that for speed (none does yet). Other values are rejected. */
    int nondeterministic;
} flashcl_backward_desc;

#ifdef __cplusplus /* as FLASHCL_ATTENTION_DESC_INIT */
FLASHCL_INIT_FN_ flashcl_backward_desc flashcl_backward_desc_initial_(void)
{
    flashcl_backward_desc desc = {};
    desc.struct_size = sizeof desc;
    return desc;
}
#define FLASHCL_BACKWARD_DESC_INIT {flashcl_backward_desc_initial_()}
#else
#define FLASHCL_BACKWARD_DESC_INIT                                             \
    {.struct_size = sizeof(flashcl_backward_desc)}
#endif

/** The same as FLASHCL_BACKWARD_DESC_INIT for a descriptor in memory:
 *  zeroes *desc and sets struct_size. NULL is ignored. */
FLASHCL_API void flashcl_backward_desc_init(flashcl_backward_desc *desc);

/** Enqueue the attention backward on `queue` (NULL: the context's queue)
 *  after the wait list, with `*event` (if not NULL) completing when every
 *  gradient is written; the queue, wait-list and event rules are
 *  flashcl_attention_forward's.
 *
 *  `desc` is the forward call's descriptor, every variant field and view
 *  included; its `o` and `lse` (natural log) are inputs here and both are
 *  required. Any O and LSE of the same function will do, such as ones
 *  merged by flashcl_combine_partials. `bwd` names dO and the outputs.
 *
 *  Computed as Delta = rowsum(dO * O) in fp32 (fp64 for fp64), then one
 *  pass over key blocks for dK and dV and one over query rows for dQ,
 *  recomputing P from Q, K and LSE: no atomics and a fixed summation
 *  order, so the result is deterministic (bitwise equal over calls).
 *  Extra device memory: one Delta per query row, freed after the call.
 *  FLASHCL_BACKEND_REFERENCE runs it unfused on CLBlast GEMMs, in row
 *  chunks under the scratch limit (flashcl_context_set_scratch_limit),
 *  just as deterministic; it needs an in-order queue.
 *
 *  Varlen (cu_seqlens_q and cu_seqlens_k, packed as for the forward):
 *  each sequence's gradients, its prefix sums read and clamped on the
 *  device exactly as the forward reads them; d_q, d_k, d_v have q's, k's
 *  and v's packed shapes, and rows outside every sequence are not
 *  written (sequences that overlap, from prefix sums that go down, write
 *  their shared rows in no defined order, as the forward's O).
 *
 *  Refused with FLASHCL_ERROR_UNSUPPORTED and a message: KV cache, append,
 *  paged KV, infer_status and num_splits > 1. FLASHCL_PATH naming no path
 *  is FLASHCL_ERROR_INVALID_VALUE, as for the forward; a path without a
 *  backward of its own runs the portable one. Bad input (NULL or foreign buffers, a view
 *  outside its buffer, an output overlapping another output or any input,
 *  missing o or lse, d_sinks without sinks) gets a specific status and a
 *  message, and nothing is written. batch or heads 0 is a no-op;
 *  seqlen_q 0 writes dK = dV = 0, seqlen_k 0 writes dQ = 0. */
FLASHCL_API flashcl_status flashcl_attention_backward(
    flashcl_context *ctx, cl_command_queue queue,
    const flashcl_attention_desc *desc, const flashcl_backward_desc *bwd,
    cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
    cl_event *event);

/** Host-memory convenience: q, k, v, o, d_o (packed in desc->layout,
 *  dtype desc->dtype) and lse (fp32 [batch, heads_q, seqlen_q]) are copied
 *  to the device, the backward runs on the context's queue, and d_q, d_k,
 *  d_v (packed likewise) and d_sinks (fp32 [heads_q]; NULL: not wanted,
 *  non-NULL only with desc->sinks) are copied back. The desc's q, k, v, o
 *  and lse fields are ignored; its variant tensors are device buffers as
 *  for the forward's host call. On error nothing is written. */
FLASHCL_API flashcl_status flashcl_attention_backward_host(
    flashcl_context *ctx, const flashcl_attention_desc *desc, const void *q,
    const void *k, const void *v, const void *o, const float *lse,
    const void *d_o, void *d_q, void *d_k, void *d_v, float *d_sinks);

/* ------------------------------------------------------------------ */
/* Reference backend scratch                                           */
/* ------------------------------------------------------------------ */
/* FLASHCL_BACKEND_REFERENCE computes S = scale * Q K^T and O = P V with
 * CLBlast GEMMs and a softmax kernel in between, so it needs O(N^2) device
 * scratch: packed fp32 (fp64 for fp64) copies of Q, K, V, the score matrix
 * S and the unnormalised output. A call is cut into chunks of (batch, head)
 * pairs, and of query rows when one head alone is too big, so that the
 * scratch stays under a cap; each scratch buffer also stays under
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE. The cap is, first that applies:
 *   flashcl_context_set_scratch_limit(ctx, bytes) with bytes > 0,
 *   the FLASHCL_REFERENCE_SCRATCH_LIMIT environment variable (bytes, or
 *   with a K, M or G suffix: "256M"), read at each call,
 *   a quarter of CL_DEVICE_MAX_MEM_ALLOC_SIZE.
 *
 * The scratch is kept in the context and reused by later calls; it grows
 * when a call needs more and is freed by flashcl_context_release_scratch()
 * or flashcl_context_release(). Calls stay asynchronous and thread-safe: a
 * call holds the context's scratch lock only while it enqueues, and its
 * first command waits for the last command of the previous call that used
 * the scratch (on whichever queue), so two calls never use it at the same
 * time. The reference backend needs an in-order queue (else
 * FLASHCL_ERROR_UNSUPPORTED); CLBlast failures give FLASHCL_ERROR_BACKEND
 * with CLBlast's status code in the message. Its output event is a marker
 * enqueued after the call's last command: wait on it, but time the call
 * with the host clock (the marker's own profiling interval is empty).
 * CLBlast's process-wide program cache keeps a reference to every
 * cl_context the reference backend ran on; flashcl leaves that cache alone
 * (it serves other CLBlast users too): call
 * flashcl_clear_reference_cache() when the cl_context must be freed, and
 * before exit on runtimes such as oclgrind. Built with -DFLASHCL_WITH_CLBLAST=OFF, the
 * reference backend and the scratch calls below return
 * FLASHCL_ERROR_UNSUPPORTED. */

/** Set the reference backend's scratch cap for this context in bytes; 0
 *  restores the default (environment variable, else a quarter of the
 *  device's largest allocation). Takes effect from the next call. */
FLASHCL_API flashcl_status
flashcl_context_set_scratch_limit(flashcl_context *ctx, size_t bytes);

/** The scratch cap that the next reference call on this context will use,
 *  in bytes, into *bytes. Fails with FLASHCL_ERROR_INVALID_VALUE when
 *  FLASHCL_REFERENCE_SCRATCH_LIMIT is set but not a byte count. */
FLASHCL_API flashcl_status
flashcl_context_get_scratch_limit(flashcl_context *ctx, size_t *bytes);

/** Free the context's scratch buffers now: the reference backend's, the
 *  split-KV partials and the wgmma path's packed mask (below). Safe while
 *  calls are still running on the device (OpenCL frees a buffer only
 *  after the commands using it finish); the next call that needs scratch
 *  allocates again. A context that never needed any has nothing to free. */
FLASHCL_API flashcl_status flashcl_context_release_scratch(flashcl_context *ctx);

/** Scratch bytes the reference backend allocates for `desc` under the
 *  context's current cap (shape, dtype and head_dim_v are read; tensors are
 *  ignored), into *bytes; 0 for an empty problem. Fails with
 *  FLASHCL_ERROR_OUT_OF_MEMORY when even the smallest chunk (K and V of
 *  one head plus one query row) exceeds the cap. The fused backend needs
 *  no scratch. */
FLASHCL_API flashcl_status
flashcl_reference_scratch_bytes(flashcl_context *ctx,
                                const flashcl_attention_desc *desc,
                                size_t *bytes);

/* ------------------------------------------------------------------ */
/* Split-KV scratch                                                    */
/* ------------------------------------------------------------------ */
/* A split call (desc.num_splits, or the automatic choice; never fp64)
 * writes fp32 partial outputs and LSEs, num_splits * batch * heads_q *
 * seqlen_q * (head_dim_v padded to 16, or 32 above 128, + 1) * 4 bytes
 * (seqlen_q: max_seqlen_q for varlen queries), into scratch of the
 * context, then merges them into O. The scratch grows when a call needs
 * more, is reused by later calls and is freed with the context or by
 * flashcl_context_release_scratch(). Calls that share it are ordered on
 * the device as the reference backend's are (each waits for the previous
 * user's last command). Its cap is, first that applies:
 * flashcl_context_set_split_scratch_limit(ctx, bytes > 0), the
 * FLASHCL_SPLIT_SCRATCH_LIMIT environment variable (bytes, or with a K, M
 * or G suffix), 256 MiB capped at a quarter of
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE. flashcl_describe_variant reports the
 * splits and scratch a call uses.
 *
 * The same cap bounds the scratch of the NVIDIA Hopper path's packed mask:
 * a boolean mask is packed into bits there before the kernel runs,
 * batch' * heads' * seqlen_q * ceil(seqlen_k / 128) * 16 bytes (batch'
 * and heads' are 1 where the mask's stride along them is 0), kept and
 * ordered as the split-KV scratch is; a mask whose bits would exceed the
 * cap runs on another kernel, which reads its bytes. */

/** Set the split-KV scratch cap for this context in bytes; 0 restores the
 *  default. Takes effect from the next call. */
FLASHCL_API flashcl_status
flashcl_context_set_split_scratch_limit(flashcl_context *ctx, size_t bytes);

/** The split-KV scratch cap the next call will use, into *bytes. Fails with
 *  FLASHCL_ERROR_INVALID_VALUE when FLASHCL_SPLIT_SCRATCH_LIMIT is set but
 *  not a byte count. */
FLASHCL_API flashcl_status
flashcl_context_get_split_scratch_limit(flashcl_context *ctx, size_t *bytes);

/* ------------------------------------------------------------------ */
/* EXPERIMENTAL: introspection for tools and logs. These structs and     */
/* functions may change in any minor version (not covered by the ABI     */
/* policy).                                                             */
/* ------------------------------------------------------------------ */

/** What flashcl read off the context's device when the context was made. */
typedef struct flashcl_device_info {
    char name[256];
    char vendor[256];
    char platform[256];
    char driver_version[128];
    char opencl_c_version[128];
    unsigned vendor_id;
    int is_cpu, is_gpu;
    unsigned compute_units;
    unsigned clock_mhz;
    uint64_t global_mem_bytes;
    uint64_t local_mem_bytes;
    uint64_t max_alloc_bytes;
    size_t max_work_group_size;
    int has_fp64;          /* cl_khr_fp64 */
    int has_fp16_ext;      /* cl_khr_fp16 listed (flashcl does not need it) */
    int fp16_storage;      /* flashcl's fp16 storage works here: always 1 */
    int bf16_storage;      /* flashcl's bf16 storage works here: always 1 */
    int has_subgroups;     /* cl_khr_subgroups or cl_intel_subgroups */
    unsigned nv_compute_capability; /* major*10+minor, 0 if not NVIDIA */
    char amd_gfx[64];      /* e.g. "gfx90a", "" if unknown */
    /** Matrix instructions the device offers, as flashcl sees them. */
    char matrix_path[160];
    /** Which of them flashcl's kernels use on this device. */
    char flashcl_path[160];
    /** The device's key in the tuning database (docs/tuning.md): vendor
     *  (the OpenCL implementation on CPUs: "pocl", "intel"; the GPU maker
     *  otherwise), architecture ("sm_90", "gfx90a", an Intel GPU family,
     *  the CPU's ISA level "avx512"/"avx2") and normalised name. */
    char tuning_vendor[32];
    char tuning_arch[32];
    char tuning_device[128];
} flashcl_device_info;

/** Fill `info` for the context's device. */
FLASHCL_API flashcl_status flashcl_context_device_info(
    const flashcl_context *ctx, flashcl_device_info *info);

/** The kernel variant flashcl picks for a problem on this context. */
typedef struct flashcl_variant_info {
    char kernel_file[64];   /* "flash_fwd.cl", "flash_fwd_mma.cl" */
    char path[32];          /* the kernel path: "portable", "nv_mma" */
    int head_dim_padded;
    int block_m, block_n;
    int work_group_size;
    int vector_width;       /* portable kernel only; 0 otherwise */
    char reason[256];       /* why this entry of the tile table, and where
                             * it was measured */
    /** Why faster paths were passed over ("" when the first path runs). */
    char skipped[512];
    char variants[160];     /* the variants the call uses, "" for none */
    char build_options[1024];
    /** Split-KV: parts per key range (1: not split) and the context
     *  scratch the call needs, in bytes (0 when not split). */
    int num_splits;
    size_t split_scratch_bytes;
    /** The tuning database entry behind the tiles: which (built-in
     *  database or FLASHCL_TUNING_FILE), at which level (device,
     *  architecture, vendor), and the measurement (median, date, device);
     *  "" when the path's own tile table chose them. */
    char tuning[320];
} flashcl_variant_info;

/** Describe the variant `desc` would run with. The descriptor is the one a
 *  forward call takes: shape, dtype, variant fields and tensor views
 *  (offsets and strides) are read. Tensor buffers may be NULL, in which
 *  case the views are taken as given without bounds checks (all-zero
 *  strides: packed in desc->layout); present buffers are checked as
 *  flashcl_attention_forward checks them. Compiles nothing. */
FLASHCL_API flashcl_status flashcl_describe_variant(
    flashcl_context *ctx, const flashcl_attention_desc *desc,
    flashcl_variant_info *info);

/** Describe the backward `desc` and `bwd` would run with, as
 *  flashcl_describe_variant does for the forward: `path` ("portable", or
 *  "reference" on the reference backend), `kernel_file`, `block_m` (rows
 *  or keys a work-group owns), `block_n` (rows a local-memory tile
 *  stages), `work_group_size`, `head_dim_padded`, `build_options` and in
 *  `reason` the kernels in their order. `bwd` may be NULL (no d_sinks);
 *  buffers may be NULL as for flashcl_describe_variant. What the backward
 *  refuses is refused here with the same status and message. Compiles
 *  nothing. */
FLASHCL_API flashcl_status flashcl_describe_backward(
    flashcl_context *ctx, const flashcl_attention_desc *desc,
    const flashcl_backward_desc *bwd, flashcl_variant_info *info);

/** One tunable parameter of a kernel path, as `flashcl tune` searches it:
 *  its name in a parameter set ("block_m") and its legal values. */
typedef struct flashcl_tunable {
    char name[16];
    int values[8];
    int count;
} flashcl_tunable;

/** The name of the `index`-th (0-based) kernel path, in the order the
 *  library tries them ("nv_wgmma", ..., "portable" last): the names
 *  FLASHCL_PATH, flashcl_path_tunable and flashcl_context_force_tiles
 *  take. NULL past the last path. The string is static. */
FLASHCL_API const char *flashcl_path_name(int index);

/** The `index`-th (0-based) tunable of the kernel path called `path`
 *  ("portable", "subgroup", "amd_mfma", "nv_mma"), or of the tensor-core
 *  backward's tiles, `path` "nv_mma_bwd" (not a forward path). Fails with
 *  FLASHCL_ERROR_INVALID_VALUE for an unknown path or past its last
 *  tunable. */
FLASHCL_API flashcl_status flashcl_path_tunable(const char *path, int index,
                                                flashcl_tunable *out);

/** For tuners: every later call on `ctx` tries kernel path `path` first
 *  (as FLASHCL_PATH would force it) and plans it with the tile parameters
 *  `params` ("block_m=64,block_n=32,vec=8": names of flashcl_path_tunable;
 *  parameters left out keep the path's choice). The path still checks
 *  them against the device: an illegal set is refused, the call runs the
 *  path's own tiles and its last-error text says why
 *  (flashcl_describe_variant shows which ran, compiling nothing). `path`
 *  "nv_mma_bwd" forces the tensor-core backward's tiles instead
 *  (flashcl_describe_backward shows them; forward calls plan as unforced).
 *  `path` NULL clears it. Do not call it while other threads use `ctx`. Fails
 *  with FLASHCL_ERROR_INVALID_VALUE for an unknown path. */
FLASHCL_API flashcl_status flashcl_context_force_tiles(flashcl_context *ctx,
                                                       const char *path,
                                                       const char *params);

/** Drop CLBlast's process-wide program cache (the reference backend's GEMM
 *  programs, which also keep every cl_context the reference backend ran on
 *  alive). flashcl never does this by itself: the cache is shared with
 *  every other CLBlast user in the process. Call it when no thread is using
 *  CLBlast, e.g. before exit: some OpenCL runtimes (oclgrind) fault when
 *  CLBlast frees those programs during the process's final teardown, after
 *  the runtime's thread-local state is gone. Does nothing in a build
 *  without CLBlast. */
FLASHCL_API void flashcl_clear_reference_cache(void);

/** The persistent program-binary cache (docs/api.md, "Program-binary cache"):
 *  where it is and what it did in this process so far. */
typedef struct flashcl_cache_stats {
    int enabled;             /* FLASHCL_CACHE is not 0 and a folder is named */
    char dir[1024];          /* the folder ("" when none can be named) */
    uint64_t hits;           /* programs loaded from a cached binary */
    uint64_t misses;         /* looked up, not there */
    uint64_t bad_entries;    /* damaged, truncated or another key's: rebuilt */
    uint64_t refused;        /* binaries the driver would not load: rebuilt */
    uint64_t stores;         /* entries written */
    uint64_t store_failures; /* entries that could not be written */
    uint64_t evictions;      /* entries removed to keep under the size cap */
    uint64_t source_builds;  /* programs compiled from source */
} flashcl_cache_stats;

/** Fill `stats` (process-wide counters since the process started; the
 *  folder as the environment names it now). Does nothing when NULL. */
FLASHCL_API void flashcl_get_cache_stats(flashcl_cache_stats *stats);

/** Compile (if not yet cached) the kernels `desc` would run with (the same
 *  descriptor rules as flashcl_describe_variant) and return the compile
 *  time in milliseconds in *compile_ms (0 when the context had them
 *  already; may be NULL). A program found in the persistent binary cache
 *  counts as compiled: *compile_ms is then the time its load took
 *  (flashcl_get_cache_stats tells the two apart). */
FLASHCL_API flashcl_status flashcl_prepare(flashcl_context *ctx,
                                           const flashcl_attention_desc *desc,
                                           double *compile_ms);

/* ------------------------------------------------------------------ */
/* EXPERIMENTAL: merging partial attention results                     */
/* ------------------------------------------------------------------ */

/** What flashcl_combine_partials merges. P partial results of the same
 *  queries over disjoint key ranges (chunked prefill, ring / context-
 *  parallel attention, cascade or shared-prefix attention), each an fp32
 *  output normalised over its own keys and its LSE:
 *
 *    m = max_p lse_p,  w_p = exp(lse_p - m),
 *    O = sum_p w_p O_p / sum_p w_p,  LSE = m + log(sum_p w_p).
 *
 *  LSEs are natural logarithms, as FlashAttention and flashcl's own LSE
 *  output write them (FlashInfer writes base-2 LSEs: multiply those by
 *  ln 2 first). A partial whose row saw no key has LSE = -inf and weighs
 *  nothing (its O is not read as a number: NaN there does not leak); a
 *  row whose partials are all -inf gets O = 0 and LSE = -inf. */
typedef struct flashcl_combine_desc {
    /** sizeof(flashcl_combine_desc) (FLASHCL_COMBINE_DESC_INIT sets it). */
    size_t struct_size;
    int64_t num_partials; /* P >= 1 */
    int64_t batch, heads, seqlen_q, head_dim_v;
    flashcl_dtype dtype;   /* of o: fp32, fp16, bf16 or fp64 */
    flashcl_layout layout; /* of a zero-stride o */
    /** fp32 partial outputs, partial p's element (b, h, i, d) at offset +
     *  4 * (p * partial_stride + b*stride_batch + ...). All strides 0:
     *  packed [P, batch, heads, seqlen_q, head_dim_v]. */
    flashcl_tensor o_partial;
    size_t o_partial_stride;
    /** fp32 partial LSEs, (p, b, h, i) at offset + 4 * (p * partial_stride
     *  + b*stride_batch + h*stride_head + i*stride_seq). All strides 0:
     *  packed [P, batch, heads, seqlen_q]. */
    flashcl_tensor lse_partial;
    size_t lse_partial_stride;
    /** The merged output (dtype) and optional LSE (lse_dtype, NULL: not
     *  wanted; packed [batch, heads, seqlen_q] for zero strides). */
    flashcl_tensor o;
    flashcl_tensor lse;
    /** Storage type of o_partial: FLASHCL_DTYPE_FP32 (0, the default),
     *  FP16 or BF16, as a 16-bit forward writes its own O (the steps of
     *  ring attention in 16-bit storage); element sizes and strides then
     *  count 2-byte elements. The merge still sums in fp32; lse_partial
     *  stays fp32. FP64 (needs dtype FP64 and cl_khr_fp64): the partials
     *  and lse_partial are fp64 (8-byte elements; the LSEs as an fp64
     *  forward writes them with lse_dtype FP64) and the merge sums in
     *  fp64. */
    flashcl_dtype partial_dtype;
    /** Storage of the merged `lse`: FLASHCL_DTYPE_FP32 (0, the default) or
     *  FP64 (with fp64 partials only). */
    flashcl_dtype lse_dtype;
} flashcl_combine_desc;

#ifdef __cplusplus /* as FLASHCL_ATTENTION_DESC_INIT */
FLASHCL_INIT_FN_ flashcl_combine_desc flashcl_combine_desc_initial_(void)
{
    flashcl_combine_desc desc = {};
    desc.struct_size = sizeof desc;
    return desc;
}
#define FLASHCL_COMBINE_DESC_INIT {flashcl_combine_desc_initial_()}
#undef FLASHCL_INIT_FN_
#else
#define FLASHCL_COMBINE_DESC_INIT {.struct_size = sizeof(flashcl_combine_desc)}
#endif

/** Enqueue the merge of `desc` on `queue` (NULL: the context's queue),
 *  after the wait list, with `*event` (if not NULL) completing when O and
 *  LSE are written. Bad input (NULL or foreign buffers, views outside
 *  their buffers, outputs overlapping inputs, unknown dtype, sizes
 *  negative or P < 1, struct_size other than this header's) gets a
 *  specific status and message, and nothing is written. An empty problem
 *  is a successful no-op (a marker when an event is asked for). */
FLASHCL_API flashcl_status flashcl_combine_partials(
    flashcl_context *ctx, cl_command_queue queue,
    const flashcl_combine_desc *desc, cl_uint num_events_in_wait_list,
    const cl_event *event_wait_list, cl_event *event);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCL_H */
