/* The backward's dK/dV and dQ kernels on NVIDIA tensor cores
 * (cl/nvidia/flash_bwd_mma.cl), chosen by src/api/backward.c's plan. */
#ifndef FLASHCL_NV_MMA_BWD_H
#define FLASHCL_NV_MMA_BWD_H

#include "core/core.h"
#include "problem/problem.h"

typedef struct nv_bwd_plan {
    bool chosen;
    int warps;      /* per work-group; 16 keys (dK/dV) or rows (dQ) each */
    int rows;       /* query rows per step of the dK/dV kernel */
    int keys;       /* keys per step of the dQ kernel */
    int row_stages; /* dK/dV: query-row buffers (2: copies overlap) */
    int key_stages; /* dQ: key buffers (2: copies overlap) */
    int dim_padded, dim_v_padded; /* head dims rounded up to 16 */
    const char *reason; /* why these tiles */
    /* The tuning entry (or the tuner's forced set) behind the tiles, ""
     * for the defaults: describe's reason and `tuning` name it. */
    char origin[300];
    char why_not[256];  /* when not chosen: why ("" when never tried) */
} nv_bwd_plan;

/* Whether the tensor-core backward runs `p` on this device with the
 * gradient views `grads` (d_o, d_q, d_k, d_v; NULL entries are not
 * checked), and its tiles. FLASHCL_PATH naming another path than nv_mma
 * or nv_wgmma, or FLASHCL_PORTABLE_ONLY, keeps it off. */
void nv_mma_bwd_plan(const device_caps *caps, const problem *p,
                     const tensor_view *const grads[4], nv_bwd_plan *plan);

/* nv_mma_bwd_plan with the tuner's forced set for path "nv_mma_bwd"
 * (flashcl_context_force_tiles' params; NULL: none): the tiles come from
 * it, else from FLASHCL_TUNING_FILE's or the compiled database's entry
 * for "nv_mma_bwd", else the defaults; a set the kernel cannot take is
 * refused with a note in the last-error text. FLASHCL_NVB_TILE, when
 * legal, still wins. */
void nv_mma_bwd_plan_forced(const device_caps *caps, const problem *p,
                            const tensor_view *const grads[4],
                            const char *forced, nv_bwd_plan *plan);

/* The backward's tuning key (nv_mma_bwd_tiles.h): name "nv_mma_bwd" and
 * its tunables; in no list of forward paths. */
struct kernel_path;
extern const struct kernel_path nv_mma_bwd_tuning;

/* Its build options into options[cap], every switch checked against
 * cl/nvidia/flash_bwd_mma_switches.clh; false when one is illegal or they
 * do not fit. */
bool nv_mma_bwd_options(const device_caps *caps, const problem *p,
                        const nv_bwd_plan *plan, char *options, size_t cap);

/* The program holding flashcl_bwd_dkdv (kernel 0) and flashcl_bwd_dq
 * (kernel 1), built for `plan`. */
flashcl_status nv_mma_bwd_program(flashcl_context *ctx, const problem *p,
                                  const nv_bwd_plan *plan,
                                  compiled_program **program);

/* flashcl_describe_backward's fields for the chosen plan; false when its
 * build options do not fit. */
bool nv_mma_bwd_describe(const device_caps *caps, const problem *p,
                         const nv_bwd_plan *plan, flashcl_variant_info *info);

/* With FLASHCL_VERBOSE: which kernels the backward runs, and why. */
void nv_mma_bwd_log(const nv_bwd_plan *plan);

#endif
