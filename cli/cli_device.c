/* Devices for the flashcl tool (see cli_device.h). */
#define _POSIX_C_SOURCE 200809L
#include "cli_device.h"

#include "cli.h"
#include "cli_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PLATFORMS 16

flashcl_context *open_device(const char *command, const char *spec,
                             bool json, int *rc)
{
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, spec);
    if (status == FLASHCL_SUCCESS)
        return ctx;
    /* The whole message: for an unmatched spec it lists the devices, which
     * is what the user needs next. */
    *rc = report_failure(command, json, status, flashcl_last_create_error(),
                         EXIT_DEVICE);
    return NULL;
}

void selection_reason(const char *spec, char *why, size_t cap)
{
    const char *env = getenv("FLASHCL_DEVICE");
    if (spec)
        snprintf(why, cap, "--device \"%s\"", spec);
    else if (env && *env)
        snprintf(why, cap, "FLASHCL_DEVICE=\"%s\"", env);
    else
        snprintf(why, cap,
                 "default (first GPU, else first device; FLASHCL_DEVICE "
                 "unset)");
}

static cl_int platform_devices(cl_platform_id platform, unsigned p,
                               cl_device_entry *out, int cap, int *count)
{
    cl_uint n = 0;
    cl_int err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, NULL, &n);
    if (err == CL_DEVICE_NOT_FOUND)
        return CL_SUCCESS; /* a platform without devices */
    if (err != CL_SUCCESS || n == 0)
        return err;
    cl_device_id *ids = malloc(n * sizeof *ids);
    if (!ids)
        return CL_OUT_OF_HOST_MEMORY;
    err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, n, ids, NULL);
    for (cl_uint d = 0; err == CL_SUCCESS && d < n && *count < cap; ++d) {
        out[*count] = (cl_device_entry){platform, ids[d], p, d,
                                        (unsigned)*count};
        ++*count;
    }
    free(ids);
    return err;
}

int list_cl_devices(cl_device_entry *out, int cap, cl_int *error)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint num_platforms = 0;
    *error = clGetPlatformIDs(MAX_PLATFORMS, platforms, &num_platforms);
    if (*error != CL_SUCCESS)
        return 0;
    if (num_platforms > MAX_PLATFORMS)
        num_platforms = MAX_PLATFORMS;
    int count = 0;
    for (cl_uint p = 0; p < num_platforms; ++p) {
        cl_int err = platform_devices(platforms[p], p, out, cap, &count);
        if (err != CL_SUCCESS && *error == CL_SUCCESS)
            *error = err;
    }
    return count;
}

static void device_text(cl_device_id device, cl_device_info what, char *buf,
                        size_t cap)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(device, what, cap - 1, buf, NULL) != CL_SUCCESS)
        snprintf(buf, cap, "?");
    buf[cap - 1] = '\0';
}

void read_cl_basics(const cl_device_entry *entry, cl_device_basics *out)
{
    device_text(entry->device, CL_DEVICE_NAME, out->name, sizeof out->name);
    device_text(entry->device, CL_DEVICE_VENDOR, out->vendor,
                sizeof out->vendor);
    device_text(entry->device, CL_DRIVER_VERSION, out->driver,
                sizeof out->driver);
    device_text(entry->device, CL_DEVICE_VERSION, out->version,
                sizeof out->version);
    out->platform[0] = '\0';
    clGetPlatformInfo(entry->platform, CL_PLATFORM_NAME,
                      sizeof out->platform - 1, out->platform, NULL);
    out->platform[sizeof out->platform - 1] = '\0';
    cl_device_type type = 0;
    clGetDeviceInfo(entry->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    out->type = (type & CL_DEVICE_TYPE_GPU)           ? "GPU"
                : (type & CL_DEVICE_TYPE_CPU)         ? "CPU"
                : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                      : "other";
}
