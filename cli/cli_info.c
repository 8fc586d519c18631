/* `flashcl info`: every OpenCL platform and device, what each offers and
 * what flashcl would run there; marks the device that would be selected,
 * or says why the spec selects none. The devices are listed straight from
 * the OpenCL API, so a bad spec, or a device flashcl cannot open, still
 * shows every device there is. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "cli_args.h"
#include "cli_device.h"
#include "cli_report.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Vendor queries, from cl_ext.h; repeated so that older headers build. */
#define INFO_WARP_SIZE_NV 0x4003
#define INFO_WAVEFRONT_WIDTH_AMD 0x4043
#define INFO_SUB_GROUP_SIZES_INTEL 0x4108

typedef struct info_options {
    bool verbose;
} info_options;

static const cli_option info_table[] = {
    {.name = "verbose", .help = "every detail: driver, extensions, each\n"
                                "variant's tiles and why, the paths skipped",
     .kind = CLI_FLAG, .offset = offsetof(info_options, verbose)},
    CLI_OPTIONS_END};

const cli_command info_command = {
    "info", "every OpenCL device and what flashcl runs there",
    "Per device: its type, memory and dtypes, and one line per dtype: the\n"
    "kernel path and tiles flashcl runs for a 1024 x 1024 attention at\n"
    "head dims 64 and 128 (\"tuned\": tiles from the tuning database).\n"
    "-v adds the driver, OpenCL C version, subgroups, matrix extensions\n"
    "and, per variant, the kernel file, why those tiles, the tuning entry\n"
    "behind them and the faster paths skipped, with why. The last line\n"
    "says which device --device SPEC (else FLASHCL_DEVICE, else the first\n"
    "GPU, else the first device) selects; when the spec matches nothing\n"
    "every device is still listed and the exit status is 3. A device\n"
    "flashcl cannot open is listed with what OpenCL says about it.\n",
    info_table};

/* ---- what the CLI reads itself ------------------------------------- */

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

