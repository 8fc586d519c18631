/* The host side of the kernels' -D switch lists (cl/<dir>/<kernel>_switches.clh,
 * SWITCH(name, default, legal, kind, meaning)): a path expands its list
 * into a struct of values (SWITCH_FIELD) and an emitter (SWITCH_EMIT), so
 * its options name exactly the switches its kernel declares, each checked
 * against the legal values the kernel's #error guards hold. */
#ifndef FLASHCL_SWITCHES_H
#define FLASHCL_SWITCHES_H

#include "core/options_buf.h"

/* The first switch a planner set outside its legal values (a planner bug:
 * the kernel would refuse to build). */
typedef struct switch_fault {
    const char *name; /* NULL: none */
    int value;
} switch_fault;

/* One int per switch; the variant layer's are there but not read. */
#define SWITCH_FIELD(name, default_value, legal, kind, meaning) int name;

/* Legality of `value`, one macro per form a list may use. */
#define SWITCH_LEGAL_RANGE(lo, hi) (value >= (lo) && value <= (hi))
#define SWITCH_LEGAL_MULTIPLE(step, lo, hi)                                    \
    (value >= (lo) && value <= (hi) && value % (step) == 0)
#define SWITCH_LEGAL_BOOL (value == 0 || value == 1)
#define SWITCH_LEGAL_ONE_OF2(a, b) (value == (a) || value == (b))
#define SWITCH_LEGAL_ONE_OF3(a, b, c)                                          \
    (value == (a) || value == (b) || value == (c))
#define SWITCH_LEGAL_ONE_OF4(a, b, c, d)                                       \
    (value == (a) || value == (b) || value == (c) || value == (d))

/* Which kinds a path's emitter writes: the variant layer writes its own
 * (variants_add_defines). */
#define SWITCH_EMITTED_TUNABLE 1
#define SWITCH_EMITTED_DERIVED 1
#define SWITCH_EMITTED_VARIANT 0

/* Switch `switch_name`'s value in `values` (a pointer to the list's
 * struct) as `value`, the first illegal one into the switch_fault
 * `fault`. */
#define SWITCH_VALUE_CHECKED(switch_name, legal)                               \
    const int value = values->switch_name;                                     \
    if (!(SWITCH_LEGAL_##legal) && !fault->name)                               \
        *fault = (switch_fault){"FLASHCL_" #switch_name, value};

/* " -DFLASHCL_<name>=<value>" into the options_buf `out`, each value
 * checked. */
#define SWITCH_EMIT(switch_name, default_value, legal, kind, meaning)          \
    if (SWITCH_EMITTED_##kind) {                                               \
        SWITCH_VALUE_CHECKED(switch_name, legal)                               \
        options_add(out, " -DFLASHCL_" #switch_name "=%d", value);             \
    }

/* The tunables alone checked, as SWITCH_EMIT checks them: a tile set is
 * held to the kernel's declaration, not to a copy of its ranges. */
#define SWITCH_IS_TUNABLE_TUNABLE 1
#define SWITCH_IS_TUNABLE_DERIVED 0
#define SWITCH_IS_TUNABLE_VARIANT 0
#define SWITCH_CHECK_TUNABLE(switch_name, default_value, legal, kind, meaning) \
    if (SWITCH_IS_TUNABLE_##kind) {                                            \
        SWITCH_VALUE_CHECKED(switch_name, legal)                               \
    }

#endif
