/* Whole files read into memory: the kernel sources of FLASHCL_KERNEL_DIR
 * (sources.c) and the tuning files (json_scan.c). No library state, so
 * the tool and the tests that compile json_scan.c compile this too. */
#ifndef FLASHCL_READ_FILE_H
#define FLASHCL_READ_FILE_H

#include <stddef.h>

/* The whole of the regular file at `path`, NUL-terminated (free()), its
 * length in *size (size may be NULL); NULL when it cannot be opened, is
 * not a regular file (a FIFO or device there would block or never end),
 * holds more than max_bytes, or reading fails. Then msg[0 .. cap) (msg
 * may be NULL) says why, naming the file as `what` ("kernel source"). */
char *read_regular_file(const char *path, size_t max_bytes, const char *what,
                        size_t *size, char *msg, size_t cap);

#endif /* FLASHCL_READ_FILE_H */