static void append_width(cl_device_id device, const char *ext,
                         const char *extension, cl_device_info query,
                         const char *label, char *buf, size_t cap)
{
    cl_uint width = 0;
    char text[96];
    if (listed(ext, extension) &&
        clGetDeviceInfo(device, query, sizeof width, &width, NULL) ==
            CL_SUCCESS) {
        snprintf(text, sizeof text, "%s %u", label, width);
        append(buf, cap, text);
    }
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
    append_width(device, ext, "cl_nv_device_attribute_query",
                 INFO_WARP_SIZE_NV, "warp size", buf, cap);
    append_width(device, ext, "cl_amd_device_attribute_query",
                 INFO_WAVEFRONT_WIDTH_AMD, "wavefront", buf, cap);
    size_t sizes[8], bytes = 0;
    if (listed(ext, "cl_intel_required_subgroup_size") &&
        clGetDeviceInfo(device, INFO_SUB_GROUP_SIZES_INTEL, sizeof sizes,
                        sizes, &bytes) == CL_SUCCESS) {
        char text[96] = "sizes";
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

static void print_variant_text(int head_dim, flashcl_dtype dtype,
                               const flashcl_variant_info *v)
{
    printf("    D=%-3d %s: %s", head_dim, dtype_name(dtype), v->kernel_file);
    if (v->path[0])
        printf(" (%s path)", v->path);
    printf(", BLOCK_M=%d BLOCK_N=%d WG=%d", v->block_m, v->block_n,
           v->work_group_size);
    if (v->vector_width)
        printf(" VEC=%d", v->vector_width);
    printf("\n      reason: %s\n", v->reason);
    printf("      tuning: %s\n",
           v->tuning[0] ? v->tuning : "no database entry: the path's table");
    if (v->variants[0])
        printf("      variants: %s\n", v->variants);
    if (v->skipped[0])
        printf("      skipped: %s\n", v->skipped);
}

static void print_variants_text(flashcl_context *ctx, bool has_fp64)
{
    printf("  kernel variants (N=1024, non-causal):\n");
    for (int t = 0; t < (has_fp64 ? 4 : 3); ++t)
        for (int h = 0; h < 2; ++h) {
            flashcl_variant_info v;
            if (describe(ctx, info_head_dims[h], all_dtypes[t], &v) ==
                FLASHCL_SUCCESS)
                print_variant_text(info_head_dims[h], all_dtypes[t], &v);
            else
                printf("    D=%-3d %s: %s\n", info_head_dims[h],
                       dtype_name(all_dtypes[t]),
                       flashcl_context_last_error(ctx));
        }
}

static void print_variants_json(json_writer *j, flashcl_context *ctx,
                                bool has_fp64)
{
    json_array(j, "variants");
    for (int t = 0; t < (has_fp64 ? 4 : 3); ++t)
        for (int h = 0; h < 2; ++h) {
            flashcl_variant_info v;
            if (describe(ctx, info_head_dims[h], all_dtypes[t], &v) !=
                FLASHCL_SUCCESS)
                continue;
            json_object(j, NULL);
            json_integer(j, "head_dim", info_head_dims[h]);
            json_string(j, "dtype", dtype_name(all_dtypes[t]));
            json_string(j, "kernel", v.kernel_file);
            json_string(j, "path", v.path);
            json_integer(j, "block_m", v.block_m);
            json_integer(j, "block_n", v.block_n);
            json_integer(j, "work_group", v.work_group_size);
            json_integer(j, "vector_width", v.vector_width);
            json_string(j, "reason", v.reason);
            json_string(j, "tuning", v.tuning);
            json_string(j, "variants", v.variants);
            json_string(j, "skipped", v.skipped);
            json_close(j);
        }
    json_close(j);
}

/* "portable 512x128 (tuned)": the path and tiles one variant runs; a
 * refused one reads "refused", its message kept in `refusal` (first one
 * only: the same setting refuses them all). */
static void variant_brief(flashcl_context *ctx, int head_dim,
                          flashcl_dtype dtype, char *buf, size_t cap,
                          char *refusal, size_t refusal_cap)
{
    flashcl_variant_info v;
    if (describe(ctx, head_dim, dtype, &v) != FLASHCL_SUCCESS) {
        snprintf(buf, cap, "refused (see below)");
        if (!refusal[0])
            snprintf(refusal, refusal_cap, "%s",
                     flashcl_context_last_error(ctx));
    } else {
        snprintf(buf, cap, "%s %dx%d%s", v.path[0] ? v.path : v.kernel_file,
                 v.block_m, v.block_n, v.tuning[0] ? " (tuned)" : "");
    }
}

/* One line per dtype: what runs at each head dim shown. */
static void print_variants_brief(flashcl_context *ctx, bool has_fp64)
{
    char refusal[1024] = "";
    printf("  kernel path and tiles (queries x keys), 1024 x 1024 "
           "attention:\n");
    for (int t = 0; t < 4; ++t) {
        printf("    %s ", dtype_name(all_dtypes[t]));
        if (!has_fp64 && all_dtypes[t] == FLASHCL_DTYPE_FP64) {
            printf(" not supported by this device\n");
            continue;
        }
        for (int h = 0; h < 2; ++h) {
            char brief[96];
            variant_brief(ctx, info_head_dims[h], all_dtypes[t], brief,
                          sizeof brief, refusal, sizeof refusal);
            printf(h ? "  D=%d: %s" : " D=%d: %-26s", info_head_dims[h],
                   brief);
        }
        printf("\n");
    }
    if (refusal[0])
        printf("  refused: %s\n", refusal);
}

/* ---- one device ---------------------------------------------------- */

/* How `info` came to (not) select a device. */
typedef struct selection {
    flashcl_context *ctx; /* NULL when the spec selects nothing */
    flashcl_status status;
    char why[256];      /* where the spec came from */
    char failure[512];  /* the library's message, first line */
} selection;

static const char *type_name(const flashcl_device_info *d)
{
    return d->is_gpu ? "GPU" : d->is_cpu ? "CPU" : "other";
}

static void print_memory_text(const flashcl_device_info *d)
{
    printf("  compute units: %u, clock: %u MHz, max work-group: %zu\n",
           d->compute_units, d->clock_mhz, d->max_work_group_size);
    printf("  global memory: %.2f GiB, local: %.0f KiB, max allocation: "
           "%.2f GiB\n",
           (double)d->global_mem_bytes / 1073741824.0,
           (double)d->local_mem_bytes / 1024.0,
           (double)d->max_alloc_bytes / 1073741824.0);
    printf("  fp16 storage: yes (cl_khr_fp16 %s), bf16 storage: yes, fp64: "
           "%s\n",
           d->has_fp16_ext ? "listed" : "not listed, not needed",
           d->has_fp64 ? "yes (cl_khr_fp64)" : "no");
}

static void print_device_text(flashcl_context *ctx,
                              const cl_device_entry *entry,
                              const selection *sel)
{
    flashcl_device_info d;
    device_extras x;
    flashcl_context_device_info(ctx, &d);
    read_extras(ctx, &x);
    const bool chosen =
        sel->ctx && flashcl_context_device(sel->ctx) == entry->device;
    printf("\ndevice %u (%u:%u): %s%s\n", entry->index, entry->platform_index,
           entry->device_index, d.name, chosen ? "   <== selected" : "");
    if (chosen)
        printf("  selected because: %s\n", sel->why);
    printf("  type: %s, vendor: %s (0x%04x), platform: %s\n", type_name(&d),
           d.vendor, d.vendor_id, d.platform);
    printf("  driver: %s, %s\n", d.driver_version, d.opencl_c_version);
    print_memory_text(&d);
    printf("  subgroups: %s\n", x.subgroups);
    if (d.nv_compute_capability)
        printf("  NVIDIA compute capability: %u.%u\n",
               d.nv_compute_capability / 10, d.nv_compute_capability % 10);
    if (d.amd_gfx[0])
        printf("  AMD gfx: %s\n", d.amd_gfx);
    printf("  matrix instructions: %s\n", d.matrix_path);
    printf("  matrix extensions: %s\n", x.matrix_ext);
    printf("  flashcl path: %s\n", d.flashcl_path);
    const char *off = getenv("FLASHCL_TUNING");
    const bool db_off = off && (!strcmp(off, "0") || !strcmp(off, "off"));
    printf("  tuning database key: %s / %s / %s%s\n", d.tuning_vendor,
           d.tuning_arch, d.tuning_device,
           db_off ? " (FLASHCL_TUNING=off: databases not used)"
           : getenv("FLASHCL_TUNING_FILE") && *getenv("FLASHCL_TUNING_FILE")
               ? " (FLASHCL_TUNING_FILE first)"
               : "");
    print_variants_text(ctx, d.has_fp64);
    printf("  reference backend: CLBlast GEMMs (fp32%s), scratch cap %.1f "
           "MiB\n",
           d.has_fp64 ? "; fp64 for fp64" : "",
           (double)x.scratch_cap / 1048576.0);
}

/* The default view: what the device is and what runs there. */
static void print_device_brief(flashcl_context *ctx,
                               const cl_device_entry *entry,
                               const selection *sel)
{
    flashcl_device_info d;
    flashcl_context_device_info(ctx, &d);
    const bool chosen =
        sel->ctx && flashcl_context_device(sel->ctx) == entry->device;
    printf("\ndevice %u (%u:%u): %s%s\n", entry->index, entry->platform_index,
           entry->device_index, d.name, chosen ? "   <== selected" : "");
    printf("  %s, %s, %s %s\n", type_name(&d), d.vendor, d.platform,
           d.driver_version);
    printf("  %u compute units, %.2f GiB memory, %s\n", d.compute_units,
           (double)d.global_mem_bytes / 1073741824.0,
           d.has_fp64 ? "fp16, bf16 and fp64" : "fp16 and bf16 (no fp64)");
    print_variants_brief(ctx, d.has_fp64);
}

static void json_device_numbers(json_writer *j, const flashcl_device_info *d)
{
    json_integer(j, "compute_units", d->compute_units);
    json_integer(j, "clock_mhz", d->clock_mhz);
    json_integer(j, "global_mem_bytes", (long long)d->global_mem_bytes);
    json_integer(j, "local_mem_bytes", (long long)d->local_mem_bytes);
    json_integer(j, "max_alloc_bytes", (long long)d->max_alloc_bytes);
    json_integer(j, "max_work_group", (long long)d->max_work_group_size);
    json_bool(j, "fp16_storage", true);
    json_bool(j, "cl_khr_fp16", d->has_fp16_ext);
    json_bool(j, "bf16_storage", true);
    json_bool(j, "fp64", d->has_fp64);
}

static void print_device_json(json_writer *j, flashcl_context *ctx,
                              const cl_device_entry *entry,
                              const selection *sel, const char *spec)
{
    flashcl_device_info d;
    device_extras x;
    flashcl_context_device_info(ctx, &d);
    read_extras(ctx, &x);
    json_object(j, NULL);
    json_integer(j, "index", entry->index);
    json_string(j, "spec", spec);
    json_bool(j, "selected",
              sel->ctx && flashcl_context_device(sel->ctx) == entry->device);
    json_bool(j, "usable", true);
    json_string(j, "name", d.name);
    json_string(j, "type", type_name(&d));
    json_string(j, "vendor", d.vendor);
    json_integer(j, "vendor_id", d.vendor_id);
    json_string(j, "platform", d.platform);
    json_string(j, "driver", d.driver_version);
    json_string(j, "opencl_c", d.opencl_c_version);
    json_device_numbers(j, &d);
    json_string(j, "subgroups", x.subgroups);
    json_integer(j, "nv_compute_capability", d.nv_compute_capability);
    json_string(j, "amd_gfx", d.amd_gfx);
    json_string(j, "matrix_instructions", d.matrix_path);
    json_string(j, "matrix_extensions", x.matrix_ext);
    json_string(j, "flashcl_path", d.flashcl_path);
    json_string(j, "tuning_vendor", d.tuning_vendor);
    json_string(j, "tuning_arch", d.tuning_arch);
    json_string(j, "tuning_device", d.tuning_device);
    print_variants_json(j, ctx, d.has_fp64);
    json_integer(j, "reference_scratch_cap_bytes", (long long)x.scratch_cap);
    json_close(j);
}

/* A device flashcl could not open: what OpenCL says, and why. */
static void print_unusable(json_writer *j, const cl_device_entry *entry,
                           const char *spec, const char *error)
{
    cl_device_basics b;
    read_cl_basics(entry, &b);
    if (!j) {
        printf("\ndevice %u (%s): %s\n  type: %s, vendor: %s, platform: %s\n"
               "  driver: %s, %s\n  flashcl cannot use it: %s\n",
               entry->index, spec, b.name, b.type, b.vendor, b.platform,
               b.driver, b.version, error);
        return;
    }
    json_object(j, NULL);
    json_integer(j, "index", entry->index);
    json_string(j, "spec", spec);
    json_bool(j, "selected", false);
    json_bool(j, "usable", false);
    json_string(j, "name", b.name);
    json_string(j, "type", b.type);
    json_string(j, "vendor", b.vendor);
    json_string(j, "platform", b.platform);
    json_string(j, "driver", b.driver);
    json_string(j, "opencl_version", b.version);
    json_string(j, "error", error);
    json_close(j);
}

static void print_device(json_writer *j, const cl_device_entry *entry,
                         const selection *sel, bool verbose)
{
    char spec[32];
    snprintf(spec, sizeof spec, "%u:%u", entry->platform_index,
             entry->device_index);
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, spec) != FLASHCL_SUCCESS)
        print_unusable(j, entry, spec, flashcl_last_create_error());
    else if (j)
        print_device_json(j, ctx, entry, sel, spec);
    else if (verbose)
        print_device_text(ctx, entry, sel);
    else
        print_device_brief(ctx, entry, sel);
    flashcl_context_release(ctx);
}

