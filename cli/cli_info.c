/* `flashcl info`: every OpenCL platform and device, what each offers and
 * what flashcl would run there; marks the device that would be selected. */
#define _POSIX_C_SOURCE 200809L
#include "cli_common.h"

#include <stdlib.h>
#include <string.h>

/* Vendor queries, from cl_ext.h; repeated so that older headers build. */
#define INFO_WARP_SIZE_NV 0x4003
#define INFO_WAVEFRONT_WIDTH_AMD 0x4043
#define INFO_SUB_GROUP_SIZES_INTEL 0x4108

#define MAX_PLATFORMS 16
#define MAX_DEVICES 16

static const char info_usage[] =
    "usage: flashcl info [--device SPEC] [--json]\n"
    "Lists every OpenCL platform and device: vendor, driver, OpenCL C\n"
    "version, compute units, clock, memory, fp16/bf16/fp64 support,\n"
    "subgroups, matrix instructions, the kernel variant and tiles flashcl\n"
    "would use for head dims 64 and 128, and the reference backend's scratch\n"
    "cap. Marks the device that --device SPEC (else FLASHCL_DEVICE, else the\n"
    "default: first GPU, else first device) selects.\n";

/* What the CLI reads itself, beyond flashcl_device_info. */
typedef struct device_extras {
    char subgroups[192];
    char matrix_ext[192];
    size_t scratch_cap;
} device_extras;

static char *device_extensions(cl_device_id device)
{
    size_t size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) !=
        CL_SUCCESS)
        return NULL;
    char *text = calloc(size + 1, 1);
    if (text && clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, text,
                                NULL) != CL_SUCCESS)
        text[0] = '\0';
    return text;
}

static bool listed(const char *extensions, const char *name)
{
    size_t len = strlen(name);
    for (const char *hit = extensions ? strstr(extensions, name) : NULL; hit;
         hit = strstr(hit + 1, name))
        if ((hit == extensions || hit[-1] == ' ') &&
            (hit[len] == '\0' || hit[len] == ' '))
            return true;
    return false;
}

static void append(char *buf, size_t cap, const char *text)
{
    size_t used = strlen(buf);
    snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", text);
}

/* Subgroup support: the extensions, and the widths a vendor query gives. */
static void describe_subgroups(cl_device_id device, const char *ext,
                               char *buf, size_t cap)
{
    buf[0] = '\0';
    const char *names[] = {"cl_khr_subgroups", "cl_intel_subgroups",
                           "cl_intel_required_subgroup_size",
                           "cl_khr_subgroup_shuffle"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (listed(ext, names[i]))
            append(buf, cap, names[i]);
    cl_uint width = 0;
    char text[96];
    if (listed(ext, "cl_nv_device_attribute_query") &&
        clGetDeviceInfo(device, INFO_WARP_SIZE_NV, sizeof width, &width,
                        NULL) == CL_SUCCESS) {
        snprintf(text, sizeof text, "warp size %u", width);
        append(buf, cap, text);
    }
    if (listed(ext, "cl_amd_device_attribute_query") &&
        clGetDeviceInfo(device, INFO_WAVEFRONT_WIDTH_AMD, sizeof width,
                        &width, NULL) == CL_SUCCESS) {
        snprintf(text, sizeof text, "wavefront %u", width);
        append(buf, cap, text);
    }
    size_t sizes[8], bytes = 0;
    if (listed(ext, "cl_intel_required_subgroup_size") &&
        clGetDeviceInfo(device, INFO_SUB_GROUP_SIZES_INTEL, sizeof sizes,
                        sizes, &bytes) == CL_SUCCESS) {
        strcpy(text, "sizes");
        for (size_t i = 0; i < bytes / sizeof sizes[0]; ++i)
            snprintf(text + strlen(text), sizeof text - strlen(text), " %zu",
                     sizes[i]);
        append(buf, cap, text);
    }
    if (!buf[0])
        snprintf(buf, cap, "none");
}

static void describe_matrix_extensions(const char *ext, char *buf, size_t cap)
{
    buf[0] = '\0';
    const char *names[] = {"cl_intel_subgroup_matrix_multiply_accumulate",
                           "cl_intel_subgroup_split_matrix_multiply_accumulate",
                           "cl_intel_subgroup_2d_block_io",
                           "cl_khr_integer_dot_product"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i)
        if (listed(ext, names[i]))
            append(buf, cap, names[i]);
    if (!buf[0])
        snprintf(buf, cap, "none listed");
}

static void read_extras(flashcl_context *ctx, device_extras *x)
{
    cl_device_id device = flashcl_context_device(ctx);
    char *ext = device_extensions(device);
    describe_subgroups(device, ext, x->subgroups, sizeof x->subgroups);
    describe_matrix_extensions(ext, x->matrix_ext, sizeof x->matrix_ext);
    free(ext);
    x->scratch_cap = 0;
    flashcl_context_get_scratch_limit(ctx, &x->scratch_cap);
}

/* ---- variants ------------------------------------------------------ */

static const flashcl_dtype all_dtypes[4] = {
    FLASHCL_DTYPE_FP32, FLASHCL_DTYPE_FP16, FLASHCL_DTYPE_BF16,
    FLASHCL_DTYPE_FP64};
static const int info_head_dims[2] = {64, 128};

static flashcl_status describe(flashcl_context *ctx, int head_dim,
                               flashcl_dtype dtype, flashcl_variant_info *v)
{
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc);
    desc.batch = desc.heads_q = 1;
    desc.seqlen_q = desc.seqlen_k = 1024;
    desc.head_dim = head_dim;
    desc.dtype = dtype;
    return flashcl_describe_variant(ctx, &desc, v);
}

