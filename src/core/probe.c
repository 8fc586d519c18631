/* Device enumeration, device-spec matching and the one-time capability
 * probe that vendor paths are chosen from. */
#include "core/core.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* From cl_ext.h; repeated so that older headers still build. */
#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
#endif
#ifndef CL_DEVICE_WAVEFRONT_WIDTH_AMD
#define CL_DEVICE_WAVEFRONT_WIDTH_AMD 0x4043
#endif
#ifndef CL_DEVICE_GFXIP_MAJOR_AMD
#define CL_DEVICE_GFXIP_MAJOR_AMD 0x404A
#define CL_DEVICE_GFXIP_MINOR_AMD 0x404B
#endif

#define VENDOR_ID_NVIDIA 0x10DE
#define VENDOR_ID_AMD 0x1002
#define VENDOR_ID_INTEL 0x8086

static void info_string(cl_device_id device, cl_device_info what, char *buf,
                        size_t cap)
{
    buf[0] = '\0';
    if (clGetDeviceInfo(device, what, cap, buf, NULL) != CL_SUCCESS)
        buf[0] = '\0';
    buf[cap - 1] = '\0';
}

static bool has_extension(const char *extensions, const char *name)
{
    size_t len = strlen(name);
    for (const char *hit = strstr(extensions, name); hit;
         hit = strstr(hit + 1, name)) {
        bool starts = hit == extensions || hit[-1] == ' ';
        bool ends = hit[len] == '\0' || hit[len] == ' ';
        if (starts && ends)
            return true;
    }
    return false;
}

static device_class classify(const device_caps *caps)
{
    if (caps->type & CL_DEVICE_TYPE_CPU)
        return DEVICE_CLASS_CPU;
    if (caps->vendor_id == VENDOR_ID_NVIDIA || caps->has_nv_attribute_query)
        return DEVICE_CLASS_GPU_NVIDIA;
    if (caps->vendor_id == VENDOR_ID_AMD)
        return DEVICE_CLASS_GPU_AMD;
    if (caps->vendor_id == VENDOR_ID_INTEL)
        return DEVICE_CLASS_GPU_INTEL;
    return DEVICE_CLASS_GPU_GENERIC;
}

#ifndef CL_DEVICE_SUB_GROUP_SIZES_INTEL
#define CL_DEVICE_SUB_GROUP_SIZES_INTEL 0x4108
#endif

/* The sizes a kernel may require with intel_reqd_sub_group_size. */
static void probe_subgroup_sizes(cl_device_id device, device_caps *caps)
{
    size_t sizes[8] = {0}, bytes = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_SUB_GROUP_SIZES_INTEL, sizeof sizes,
                        sizes, &bytes) != CL_SUCCESS)
        return;
    const size_t count = bytes / sizeof sizes[0];
    for (size_t i = 0; i < count && i < 8; ++i)
        if (sizes[i] > 0 && sizes[i] <= 128)
            caps->subgroup_sizes[caps->subgroup_size_count++] =
                (cl_uint)sizes[i];
}

static void probe_extensions(cl_device_id device, device_caps *caps)
{
    size_t size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) !=
            CL_SUCCESS ||
        size == 0)
        return;
    char *extensions = malloc(size + 1);
    if (!extensions)
        return;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, extensions,
                        NULL) == CL_SUCCESS) {
        extensions[size] = '\0';
        caps->has_fp64 = has_extension(extensions, "cl_khr_fp64");
        caps->has_fp16_ext = has_extension(extensions, "cl_khr_fp16");
        caps->has_subgroups = has_extension(extensions, "cl_khr_subgroups") ||
                              has_extension(extensions, "cl_intel_subgroups");
        caps->has_intel_subgroups =
            has_extension(extensions, "cl_intel_subgroups");
        caps->has_subgroup_shuffle =
            caps->has_intel_subgroups ||
            has_extension(extensions, "cl_khr_subgroup_shuffle");
        caps->has_reqd_subgroup_size =
            has_extension(extensions, "cl_intel_required_subgroup_size");
        if (caps->has_reqd_subgroup_size)
            probe_subgroup_sizes(device, caps);
        caps->has_nv_attribute_query =
            has_extension(extensions, "cl_nv_device_attribute_query");
        if (has_extension(extensions, "cl_amd_device_attribute_query")) {
            cl_uint major = 0, minor = 0;
            if (clGetDeviceInfo(device, CL_DEVICE_GFXIP_MAJOR_AMD,
                                sizeof major, &major, NULL) == CL_SUCCESS &&
                clGetDeviceInfo(device, CL_DEVICE_GFXIP_MINOR_AMD,
                                sizeof minor, &minor, NULL) == CL_SUCCESS)
                snprintf(caps->amd_gfx, sizeof caps->amd_gfx, "gfx%u%u",
                         major, minor);
            if (clGetDeviceInfo(device, CL_DEVICE_WAVEFRONT_WIDTH_AMD,
                                sizeof caps->amd_wavefront,
                                &caps->amd_wavefront, NULL) != CL_SUCCESS)
                caps->amd_wavefront = 0;
        }
    }
    free(extensions);
}