/* ---- the command ---------------------------------------------------- */

/* The first line of the library's message, without the device list that
 * `info` prints in full anyway. */
static void first_line(const char *message, char *out, size_t cap)
{
    size_t length = strcspn(message, "\n");
    const char *listing = strstr(message, "; devices are");
    if (listing && (size_t)(listing - message) < length)
        length = (size_t)(listing - message);
    snprintf(out, cap, "%.*s", (int)length, message);
}

static void open_selection(const char *spec, selection *sel)
{
    memset(sel, 0, sizeof *sel);
    selection_reason(spec, sel->why, sizeof sel->why);
    sel->status = flashcl_context_create(&sel->ctx, spec);
    if (sel->status != FLASHCL_SUCCESS) {
        sel->ctx = NULL;
        first_line(flashcl_last_create_error(), sel->failure,
                   sizeof sel->failure);
    }
}

static void print_header_text(const selection *sel, bool verbose)
{
    printf("flashcl %s\n", flashcl_version_string());
    if (!sel->ctx && verbose)
        printf("\nselected: none: %s: %s: %s; every device is listed "
               "below\n",
               sel->why, flashcl_status_string(sel->status), sel->failure);
}

static void print_header_json(json_writer *j, const selection *sel)
{
    json_object(j, NULL);
    json_string(j, "flashcl_version", flashcl_version_string());
    if (sel->ctx) {
        json_string(j, "selected_because", sel->why);
        json_null(j, "selection_error");
    } else {
        json_null(j, "selected_because");
        json_object(j, "selection_error");
        json_string(j, "spec_source", sel->why);
        json_string(j, "error", flashcl_status_string(sel->status));
        json_integer(j, "status", (long long)sel->status);
        json_string(j, "message", sel->failure);
        json_close(j);
    }
    json_array(j, "devices");
}