static void print_variants(flashcl_context *ctx, bool has_fp64)
{
    printf("  kernel variants (N=1024, non-causal):\n");
    for (int t = 0; t < (has_fp64 ? 4 : 3); ++t)
        for (int h = 0; h < 2; ++h) {
            flashcl_variant_info v;
            if (describe(ctx, info_head_dims[h], all_dtypes[t], &v) !=
                FLASHCL_SUCCESS) {
                printf("    D=%-3d %s: %s\n", info_head_dims[h],
                       dtype_name(all_dtypes[t]),
                       flashcl_context_last_error(ctx));
                continue;
            }
            char vec[16] = "";
            if (v.vector_width)
                snprintf(vec, sizeof vec, " VEC=%d", v.vector_width);
            printf("    D=%-3d %s: %s, BLOCK_M=%d BLOCK_N=%d WG=%d%s (%s)\n",
                   info_head_dims[h], dtype_name(all_dtypes[t]),
                   v.kernel_file, v.block_m, v.block_n, v.work_group_size, vec,
                   v.reason);
        }
}

/* ---- text ---------------------------------------------------------- */

static void print_device_text(flashcl_context *ctx, unsigned index,
                              const char *spec, bool chosen, const char *why)
{
    flashcl_device_info d;
    device_extras x;
    flashcl_context_device_info(ctx, &d);
    read_extras(ctx, &x);
    printf("\ndevice %u (%s): %s%s\n", index, spec, d.name,
           chosen ? "   <== selected" : "");
    if (chosen)
        printf("  selected because: %s\n", why);
    printf("  type: %s, vendor: %s (0x%04x), platform: %s\n",
           d.is_gpu ? "GPU" : d.is_cpu ? "CPU" : "other", d.vendor,
           d.vendor_id, d.platform);
    printf("  driver: %s, %s\n", d.driver_version, d.opencl_c_version);
    printf("  compute units: %u, clock: %u MHz, max work-group: %zu\n",
           d.compute_units, d.clock_mhz, d.max_work_group_size);
    printf("  global memory: %.2f GiB, local: %.0f KiB, max allocation: "
           "%.2f GiB\n",
           (double)d.global_mem_bytes / 1073741824.0,
           (double)d.local_mem_bytes / 1024.0,
           (double)d.max_alloc_bytes / 1073741824.0);
    printf("  fp16 storage: yes (cl_khr_fp16 %s), bf16 storage: yes, fp64: "
           "%s\n",
           d.has_fp16_ext ? "listed" : "not listed, not needed",
           d.has_fp64 ? "yes (cl_khr_fp64)" : "no");
    printf("  subgroups: %s\n", x.subgroups);
    if (d.nv_compute_capability)
        printf("  NVIDIA compute capability: %u.%u\n",
               d.nv_compute_capability / 10, d.nv_compute_capability % 10);
    if (d.amd_gfx[0])
        printf("  AMD gfx: %s\n", d.amd_gfx);
    printf("  matrix instructions: %s\n", d.matrix_path);
    printf("  matrix extensions: %s\n", x.matrix_ext);
    printf("  flashcl path: %s\n", d.flashcl_path);
    print_variants(ctx, d.has_fp64);
    printf("  reference backend: CLBlast GEMMs (fp32%s), scratch cap %.1f "
           "MiB\n",
           d.has_fp64 ? "; fp64 for fp64" : "",
           (double)x.scratch_cap / 1048576.0);
}

/* ---- JSON ---------------------------------------------------------- */

static void json_field(const char *key, const char *value, bool comma)
{
    printf("      \"%s\": ", key);
    json_string(stdout, value);
    printf("%s\n", comma ? "," : "");
}

static void print_variants_json(flashcl_context *ctx, bool has_fp64)
{
    printf("      \"variants\": [");
    bool first = true;
    for (int t = 0; t < (has_fp64 ? 4 : 3); ++t)
        for (int h = 0; h < 2; ++h) {
            flashcl_variant_info v;
            if (describe(ctx, info_head_dims[h], all_dtypes[t], &v) !=
                FLASHCL_SUCCESS)
                continue;
            printf("%s\n        {\"head_dim\": %d, \"dtype\": \"%s\", "
                   "\"kernel\": ",
                   first ? "" : ",", info_head_dims[h],
                   dtype_name(all_dtypes[t]));
            json_string(stdout, v.kernel_file);
            printf(", \"block_m\": %d, \"block_n\": %d, \"work_group\": %d, "
                   "\"vector_width\": %d, \"reason\": ",
                   v.block_m, v.block_n, v.work_group_size, v.vector_width);
            json_string(stdout, v.reason);
            printf("}");
            first = false;
        }
    printf("\n      ],\n");
}

