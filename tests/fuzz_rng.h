/* The fuzzers' random stream: xorshift64, one global state seeded from
 * FLASHCL_FUZZ_SEED, so that a failing case is replayed by its seed alone
 * and both fuzzers draw the same way. */
#ifndef FLASHCL_FUZZ_RNG_H
#define FLASHCL_FUZZ_RNG_H

#include <stdint.h>

static uint64_t rng_state;

static inline void fuzz_seed(uint64_t seed)
{
    rng_state = 0x9E3779B97F4A7C15ull ^ seed;
}

static inline uint64_t next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#endif
