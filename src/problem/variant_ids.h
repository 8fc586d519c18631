/* The variants' ids, apart from the table (variants.h) so that data
 * tables such as the tile tables can name variants without the problem's
 * headers. */
#ifndef FLASHCL_VARIANT_IDS_H
#define FLASHCL_VARIANT_IDS_H

/* Every variant, in the order of the table in variants.c, which is also
 * its bit in problem.variants: code names a variant by this enum, so a
 * misspelt one does not compile (names looked up at run time used to read
 * as "inactive"). The table in variants.c holds each one's name. */
typedef enum variant_id {
    VARIANT_WINDOW,
    VARIANT_TOP_LEFT,
    VARIANT_ALIBI,
    VARIANT_BIAS,
    VARIANT_MASK,
    VARIANT_SOFTCAP,
    VARIANT_SINKS,
    VARIANT_HEAD_DIM_V,
    VARIANT_POSITIONS,
    VARIANT_COUNT
} variant_id;

#endif
