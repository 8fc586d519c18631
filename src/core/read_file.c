/* See read_file.h. */
#ifndef _POSIX_C_SOURCE /* the library's build sets it; the tool's not */
#define _POSIX_C_SOURCE 200809L
#endif
#include "core/read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reads want bytes; false when the file ends or fails before. */
static int read_all(int fd, char *text, size_t want)
{
    size_t got = 0;
    while (got < want) {
        const ssize_t n = read(fd, text + got, want - got);
        if (n <= 0)
            return 0;
        got += (size_t)n;
    }
    return 1;
}

char *read_regular_file(const char *path, size_t max_bytes, const char *what,
                        size_t *size, char *msg, size_t cap)
{
    /* non-blocking, so that opening a FIFO returns at once */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (msg)
            snprintf(msg, cap, "cannot open %s %s: %s", what, path,
                     strerror(errno));
        return NULL;
    }
    struct stat st;
    char *text = NULL;
    char why[96] = "";
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        snprintf(why, sizeof why, "is not a regular file");
    else if ((unsigned long long)st.st_size > max_bytes)
        snprintf(why, sizeof why, "is larger than %zu bytes", max_bytes);
    else if (!(text = malloc((size_t)st.st_size + 1)))
        snprintf(why, sizeof why, "does not fit in memory");
    else if (!read_all(fd, text, (size_t)st.st_size)) {
        snprintf(why, sizeof why, "could not be read");
        free(text);
        text = NULL;
    } else {
        text[st.st_size] = '\0';
        if (size)
            *size = (size_t)st.st_size;
    }
    close(fd);
    if (!text && msg)
        snprintf(msg, cap, "%s %s %s", what, path, why);
    return text;
}