/* AMD's drivers (ROCm, PAL) name the device by its ISA target,
 * "gfx90a:sramecc+:xnack-": that tells gfx90a from gfx908 and gfx942 from
 * gfx940, which GFXIP major.minor ("gfx90", "gfx94") cannot. */
static void amd_target_name(device_caps *caps)
{
    if (!caps->amd_gfx[0] || strncmp(caps->name, "gfx", 3) != 0)
        return;
    size_t n = 3;
    while (n + 1 < sizeof caps->amd_gfx &&
           isalnum((unsigned char)caps->name[n]))
        ++n;
    memcpy(caps->amd_gfx, caps->name, n);
    caps->amd_gfx[n] = '\0';
}

static bool contains_nocase(const char *haystack, const char *needle);

void probe_device(cl_device_id device, device_caps *caps)
{
    memset(caps, 0, sizeof *caps);
    info_string(device, CL_DEVICE_NAME, caps->name, sizeof caps->name);
    info_string(device, CL_DEVICE_VENDOR, caps->vendor, sizeof caps->vendor);
    info_string(device, CL_DRIVER_VERSION, caps->driver_version,
                sizeof caps->driver_version);
    info_string(device, CL_DEVICE_VERSION, caps->device_version,
                sizeof caps->device_version);
    info_string(device, CL_DEVICE_OPENCL_C_VERSION, caps->opencl_c_version,
                sizeof caps->opencl_c_version);
    cl_platform_id platform = NULL;
    if (clGetDeviceInfo(device, CL_DEVICE_PLATFORM, sizeof platform,
                        &platform, NULL) == CL_SUCCESS &&
        clGetPlatformInfo(platform, CL_PLATFORM_NAME,
                          sizeof caps->platform_name, caps->platform_name,
                          NULL) != CL_SUCCESS)
        caps->platform_name[0] = '\0';
    if (!platform || clGetPlatformInfo(platform, CL_PLATFORM_VENDOR,
                                       sizeof caps->platform_vendor,
                                       caps->platform_vendor,
                                       NULL) != CL_SUCCESS)
        caps->platform_vendor[0] = '\0';
    clGetDeviceInfo(device, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT,
                    sizeof caps->preferred_vector_float,
                    &caps->preferred_vector_float, NULL);
    clGetDeviceInfo(device, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT,
                    sizeof caps->native_vector_float,
                    &caps->native_vector_float, NULL);
    clGetDeviceInfo(device, CL_DEVICE_VENDOR_ID, sizeof caps->vendor_id,
                    &caps->vendor_id, NULL);
    clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof caps->type, &caps->type,
                    NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS,
                    sizeof caps->compute_units, &caps->compute_units, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_CLOCK_FREQUENCY,
                    sizeof caps->clock_mhz, &caps->clock_mhz, NULL);
    clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof caps->global_mem,
                    &caps->global_mem, NULL);
    clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof caps->local_mem,
                    &caps->local_mem, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE,
                    sizeof caps->max_alloc, &caps->max_alloc, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE,
                    sizeof caps->max_work_group, &caps->max_work_group, NULL);
    clGetDeviceInfo(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                    sizeof caps->mem_base_addr_align_bits,
                    &caps->mem_base_addr_align_bits, NULL);
    probe_extensions(device, caps);
    if (caps->has_nv_attribute_query) {
        if (clGetDeviceInfo(device, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV,
                            sizeof caps->nv_cc_major, &caps->nv_cc_major,
                            NULL) != CL_SUCCESS ||
            clGetDeviceInfo(device, CL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV,
                            sizeof caps->nv_cc_minor, &caps->nv_cc_minor,
                            NULL) != CL_SUCCESS)
            caps->nv_cc_major = caps->nv_cc_minor = 0;
    }
    amd_target_name(caps);
    caps->klass = classify(caps);
    caps->pocl = contains_nocase(caps->platform_vendor, "pocl");
}

