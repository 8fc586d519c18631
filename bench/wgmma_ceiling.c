/* wgmma-ceiling [CL_DIR]: the dense warpgroup-MMA rate through NVIDIA's
 * OpenCL on a Hopper GPU (the first GPU device), for the fraction-of-
 * ceiling figures of issue 12. Builds bench/wgmma_ceiling.cl from source
 * (CL_DIR: the repository's cl/ folder, default ./cl; the kernel is read
 * from CL_DIR/../bench), patches its PTX for sm_90a with the library's
 * own patch (src/paths/sm90a_patch.c), rebuilds it from that binary and
 * times a loop of m64n256k16 products, fp16 and bf16, 1 and 2 warpgroups
 * per work-group; median of 5 runs by profiling events. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "paths/sm90a_patch.h"
#include "timing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (text)
        text[n] = '\0';
    fclose(f);
    return text;
}

static void print_log(cl_program program, cl_device_id device)
{
    size_t size = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL,
                          &size);
    char *log = malloc(size + 1);
    if (log && clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG,
                                     size, log, NULL) == CL_SUCCESS) {
        log[size] = '\0';
        fprintf(stderr, "%s\n", log);
    }
    free(log);
}

/* Source build, patch, binary build; NULL (after a message) on failure. */
static cl_program build(cl_context ctx, cl_device_id dev, const char *source,
                        const char *options)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    if (err != CL_SUCCESS)
        return NULL;
    err = clBuildProgram(p, 1, &dev, options, NULL, NULL);
    cl_build_status st = CL_BUILD_ERROR;
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st,
                          NULL);
    if (st != CL_BUILD_SUCCESS) {
        fprintf(stderr, "source build failed (%d):\n", err);
        print_log(p, dev);
        clReleaseProgram(p);
        return NULL;
    }
    size_t size = 0;
    clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    unsigned char *bin = malloc(size);
    unsigned char *bins[1] = {bin};
    clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL);
    clReleaseProgram(p);
    char why[256];
    size_t psize = 0;
    int markers = 0;
    char *patched = bin ? sm90a_patch_ptx((const char *)bin, size, &psize,
                                          &markers, why, sizeof why)
                        : NULL;
    free(bin);
    if (!patched) {
        fprintf(stderr, "patch failed: %s\n", bin ? why : "no binary");
        return NULL;
    }
    ++psize; /* with its NUL, as the driver's PTX came */
    const unsigned char *pb[1] = {(const unsigned char *)patched};
    cl_int bst = CL_INVALID_BINARY;
    p = clCreateProgramWithBinary(ctx, 1, &dev, &psize, pb, &bst, &err);
    free(patched);
    if (err != CL_SUCCESS || bst != CL_SUCCESS) {
        fprintf(stderr, "clCreateProgramWithBinary: %d / %d\n", err, bst);
        return NULL;
    }
    err = clBuildProgram(p, 1, &dev, "-cl-nv-verbose", NULL, NULL);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, sizeof st, &st,
                          NULL);
    print_log(p, dev); /* ptxas' register report */
    if (st != CL_BUILD_SUCCESS) {
        fprintf(stderr, "binary build failed (%d)\n", err);
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    const char *cl_dir = argc > 1 ? argv[1] : "cl";
    char path[4096], inc[4096];
    snprintf(path, sizeof path, "%s/../bench/wgmma_ceiling.cl", cl_dir);
    snprintf(inc, sizeof inc, "%s/nvidia", cl_dir);
    char *source = read_text(path);
    char *full_inc = realpath(inc, NULL);
    if (!source || !full_inc) {
        fprintf(stderr, "wgmma-ceiling: cannot read %s or %s\n", path, inc);
        return 1;
    }
    cl_platform_id platforms[8];
    cl_uint np = 0;
    cl_device_id dev = NULL;
    clGetPlatformIDs(8, platforms, &np);
    for (cl_uint i = 0; i < np && !dev; ++i)
        if (clGetDeviceIDs(platforms[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) !=
            CL_SUCCESS)
            dev = NULL;
    if (!dev) {
        fprintf(stderr, "wgmma-ceiling: no GPU\n");
        return 1;
    }
    cl_uint cus = 0;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue q =
        clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    const int iters = 2048;
    int failed = 0;
    /* mode 0: m64n256k16 from local memory; 1-3: the attention kernel's
     * products (bench/wgmma_ceiling.cl), fp16 only */
    for (int mode = 0; mode <= 3; ++mode)
    for (int dtype = 1; dtype <= (mode ? 1 : 2); ++dtype)
        for (int groups = 1; groups <= 2; ++groups) {
            char options[4600];
            snprintf(options, sizeof options,
                     "-cl-std=CL1.2 -I %s -DFLASHCL_DTYPE=%d -DWG_GROUPS=%d "
                     "-DCEIL_MODE=%d",
                     full_inc, dtype, groups, mode);
            cl_program p = build(ctx, dev, source, options);
            cl_kernel k = p ? clCreateKernel(p, "wgmma_ceiling", &err) : NULL;
            if (!k) {
                failed = 1;
                continue;
            }
            const size_t local = 128 * (size_t)groups;
            const size_t wgs = (size_t)cus * 16 / (size_t)groups;
            const size_t global = wgs * local;
            cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY,
                                        global * sizeof(float), NULL, &err);
            clSetKernelArg(k, 0, sizeof out, &out);
            clSetKernelArg(k, 1, sizeof iters, &iters);
            double ms[6];
            for (int r = 0; r < 6; ++r) {
                cl_event ev;
                err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local,
                                             0, NULL, &ev);
                if (err != CL_SUCCESS) {
                    fprintf(stderr, "launch failed: %d\n", err);
                    failed = 1;
                    break;
                }
                clWaitForEvents(1, &ev);
                ms[r] = timing_event_ms(ev);
                clReleaseEvent(ev);
            }
            if (err == CL_SUCCESS) {
                const double flops = (double)wgs * groups * iters * 2.0 *
                                     (mode ? 2.0 * 64 * 64 * 128
                                           : 4.0 * 64 * 256 * 16);
                const double med = timing_median(ms + 1, 5);
                printf("wgmma %s %s, %d warpgroup(s) per work-group, "
                       "%zu work-groups: %.3f ms, %.1f TFLOP/s\n",
                       mode == 0   ? "m64n256k16 SS"
                       : mode == 1 ? "S+PV (attention, D 128, RS)"
                       : mode == 2 ? "S+PV (RS, K 8-key groups adjacent)"
                                   : "S+PV (S from local memory, SS)",
                       dtype == 1 ? "fp16" : "bf16", groups, wgs, med,
                       flops / med / 1e9);
            }
            clReleaseMemObject(out);
            clReleaseKernel(k);
            clReleaseProgram(p);
        }
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    free(source);
    free(full_inc);
    return failed;
}
