/* The CPU's measured fp32 FMA throughput, the ceiling that
 * bench/cpu_numpy_peer.py reports attention against.
 *
 * Each of T threads (default 2, the CI machine's cores) runs independent
 * FMA chains on registers, enough of them (12) to hide the FMA latency
 * (4 cycles on Zen 4 and Skylake) on two pipes; nothing touches memory in
 * the loop. Both ISAs the CPU has are measured, 256-bit (AVX2 + FMA) and
 * 512-bit (AVX-512F), since some cores (Zen 4) split 512-bit FMAs into two
 * 256-bit halves and peak at the same rate either way. Wall clock around
 * all threads, best of --rounds (the peak is what the core can do; a
 * shared machine only ever lowers it), the median beside it.
 *
 * Output, one line per ISA:
 *   fma_peak isa=avx512 threads=2 best_gflops=... median_gflops=...
 *
 * usage: flashcl-fma-peak [--threads T] [--rounds R] [--iters N] */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHAINS 12

typedef struct job {
    long iters;
    int wide; /* 1: 512-bit, 0: 256-bit */
    float sink;
} job;

__attribute__((target("avx2,fma"))) static float chains_256(long iters)
{
    __m256 acc[CHAINS];
    const __m256 mul = _mm256_set1_ps(0.999999f);
    const __m256 add = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; ++i)
        acc[i] = _mm256_set1_ps((float)i);
    for (long n = 0; n < iters; ++n)
        for (int i = 0; i < CHAINS; ++i)
            acc[i] = _mm256_fmadd_ps(acc[i], mul, add);
    __m256 sum = acc[0];
    for (int i = 1; i < CHAINS; ++i)
        sum = _mm256_add_ps(sum, acc[i]);
    float out[8];
    _mm256_storeu_ps(out, sum);
    return out[0];
}

__attribute__((target("avx512f"))) static float chains_512(long iters)
{
    __m512 acc[CHAINS];
    const __m512 mul = _mm512_set1_ps(0.999999f);
    const __m512 add = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; ++i)
        acc[i] = _mm512_set1_ps((float)i);
    for (long n = 0; n < iters; ++n)
        for (int i = 0; i < CHAINS; ++i)
            acc[i] = _mm512_fmadd_ps(acc[i], mul, add);
    __m512 sum = acc[0];
    for (int i = 1; i < CHAINS; ++i)
        sum = _mm512_add_ps(sum, acc[i]);
    return _mm512_reduce_add_ps(sum);
}

static void *run_job(void *arg)
{
    job *j = arg;
    j->sink = j->wide ? chains_512(j->iters) : chains_256(j->iters);
    return NULL;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* GFLOP/s of one round on `threads` threads; < 0 when a thread failed. */
static double one_round(int threads, int wide, long iters)
{
    pthread_t tid[64];
    job jobs[64];
    const double start = now_s();
    int started = 0;
    for (; started < threads; ++started) {
        jobs[started] = (job){iters, wide, 0};
        if (pthread_create(&tid[started], NULL, run_job, &jobs[started]))
            break;
    }
    for (int t = 0; t < started; ++t)
        pthread_join(tid[t], NULL);
    const double seconds = now_s() - start;
    if (started < threads)
        return -1;
    const double lanes = wide ? 16 : 8;
    return 2.0 * lanes * CHAINS * (double)iters * threads / seconds * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int measure(const char *isa, int threads, int wide, int rounds,
                   long iters)
{
    double gflops[64];
    for (int r = 0; r < rounds; ++r)
        if ((gflops[r] = one_round(threads, wide, iters)) < 0) {
            fprintf(stderr, "fma_peak: cannot start %d threads\n", threads);
            return 1;
        }
    qsort(gflops, (size_t)rounds, sizeof gflops[0], cmp_double);
    printf("fma_peak isa=%s threads=%d best_gflops=%.1f median_gflops=%.1f\n",
           isa, threads, gflops[rounds - 1], gflops[rounds / 2]);
    return 0;
}

static long arg_long(int argc, char **argv, const char *name, long fallback,
                     long lo, long hi)
{
    for (int i = 1; i + 1 < argc; ++i)
        if (!strcmp(argv[i], name)) {
            char *end = NULL;
            long v = strtol(argv[i + 1], &end, 10);
            if (*end || v < lo || v > hi) {
                fprintf(stderr, "fma_peak: %s must be in %ld..%ld\n", name,
                        lo, hi);
                exit(2);
            }
            return v;
        }
    return fallback;
}

int main(int argc, char **argv)
{
    const int threads = (int)arg_long(argc, argv, "--threads", 2, 1, 64);
    const int rounds = (int)arg_long(argc, argv, "--rounds", 7, 1, 64);
    /* 5e7 iterations of 12 FMAs: about 0.25 s per round at 2.6 GHz. */
    const long iters = arg_long(argc, argv, "--iters", 50000000, 1000,
                                100000000000L);
    __builtin_cpu_init();
    int rc = 0, any = 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        rc |= measure("avx2", threads, 0, rounds, iters);
        any = 1;
    }
    if (__builtin_cpu_supports("avx512f")) {
        rc |= measure("avx512", threads, 1, rounds, iters);
        any = 1;
    }
    if (!any) {
        fprintf(stderr, "fma_peak: this CPU has neither AVX2+FMA nor "
                        "AVX-512F\n");
        return 1;
    }
    return rc;
}