/* ---- device list and spec matching -------------------------------- */

typedef struct device_entry {
    cl_platform_id platform;
    cl_device_id device;
    unsigned platform_index, device_index;
} device_entry;

/* All devices of all platforms, in platform order. Caller frees. */
static device_entry *list_devices(size_t *count)
{
    *count = 0;
    cl_uint num_platforms = 0;
    if (clGetPlatformIDs(0, NULL, &num_platforms) != CL_SUCCESS ||
        num_platforms == 0)
        return NULL;
    cl_platform_id *platforms = calloc(num_platforms, sizeof *platforms);
    if (!platforms)
        return NULL;
    device_entry *entries = NULL;
    if (clGetPlatformIDs(num_platforms, platforms, NULL) != CL_SUCCESS)
        goto done;
    for (cl_uint p = 0; p < num_platforms; ++p) {
        cl_uint num_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, NULL,
                           &num_devices) != CL_SUCCESS ||
            num_devices == 0)
            continue;
        cl_device_id *devices = calloc(num_devices, sizeof *devices);
        device_entry *grown =
            realloc(entries, (*count + num_devices) * sizeof *entries);
        if (!devices || !grown) {
            free(devices);
            if (grown)
                entries = grown;
            break;
        }
        entries = grown;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, num_devices,
                           devices, NULL) == CL_SUCCESS) {
            for (cl_uint d = 0; d < num_devices; ++d)
                entries[(*count)++] =
                    (device_entry){platforms[p], devices[d], p, d};
        }
        free(devices);
    }
done:
    free(platforms);
    return entries;
}

static bool contains_nocase(const char *haystack, const char *needle)
{
    size_t n = strlen(needle);
    for (; *haystack; ++haystack) {
        size_t i = 0;
        while (i < n && haystack[i] &&
               tolower((unsigned char)haystack[i]) ==
                   tolower((unsigned char)needle[i]))
            ++i;
        if (i == n)
            return true;
    }
    return n == 0;
}

static bool parse_uint(const char *s, const char *end, unsigned *value)
{
    if (s == end)
        return false;
    unsigned long v = 0;
    for (const char *c = s; c < end; ++c) {
        if (!isdigit((unsigned char)*c) || v > 100000)
            return false;
        v = v * 10 + (unsigned long)(*c - '0');
    }
    *value = (unsigned)v;
    return true;
}

static bool equals_nocase(const char *a, const char *b)
{
    while (*a && *b &&
           tolower((unsigned char)*a) == tolower((unsigned char)*b))
        ++a, ++b;
    return *a == '\0' && *b == '\0';
}

