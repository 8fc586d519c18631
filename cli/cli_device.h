/* Devices for the flashcl tool: opening the one a spec names (and saying
 * why not, with the library's list of devices), and listing every OpenCL
 * device straight from the OpenCL API, which works even where flashcl
 * cannot make a context. */
#ifndef FLASHCL_CLI_DEVICE_H
#define FLASHCL_CLI_DEVICE_H

#include "flashcl.h"

#include <stdbool.h>
#include <stddef.h>

/* Opens the device of `spec` (NULL: the library's default rules). On
 * failure reports it (report_failure: the library's message, which lists
 * the devices there are) and returns NULL with the exit status in *rc. */
flashcl_context *open_device(const char *command, const char *spec,
                             bool json, int *rc);

/* Why `spec` selects what it selects: "--device \"0\"",
 * "FLASHCL_DEVICE=\"cpu\"" or the default rule. */
void selection_reason(const char *spec, char *why, size_t cap);

/* One OpenCL device, in the flat order of the "N" device spec. */
typedef struct cl_device_entry {
    cl_platform_id platform;
    cl_device_id device;
    unsigned platform_index, device_index, index;
} cl_device_entry;

#define MAX_CL_DEVICES 64

/* Every device of every platform. Returns the number found (0 when there
 * is no platform); *error gets the first OpenCL error, CL_SUCCESS if none. */
int list_cl_devices(cl_device_entry *out, int cap, cl_int *error);

/* What the OpenCL API says about a device, for one flashcl cannot use. */
typedef struct cl_device_basics {
    char name[256], vendor[256], platform[256], driver[128], version[128];
    const char *type;
} cl_device_basics;

void read_cl_basics(const cl_device_entry *entry, cl_device_basics *out);

#endif /* FLASHCL_CLI_DEVICE_H */
