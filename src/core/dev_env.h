/* The developers' measurement and forcing knobs (docs/environment.md,
 * "Developers' comparison knobs"): each forces one alternative over the
 * planner's choice so that two can be timed against each other, or so that
 * a suite runs on a path the test machine would not pick. A user's build
 * must not change behaviour because such a variable happens to be set, so
 * they are read only in developer builds (CMake FLASHCL_DEVELOPER, on with
 * the test suite); elsewhere every knob reads as unset. The variables users
 * set are read with plain getenv; tests/env_policy.sh keeps the two lists
 * apart. */
#ifndef FLASHCL_DEV_ENV_H
#define FLASHCL_DEV_ENV_H

#include <stdlib.h>

static inline const char *dev_getenv(const char *name)
{
#ifdef FLASHCL_DEVELOPER
    return getenv(name);
#else
    (void)name;
    return NULL;
#endif
}

#endif
