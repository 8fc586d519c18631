/* Tile table of the subgroup path (cl/subgroup/flash_fwd_sg.cl). Each
 * entry says where its numbers were measured; GPU rows are a starting
 * point that no GPU has measured yet. */
#ifndef FLASHCL_SUBGROUP_TILES_H
#define FLASHCL_SUBGROUP_TILES_H

typedef struct subgroup_tile {
    bool cpu;         /* CPU devices, else GPUs and accelerators */
    int max_head_dim; /* applies to padded D up to this */
    int rows;         /* query rows per subgroup (FLASHCL_SG_ROWS) */
    int subgroups;    /* subgroups per work-group */
    int block_n;      /* keys per tile (rounded up to the subgroup size) */
    const char *measured;
} subgroup_tile;

/* First match wins. */
static const subgroup_tile subgroup_tiles[] = {
    {true, 64, 4, 8, 64, "CPU tiles: placeholder, not measured"},
    {true, 256, 4, 8, 64, "CPU tiles: placeholder, not measured"},
    {false, 128, 2, 4, 64,
     "GPU tiles: 2 rows x 4 subgroups x 64 keys, not measured on any GPU "
     "(chosen to keep 2 x D_v / SG accumulators per lane in registers)"},
    {false, 256, 1, 4, 32,
     "GPU tiles: 1 row x 4 subgroups x 32 keys, not measured on any GPU "
     "(local memory for D = 256)"},
};

#endif /* FLASHCL_SUBGROUP_TILES_H */
