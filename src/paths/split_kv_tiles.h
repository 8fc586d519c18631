/* Tiles of the split-KV kernels (cl/inference/flash_split.cl). Rows are
 * packed (query row x query head of one KV head), so decoding fills a
 * work-group with the heads of a GQA group. These are starting points,
 * checked for function on PoCL 3.1 and Intel's OpenCL CPU runtime only;
 * the GPU rows are to be measured (issue 11). */
#ifndef FLASHCL_SPLIT_KV_TILES_H
#define FLASHCL_SPLIT_KV_TILES_H

typedef struct split_tile {
    bool cpu;
    /* The kernel: false the row kernel (a work-item per packed row), true
     * the wide one (split_wide.clh: wg_size items share each tile). */
    bool wide;
    int wg_size;            /* wide kernel only */
    int min_rows, max_rows; /* block_m: packed rows rounded up to 2^k */
    int block_n;            /* keys per tile; the row kernel's divides
                               every page size */
    /* Work-groups per compute unit the automatic split count aims for,
     * and the fewest keys worth a part of their own. */
    int groups_per_cu;
    int min_keys_per_split;
    /* The automatic split applies up to this many query tiles per
     * (sequence, KV head); 0: any. On GPUs only decode-like problems until
     * prefill is measured: a long prefill on few heads would otherwise
     * leave the NVIDIA tensor-core kernel for these portable ones. */
    int max_auto_q_tiles;
    const char *measured;
} split_tile;

static const split_tile split_tiles[] = {
    /* A CPU work-group runs its items in a loop: parts pay only when
     * there are fewer groups than cores, and only on long rows. */
    {true, false, 0, 4, 32, 64, 1, 1024, 0,
     "split-KV CPU tiles: not tuned (PoCL 3.1 / Intel CPU runtime checked "
     "for function only)"},
    /* 128 items, 64 keys: at D = 128 fp16 the K and V tiles take 33 KiB,
     * so several work-groups share a compute unit and hide each other's
     * softmax step. Rows stop at 16: the P.V accumulators are 4 registers
     * per row per item. */
    {false, true, 128, 1, 16, 64, 6, 256, 1,
     "split-KV GPU tiles (wide kernel): a first choice, to be measured"},
};

#endif /* FLASHCL_SPLIT_KV_TILES_H */
