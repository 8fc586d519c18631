/* nv_kernel_probe: development harness for cl/flash_fwd_mma.cl, independent
 * of the library. Builds the kernel for several tile configs, checks each
 * against a float64 CPU reference on sampled rows (O and LSE, every output
 * row poisoned first and checked written) and times it with profiling
 * events. One line per config:
 *
 *   nv_kernel_probe [opts] CFG...      CFG = BM,BN,WARPS[,STAGES[,QREG]]
 *     -d D -t fp16|bf16 -c 0|1 -b B -H Hq -K Hkv -q Nq -k Nk
 *     -i iters -r rows_checked_per_head_sample -x extra_build_options
 *
 * Layout BHND packed. Build: cc -O2 -std=c11 nv_kernel_probe.c -lOpenCL -lm
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                               \
    do {                                                                       \
        cl_int e_ = (x);                                                       \
        if (e_ != CL_SUCCESS) {                                                \
            fprintf(stderr, "%s:%d: %s = %d\n", __FILE__, __LINE__, #x, e_);   \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}
static float nrand(void)
{
    double u = urand(), v = urand();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static uint16_t f2h(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int e = (int)((x >> 23) & 0xff) - 127 + 15;
    uint32_t m = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff)
        return (uint16_t)(sign | 0x7c00 | (m ? 0x200 : 0));
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        m |= 0x800000;
        int shift = 14 - e;
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1),
                 half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1)))
            hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fff;
    uint32_t r = sign | ((uint32_t)e << 10) | hm;
    if (rem > 0x1000 || (rem == 0x1000 && (hm & 1)))
        r++;
    return (uint16_t)r;
}
static float h2f(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f,
             m = h & 0x3ff, x;
    if (e == 0) {
        if (!m)
            x = sign;
        else {
            e = 1;
            while (!(m & 0x400)) {
                m <<= 1;
                e--;
            }
            m &= 0x3ff;
            x = sign | ((e + 127 - 15) << 23) | (m << 13);
        }
    } else if (e == 31)
        x = sign | 0x7f800000 | (m << 13);
    else
        x = sign | ((e + 127 - 15) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}
static uint16_t f2b(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}
static float b2f(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (fread(s, 1, (size_t)n, f) != (size_t)n)
        exit(1);
    s[n] = 0;
    fclose(f);
    return s;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int D = 128, bf16 = 0, causal = 0, B = 1, H = 16, HK = 0, NQ = 1024,
        NK = -1, iters = 20, rows_check = 64;
    const char *extra = "", *kdir = "cl";
    int ai = 1;
    for (; ai < argc && argv[ai][0] == '-'; ai += 2) {
        const char *a = argv[ai], *v = argv[ai + 1];
        switch (a[1]) {
        case 'd': D = atoi(v); break;
        case 't': bf16 = strcmp(v, "bf16") == 0; break;
        case 'c': causal = atoi(v); break;
        case 'b': B = atoi(v); break;
        case 'H': H = atoi(v); break;
        case 'K': HK = atoi(v); break;
        case 'q': NQ = atoi(v); break;
        case 'k': NK = atoi(v); break;
        case 'i': iters = atoi(v); break;
        case 'r': rows_check = atoi(v); break;
        case 'x': extra = v; break;
        case 'I': kdir = v; break;
        default: fprintf(stderr, "bad option %s\n", a); return 2;
        }
    }
    if (NK < 0)
        NK = NQ;
    if (HK <= 0)
        HK = H;
    const int group = H / HK;

    cl_platform_id plats[8];
    cl_uint np = 0;
    CHECK(clGetPlatformIDs(8, plats, &np));
    cl_device_id dev = NULL;
    for (cl_uint p = 0; p < np && !dev; ++p) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_GPU, 1, &dev, &nd) != CL_SUCCESS)
            dev = NULL;
    }
    if (!dev) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue queue =
        clCreateCommandQueue(ctx, dev, CL_QUEUE_PROFILING_ENABLE, &err);
    CHECK(err);

    const size_t nq = (size_t)B * H * NQ * D, nk = (size_t)B * HK * NK * D;
    uint16_t *hq = malloc(nq * 2), *hk = malloc(nk * 2), *hv = malloc(nk * 2),
             *ho = malloc(nq * 2);
    float *hl = malloc((size_t)B * H * NQ * 4);
    for (size_t i = 0; i < nq; ++i)
        hq[i] = bf16 ? f2b(nrand()) : f2h(nrand());
    for (size_t i = 0; i < nk; ++i) {
        hk[i] = bf16 ? f2b(nrand()) : f2h(nrand());
        hv[i] = bf16 ? f2b(nrand()) : f2h(nrand());
    }
    cl_mem dq = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * 2, hq, &err);
    CHECK(err);
    cl_mem dk = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk ? nk * 2 : 16, nk ? hk : NULL, &err);
    CHECK(err);
    cl_mem dv = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk ? nk * 2 : 16, nk ? hv : NULL, &err);
    CHECK(err);
    cl_mem dout = clCreateBuffer(ctx, CL_MEM_READ_WRITE, nq * 2, NULL, &err);
    CHECK(err);
    cl_mem dl = clCreateBuffer(ctx, CL_MEM_READ_WRITE, (size_t)B * H * NQ * 4, NULL, &err);
    CHECK(err);

    /* reference on sampled rows */
    int nsample = rows_check < NQ ? rows_check : NQ;
    int nbh = B * H < 8 ? B * H : 8;
    const float scale = 1.0f / sqrtf((float)D);
    const float scale_log2 = scale * 1.4426950408889634f;
    int *srow = malloc(sizeof(int) * nsample * nbh), *sbh = malloc(sizeof(int) * nsample * nbh);
    double *ref = malloc(sizeof(double) * nsample * nbh * D), *refl = malloc(sizeof(double) * nsample * nbh);
    double *sc = malloc(sizeof(double) * (NK + 1));
    for (int s = 0; s < nsample * nbh; ++s) {
        int bh = (s / nsample) * (B * H) / nbh;
        int row = nsample == NQ ? s % nsample : (int)(urand() * NQ);
        if (s % nsample == 0)
            row = NQ - 1; /* always check the last row */
        if (s % nsample == 1)
            row = 0;
        srow[s] = row;
        sbh[s] = bh;
        int b = bh / H, h = bh % H, hk_ = h / group;
        const uint16_t *qr = hq + ((size_t)(b * H + h) * NQ + row) * D;
        double mx = -INFINITY;
        int lim = causal ? row + NK - NQ : NK - 1;
        if (lim > NK - 1)
            lim = NK - 1;
        for (int j = 0; j <= lim; ++j) {
            const uint16_t *kr = hk + ((size_t)(b * HK + hk_) * NK + j) * D;
            double acc = 0;
            for (int d = 0; d < D; ++d)
                acc += (double)(bf16 ? b2f(qr[d]) : h2f(qr[d])) * (bf16 ? b2f(kr[d]) : h2f(kr[d]));
            sc[j] = acc * scale;
            if (sc[j] > mx)
                mx = sc[j];
        }
        double sum = 0;
        for (int j = 0; j <= lim; ++j) {
            sc[j] = exp(sc[j] - mx);
            sum += sc[j];
        }
        for (int d = 0; d < D; ++d) {
            double acc = 0;
            for (int j = 0; j <= lim; ++j) {
                const uint16_t *vr = hv + ((size_t)(b * HK + hk_) * NK + j) * D;
                acc += sc[j] * (bf16 ? b2f(vr[d]) : h2f(vr[d]));
            }
            ref[(size_t)s * D + d] = lim >= 0 ? acc / sum : 0.0;
        }
        refl[s] = lim >= 0 ? mx + log(sum) : -INFINITY;
    }

    char *src = read_file(strcat(strcpy(malloc(strlen(kdir) + 32), kdir), "/flash_fwd_mma.cl"));
    double flops = 4.0 * B * H * (double)NQ * NK * D * (causal ? 0.5 : 1.0);

    for (int ci = ai; ci < argc; ++ci) {
        int BM, BN, W, ST = -1, QR = -1;
        if (sscanf(argv[ci], "%d,%d,%d,%d,%d", &BM, &BN, &W, &ST, &QR) < 3) {
            fprintf(stderr, "bad cfg %s\n", argv[ci]);
            return 2;
        }
        char opts[1024], qreg[96] = "";
        if (QR >= 0)
            snprintf(qreg, sizeof qreg, "-DFLASHCL_NV_QREG=%d", QR);
        if (ST > 0)
            snprintf(qreg + strlen(qreg), sizeof qreg - strlen(qreg),
                     " -DFLASHCL_NV_STAGES=%d", ST);
        snprintf(opts, sizeof opts,
                 "-cl-std=CL1.2 -cl-mad-enable -I %s -DFLASHCL_NV_MMA=1 -DFLASHCL_HEAD_DIM=%d "
                 "-DFLASHCL_BLOCK_M=%d -DFLASHCL_BLOCK_N=%d -DFLASHCL_WG_SIZE=%d "
                 "-DFLASHCL_DTYPE=%d -DFLASHCL_CAUSAL=%d %s %s",
                 kdir, D, BM, BN, W * 32, bf16 ? 2 : 1, causal, qreg, extra);
        double t0 = now();
        cl_program prog = clCreateProgramWithSource(ctx, 1, (const char **)&src, NULL, &err);
        CHECK(err);
        err = clBuildProgram(prog, 1, &dev, opts, NULL, NULL);
        double tc = now() - t0;
        cl_build_status bs;
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_STATUS, sizeof bs, &bs, NULL);
        size_t logn = 0;
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &logn);
        char *log = malloc(logn + 1);
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, logn, log, NULL);
        log[logn] = 0;
        cl_kernel kern = NULL;
        if (bs == CL_BUILD_SUCCESS)
            kern = clCreateKernel(prog, "flashcl_attention_fwd", &err);
        if (!kern) {
            printf("cfg %s: BUILD FAILED (%d)\n%s\n", argv[ci], err, log);
            continue;
        }
        /* registers / spills from -cl-nv-verbose, if asked */
        char regs[160] = "";
        char *u = strstr(log, "Used ");
        if (u) {
            char *e = strchr(u, '\n');
            int n = e ? (int)(e - u) : (int)strlen(u);
            if (n > 150) n = 150;
            memcpy(regs, u, n);
            regs[n] = 0;
        }
        char *sp = strstr(log, "spill stores");
        int spill = 0;
        if (sp) {
            char *p = sp;
            while (p > log && p[-1] != ',') --p;
            spill = atoi(p + 1);
        }
        free(log);

        cl_ulong4 qst = {{(cl_ulong)H * NQ * D, (cl_ulong)NQ * D, (cl_ulong)D, 1}};
        cl_ulong4 kst = {{(cl_ulong)HK * NK * D, (cl_ulong)NK * D, (cl_ulong)D, 1}};
        cl_ulong4 lst = {{(cl_ulong)H * NQ, (cl_ulong)NQ, 1, 0}};
        cl_ulong4 base = {{0, 0, 0, 0}};
        cl_ulong lbase = 0;
        int wl = 1;
        int a = 0;
        CHECK(clSetKernelArg(kern, a++, sizeof(cl_mem), &dq));
        CHECK(clSetKernelArg(kern, a++, sizeof(cl_mem), &dk));
        CHECK(clSetKernelArg(kern, a++, sizeof(cl_mem), &dv));
        CHECK(clSetKernelArg(kern, a++, sizeof(cl_mem), &dout));
        CHECK(clSetKernelArg(kern, a++, sizeof(cl_mem), &dl));
        CHECK(clSetKernelArg(kern, a++, sizeof qst, &qst));
        CHECK(clSetKernelArg(kern, a++, sizeof kst, &kst));
        CHECK(clSetKernelArg(kern, a++, sizeof kst, &kst));
        CHECK(clSetKernelArg(kern, a++, sizeof qst, &qst));
        CHECK(clSetKernelArg(kern, a++, sizeof lst, &lst));
        CHECK(clSetKernelArg(kern, a++, sizeof base, &base));
        CHECK(clSetKernelArg(kern, a++, sizeof lbase, &lbase));
        CHECK(clSetKernelArg(kern, a++, sizeof(int), &NQ));
        CHECK(clSetKernelArg(kern, a++, sizeof(int), &NK));
        CHECK(clSetKernelArg(kern, a++, sizeof(int), &D));
        CHECK(clSetKernelArg(kern, a++, sizeof(int), &group));
        CHECK(clSetKernelArg(kern, a++, sizeof(float), &scale_log2));
        CHECK(clSetKernelArg(kern, a++, sizeof(int), &wl));
        size_t nqb = (size_t)(NQ + BM - 1) / BM;
        size_t gws[3] = {nqb * W * 32, (size_t)H, (size_t)B}, lws[3] = {(size_t)W * 32, 1, 1};

        /* poison, run once, check */
        cl_ushort poison = 0xFFFF; /* NaN in fp16 and bf16 */
        CHECK(clEnqueueFillBuffer(queue, dout, &poison, 2, 0, nq * 2, 0, NULL, NULL));
        cl_float lpoison = NAN;
        CHECK(clEnqueueFillBuffer(queue, dl, &lpoison, 4, 0, (size_t)B * H * NQ * 4, 0, NULL, NULL));
        CHECK(clEnqueueNDRangeKernel(queue, kern, 3, NULL, gws, lws, 0, NULL, NULL));
        CHECK(clFinish(queue));
        CHECK(clEnqueueReadBuffer(queue, dout, CL_TRUE, 0, nq * 2, ho, 0, NULL, NULL));
        CHECK(clEnqueueReadBuffer(queue, dl, CL_TRUE, 0, (size_t)B * H * NQ * 4, hl, 0, NULL, NULL));
        size_t nonfinite = 0;
        for (size_t i = 0; i < nq; ++i) {
            float x = bf16 ? b2f(ho[i]) : h2f(ho[i]);
            if (!isfinite(x))
                nonfinite++;
        }
        size_t lnan = 0;
        for (size_t i = 0; i < (size_t)B * H * NQ; ++i)
            if (isnan(hl[i]))
                lnan++;
        double num = 0, den = 0, lerr = 0;
        int lbad = 0;
        for (int s = 0; s < nsample * nbh; ++s) {
            size_t off = ((size_t)sbh[s] * NQ + srow[s]) * D;
            for (int d = 0; d < D; ++d) {
                double x = bf16 ? b2f(ho[off + d]) : h2f(ho[off + d]);
                double r = ref[(size_t)s * D + d];
                num += (x - r) * (x - r);
                den += r * r;
            }
            double lv = hl[(size_t)sbh[s] * NQ + srow[s]];
            if (isinf(refl[s])) {
                if (!(isinf(lv) && lv < 0))
                    lbad++;
            } else {
                double e = fabs(lv - refl[s]);
                if (!(e <= lerr))
                    lerr = isnan(e) ? INFINITY : (e > lerr ? e : lerr);
            }
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        double tol = bf16 ? 1e-2 : 2e-3;
        int ok = nonfinite == 0 && lnan == 0 && lbad == 0 && rel <= tol && lerr < 1e-2;

        /* time */
        double *ms = malloc(sizeof(double) * (iters > 0 ? iters : 1));
        for (int w = 0; w < 3; ++w)
            CHECK(clEnqueueNDRangeKernel(queue, kern, 3, NULL, gws, lws, 0, NULL, NULL));
        for (int it = 0; it < iters; ++it) {
            cl_event ev;
            CHECK(clEnqueueNDRangeKernel(queue, kern, 3, NULL, gws, lws, 0, NULL, &ev));
            CHECK(clWaitForEvents(1, &ev));
            cl_ulong s0, s1;
            clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof s0, &s0, NULL);
            clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof s1, &s1, NULL);
            ms[it] = (s1 - s0) * 1e-6;
            clReleaseEvent(ev);
        }
        double med = 0;
        if (iters > 0) {
            qsort(ms, iters, sizeof(double), cmpd);
            med = ms[iters / 2];
        }
        printf("%s D=%d %s causal=%d B=%d H=%d/%d Nq=%d Nk=%d cfg=%s: %.3f ms %.1f TFLOP/s "
               "relL2=%.2e lseErr=%.1e nonfinite=%zu lsebad=%zu/%d compile=%.2fs spill=%d [%s]\n",
               ok ? "PASS" : "FAIL", D, bf16 ? "bf16" : "fp16", causal, B, H, HK, NQ, NK,
               argv[ci], med, med > 0 ? flops / (med * 1e-3) * 1e-12 : 0.0, rel, lerr,
               nonfinite, lnan, lbad, tc, spill, regs);
        fflush(stdout);
        free(ms);
        clReleaseKernel(kern);
        clReleaseProgram(prog);
    }
    return 0;
}