/* The line a reader looks for: which device flashcl would use. */
static void print_summary_text(const selection *sel, bool verbose)
{
    if (sel->ctx) {
        flashcl_device_info d;
        flashcl_context_device_info(sel->ctx, &d);
        printf("\n==> selected: %s, by %s\n", d.name, sel->why);
    } else {
        printf("\n==> selected: none: %s\n", sel->failure);
    }
    if (!verbose)
        printf("flashcl info -v: drivers, extensions, why these tiles, the "
               "paths skipped\n");
}

static int list_all(const selection *sel, bool json, bool verbose)
{
    cl_device_entry entries[MAX_CL_DEVICES];
    cl_int error;
    const int count = list_cl_devices(entries, MAX_CL_DEVICES, &error);
    if (count == 0) {
        char message[128];
        snprintf(message, sizeof message, "no OpenCL device found (OpenCL "
                                          "error %d; is an ICD such as "
                                          "pocl-opencl-icd installed?)",
                 (int)error);
        return report_failure("info", json, FLASHCL_ERROR_NO_OPENCL, message,
                              EXIT_DEVICE);
    }
    json_writer j;
    json_begin(&j, stdout, 4);
    if (json)
        print_header_json(&j, sel);
    else
        print_header_text(sel, verbose);
    for (int i = 0; i < count; ++i)
        print_device(json ? &j : NULL, &entries[i], sel, verbose);
    if (json) {
        json_close(&j);
        json_close(&j);
        json_end(&j);
    } else {
        print_summary_text(sel, verbose);
    }
    return EXIT_OK;
}

int cmd_info(int argc, char **argv)
{
    common_options common = {0};
    info_options o = {0};
    int rc = cli_start(&info_command, argc, argv, &common, &o);
    if (rc != CLI_GO_ON)
        return rc;
    selection sel;
    open_selection(common.device, &sel);
    rc = list_all(&sel, common.json, o.verbose);
    if (rc == EXIT_OK && !sel.ctx) {
        fprintf(stderr, "flashcl info: %s: %s; every device is listed on "
                        "stdout\n",
                flashcl_status_string(sel.status), sel.failure);
        rc = EXIT_DEVICE;
    }
    flashcl_context_release(sel.ctx);
    return rc;
}
