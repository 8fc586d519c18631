/* The split-KV service ("flash-decoding" and the inference features:
 * KV caches, paged and varlen keys): cl/inference/flash_split.cl's
 * append, attention and merge kernels and the context-owned scratch the
 * merge reads. Paths call it, none is called by it: the split_kv path
 * runs it on its own, the portable path plans through it what its own
 * kernel cannot compute, and the NVIDIA paths leave it the decodes it
 * runs faster (nv_common.c). */
#ifndef FLASHCL_SPLIT_KV_H
#define FLASHCL_SPLIT_KV_H

#include "paths/path.h"

/* Parts the key range of `p` is cut into on this device: desc's forced
 * count, else 1 when the work fills the device, else enough to fill it
 * (the tile table's fewest keys a part, within the scratch cap). */
int split_kv_splits(const device_caps *caps, const problem *p);
/* A decode the tensor-core split kernel takes (NVIDIA, 16-bit, at most 16
 * packed rows per KV head): faster there than on nv_mma even unsplit. */
bool split_kv_tensor_decode(const device_caps *caps, const problem *p);
/* Why a decode-like call should run on the split-KV kernels rather than
 * a dense tensor-core kernel (NVIDIA's, unforced), or NULL: fewer than 4
 * work-groups per compute unit while the split-KV plan would split it, or
 * at most 16 rows per KV head for the split-KV tensor-core kernel. */
const char *split_kv_decode_reason(const device_caps *caps, const problem *p);
/* The problem needs or wants the split-KV kernels (inference features,
 * more than one part, or a tensor-core decode), but for a packed prefill
 * that a dense kernel computes (varlen.h's plan_varlen_prefill). */
bool split_kv_wanted(const device_caps *caps, const problem *p);
/* Plans `p` on the split-KV kernels into `plan` (plan->path is the
 * caller's); `forced_tiles` is a forced tuning candidate's parameters
 * ("groups=64,block_n=32"), or NULL for the table and tuning database. */
void split_kv_plan(const device_caps *caps, const problem *p,
                   kernel_plan *plan, const char *forced_tiles);
/* Launches a split_kv_plan plan: the append, attention, merge and status
 * kernels it needs. */
path_launch_fn split_kv_launch;

#endif