static bool spec_matches(const char *spec, const device_entry *entry,
                         size_t flat_index)
{
    const char *end = spec + strlen(spec);
    const char *colon = strchr(spec, ':');
    unsigned a, b;
    if (!colon && parse_uint(spec, end, &a))
        return a == flat_index;
    if (colon && parse_uint(spec, colon, &a) && parse_uint(colon + 1, end, &b))
        return a == entry->platform_index && b == entry->device_index;
    cl_device_type type = 0;
    clGetDeviceInfo(entry->device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (equals_nocase(spec, "gpu"))
        return (type & CL_DEVICE_TYPE_GPU) != 0;
    if (equals_nocase(spec, "cpu"))
        return (type & CL_DEVICE_TYPE_CPU) != 0;
    if (equals_nocase(spec, "accelerator"))
        return (type & CL_DEVICE_TYPE_ACCELERATOR) != 0;
    device_caps caps;
    probe_device(entry->device, &caps);
    /* PoCL says "pocl" only in its platform vendor ("The pocl project"). */
    char platform_vendor[256] = "";
    if (clGetPlatformInfo(entry->platform, CL_PLATFORM_VENDOR,
                          sizeof platform_vendor, platform_vendor,
                          NULL) != CL_SUCCESS)
        platform_vendor[0] = '\0';
    platform_vendor[sizeof platform_vendor - 1] = '\0';
    return contains_nocase(caps.name, spec) ||
           contains_nocase(caps.vendor, spec) ||
           contains_nocase(caps.platform_name, spec) ||
           contains_nocase(platform_vendor, spec);
}

static void describe_devices(const device_entry *entries, size_t count,
                             char *msg, size_t cap)
{
    size_t used = strlen(msg);
    for (size_t i = 0; i < count && used + 1 < cap; ++i) {
        device_caps caps;
        probe_device(entries[i].device, &caps);
        char platform_vendor[256] = "";
        clGetPlatformInfo(entries[i].platform, CL_PLATFORM_VENDOR,
                          sizeof platform_vendor - 1, platform_vendor, NULL);
        int n = snprintf(msg + used, cap - used,
                         "\n  %zu (%u:%u) %s | %s | %s (%s)", i,
                         entries[i].platform_index, entries[i].device_index,
                         caps.name, caps.vendor, caps.platform_name,
                         platform_vendor);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

/* Spec empty: first GPU, else first device. */
static size_t default_device(const device_entry *entries, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        cl_device_type type = 0;
        clGetDeviceInfo(entries[i].device, CL_DEVICE_TYPE, sizeof type, &type,
                        NULL);
        if (type & CL_DEVICE_TYPE_GPU)
            return i;
    }
    return 0;
}

/* Only spaces: a spec that would match any name containing a space. */
static bool blank_spec(const char *spec)
{
    for (; *spec; ++spec)
        if (!isspace((unsigned char)*spec))
            return false;
    return true;
}

flashcl_status select_device(const char *spec, cl_device_id *device,
                             cl_platform_id *platform, char *msg,
                             size_t msg_cap)
{
    /* Messages name where the spec came from, so that a stale variable in
     * the environment is found without knowing that it is read. */
    const bool from_env = !spec || !*spec;
    if (from_env)
        spec = getenv("FLASHCL_DEVICE");
    char source[160];
    snprintf(source, sizeof source, "%s\"%.96s\"",
             from_env ? "FLASHCL_DEVICE=" : "device spec ", spec ? spec : "");
    if (spec && *spec && blank_spec(spec)) {
        snprintf(msg, msg_cap,
                 "%s is blank; give an index (0), platform:device (1:0), "
                 "gpu, cpu, accelerator or a name substring%s",
                 source, from_env ? ", or unset it" : "");
        return FLASHCL_ERROR_INVALID_VALUE;
    }
    size_t count = 0;
    device_entry *entries = list_devices(&count);
    if (count == 0) {
        free(entries);
        snprintf(msg, msg_cap,
                 "no OpenCL device found (no platform, or no device in any "
                 "platform; is an ICD such as pocl-opencl-icd installed?)");
        return FLASHCL_ERROR_NO_OPENCL;
    }
    size_t chosen = count;
    if (!spec || !*spec) {
        chosen = default_device(entries, count);
    } else {
        for (size_t i = 0; i < count && chosen == count; ++i)
            if (spec_matches(spec, &entries[i], i))
                chosen = i;
    }
    if (chosen == count) {
        snprintf(msg, msg_cap, "%s matches no device; devices are:", source);
        describe_devices(entries, count, msg, msg_cap);
        free(entries);
        return FLASHCL_ERROR_DEVICE_NOT_FOUND;
    }
    *device = entries[chosen].device;
    *platform = entries[chosen].platform;
    free(entries);
    return FLASHCL_SUCCESS;
}