static void print_device_json(flashcl_context *ctx, unsigned index,
                              const char *spec, bool chosen, bool first)
{
    flashcl_device_info d;
    device_extras x;
    flashcl_context_device_info(ctx, &d);
    read_extras(ctx, &x);
    printf("%s    {\n      \"index\": %u,\n", first ? "" : ",\n", index);
    json_field("spec", spec, true);
    printf("      \"selected\": %s,\n", chosen ? "true" : "false");
    json_field("name", d.name, true);
    json_field("type", d.is_gpu ? "GPU" : d.is_cpu ? "CPU" : "other", true);
    json_field("vendor", d.vendor, true);
    printf("      \"vendor_id\": %u,\n", d.vendor_id);
    json_field("platform", d.platform, true);
    json_field("driver", d.driver_version, true);
    json_field("opencl_c", d.opencl_c_version, true);
    printf("      \"compute_units\": %u,\n      \"clock_mhz\": %u,\n"
           "      \"global_mem_bytes\": %llu,\n      \"local_mem_bytes\": "
           "%llu,\n      \"max_alloc_bytes\": %llu,\n"
           "      \"max_work_group\": %zu,\n",
           d.compute_units, d.clock_mhz,
           (unsigned long long)d.global_mem_bytes,
           (unsigned long long)d.local_mem_bytes,
           (unsigned long long)d.max_alloc_bytes, d.max_work_group_size);
    printf("      \"fp16_storage\": true,\n      \"cl_khr_fp16\": %s,\n"
           "      \"bf16_storage\": true,\n      \"fp64\": %s,\n",
           d.has_fp16_ext ? "true" : "false", d.has_fp64 ? "true" : "false");
    json_field("subgroups", x.subgroups, true);
    printf("      \"nv_compute_capability\": %u,\n", d.nv_compute_capability);
    json_field("amd_gfx", d.amd_gfx, true);
    json_field("matrix_instructions", d.matrix_path, true);
    json_field("matrix_extensions", x.matrix_ext, true);
    json_field("flashcl_path", d.flashcl_path, true);
    print_variants_json(ctx, d.has_fp64);
    printf("      \"reference_scratch_cap_bytes\": %zu\n    }", x.scratch_cap);
}

/* ---- the command ---------------------------------------------------- */

static void selection_reason(const char *spec, char *why, size_t cap)
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

/* Every device, in the flat order of the "N" spec. */
static int list_devices(cl_device_id selected, const char *why, bool json)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint num_platforms = 0;
    if (clGetPlatformIDs(MAX_PLATFORMS, platforms, &num_platforms) !=
            CL_SUCCESS ||
        num_platforms == 0)
        return -1;
    if (num_platforms > MAX_PLATFORMS)
        num_platforms = MAX_PLATFORMS;
    unsigned flat = 0, shown = 0;
    for (cl_uint p = 0; p < num_platforms; ++p) {
        cl_device_id devices[MAX_DEVICES];
        cl_uint count = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES,
                           devices, &count) != CL_SUCCESS)
            continue;
        for (cl_uint d = 0; d < count && d < MAX_DEVICES; ++d, ++flat) {
            char spec[32];
            snprintf(spec, sizeof spec, "%u:%u", p, d);
            flashcl_context *ctx = NULL;
            if (flashcl_context_create(&ctx, spec) != FLASHCL_SUCCESS) {
                if (!json)
                    printf("\ndevice %u (%s): cannot create a context: %s\n",
                           flat, spec, flashcl_last_create_error());
                continue;
            }
            bool chosen = devices[d] == selected;
            if (json)
                print_device_json(ctx, flat, spec, chosen, shown++ == 0);
            else
                print_device_text(ctx, flat, spec, chosen, why);
            flashcl_context_release(ctx);
        }
    }
    return 0;
}

int cmd_info(int argc, char **argv)
{
    common_options common = {0};
    if (parse_command_line("info", argc, argv, 2, &common, NULL, NULL) != 0)
        return EXIT_USAGE;
    if (common.help) {
        printf("%s", info_usage);
        return EXIT_OK;
    }
    flashcl_context *selected = open_device("info", common.device);
    if (!selected)
        return EXIT_DEVICE;
    char why[256];
    selection_reason(common.device, why, sizeof why);
    if (common.json) {
        printf("{\n  \"flashcl_version\": \"%s\",\n  \"selected_because\": ",
               flashcl_version_string());
        json_string(stdout, why);
        printf(",\n  \"devices\": [\n");
    } else {
        printf("flashcl %s\n", flashcl_version_string());
    }
    int listed_ok = list_devices(flashcl_context_device(selected), why,
                                 common.json);
    if (common.json)
        printf("\n  ]\n}\n");
    flashcl_context_release(selected);
    if (listed_ok != 0) {
        fprintf(stderr, "flashcl info: no OpenCL platform found\n");
        return EXIT_DEVICE;
    }
    return EXIT_OK;
}
