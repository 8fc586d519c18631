/* The ring's communication against its compute (issue 46): how much of a
 * flashcl_cp_attention_forward in ring mode the K/V exchange costs, and
 * how much of it hides behind the attention.
 *
 *   mpirun -np R flashcl-cp-bench [seqlen_total] [heads] [head_dim]
 *                                 [causal] [reps] [fp32|bf16]
 *
 * Five timings per rank, interleaved, each the median of `reps` calls
 * after one warm-up, every call started together (MPI_Barrier) and timed on the
 * host (MPI_Wtime: the ring blocks until its result is in host-visible
 * memory, so the host clock is the one that sees the exchange):
 *   ring      the call itself (fp32 by default, or bf16 as a GPU ring
 *             runs; zig-zag shards when causal);
 *   compute   what the ring computes, without the exchange: each step's
 *             upload of a K/V block and its chunk calls, as the ring
 *             makes them;
 *   lockstep  the same with a barrier after each step: the ring's
 *             exchange makes each step wait for the previous rank, so
 *             lockstep - compute is what that waiting costs when the
 *             ranks' steps take unequal time (a shared machine);
 *   merge     the ring's final flashcl_combine_partials of its
 *             ranks * chunks partials;
 *   exchange  the ring's sends and receives alone (ranks - 1 steps of one
 *             K/V block each way).
 * Rank 0 prints the slowest rank's figures (the ring waits for it),
 * exposed = ring - compute - merge (what the ring costs beyond its
 * attention and merge: the exchange it did not hide, and its own work:
 * reading the shard's K/V, the partials' buffers, the agreement), and
 * overlap = 1 - exposed / exchange: 1 when the exchange hides entirely,
 * 0 when the ring costs the whole exchange on top of the compute
 * (negative when its own work costs more than the exchange).
 *
 *   flashcl-cp-bench staging [seqlen_total] [heads] [head_dim] [causal]
 *                            [reps] [ranks] [fp32|bf16]
 *
 * One process standing in for rank 0 of `ranks` (default 2) on one
 * device: what bounds a ring across GPUs that pass K/V through host
 * memory. Per ring step, each the median of `reps` after a warm-up:
 *   staging   the host staging a rank does for one K/V block: its read
 *             to host memory (clEnqueueReadBuffer) and its write back
 *             (clEnqueueWriteBuffer), timed by the host clock and by the
 *             two commands' device-side profiling events;
 *   pair      the attention of one chunk pair (a query chunk against a
 *             key chunk, both of a chunk's rows), host clock;
 *   step      the attention of one ring step: the pairs rank 0 computes
 *             against rank `ranks - 1`'s block, as the ring does, host
 *             clock.
 * It prints staging / step: the share of a step the host staging costs
 * where nothing hides it, which bounds the efficiency of ranks on
 * separate devices (two ranks sharing one GPU see the same staging). */
#include <flashcl_mpi.h>

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct setup {
    int rank, ranks, chunks;
    int64_t n, rows, first[2];
    size_t kv_bytes;
    flashcl_cp_desc cp;
    flashcl_attention_desc shard;
    cl_mem kv_block, o_part, lse_part;
    cl_mem o_parts, lse_parts; /* the merge's ranks * chunks partials */
} setup;

static flashcl_context *ctx;

/* The call dtype: fp32, or bf16 as a ring on GPUs runs (the tensor-core
 * kernels take 16-bit storage only). */
static flashcl_dtype call_dtype = FLASHCL_DTYPE_FP32;

static size_t call_elem(void)
{
    return call_dtype == FLASHCL_DTYPE_BF16 ? 2 : 4;
}

/* Filled with sin(0.37 i) in the call dtype (bf16: fp32's high half). */
static cl_mem device_buffer(size_t bytes)
{
    cl_int err;
    unsigned char *fill = malloc(bytes);
    const size_t elem = call_elem();
    for (size_t i = 0; i < bytes / elem; ++i) {
        const float value = (float)sin((double)i * 0.37);
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        if (elem == 2)
            bits >>= 16;
        memcpy(fill + i * elem, &bits, elem); /* x86: little-endian */
    }
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx),
                              CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes,
                              fill, &err);
    free(fill);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateBuffer of %zu bytes: %d\n", bytes, err);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return m;
}

static int compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int count)
{
    qsort(v, (size_t)count, sizeof *v, compare_doubles);
    return count % 2 ? v[count / 2] : 0.5 * (v[count / 2 - 1] + v[count / 2]);
}

/* One step's calls: the shard's query chunks against the key chunks of
 * rank `source`, skipping the pairs the causal band leaves empty, as the
 * ring does. */
static void compute_step(const setup *s, int source)
{
    int64_t k_first[2], k_rows;
    const int k_chunks =
        flashcl_cp_shard_rows(&s->cp, source, s->ranks, k_first, &k_rows);
    const flashcl_attention_desc *d = &s->shard;
    const int64_t row = d->heads_q * d->head_dim;
    for (int kc = 0; kc < k_chunks; ++kc)
        for (int qc = 0; qc < s->chunks; ++qc) {
            if (d->causal && k_first[kc] > s->first[qc] + s->rows - 1)
                continue;
            flashcl_attention_desc c = *d;
            c.seqlen_q = c.seqlen_k = s->rows;
            c.causal_align = FLASHCL_CAUSAL_ABSOLUTE;
            c.q_position = s->first[qc];
            c.k_position = k_first[kc];
            c.q.offset = (size_t)(qc * s->rows * row) * call_elem();
            c.q.stride_batch = (size_t)(s->n * row);
            c.q.stride_seq = (size_t)row;
            c.q.stride_head = (size_t)d->head_dim;
            c.q.stride_dim = 1;
            c.k = c.q;
            c.k.buffer = s->kv_block;
            c.k.offset = (size_t)(kc * s->rows * row) * call_elem();
            c.v = c.k;
            c.v.offset += s->kv_bytes / 2;
            c.o = c.q;
            c.o.buffer = s->o_part;
            memset(&c.lse, 0, sizeof c.lse);
            c.lse.buffer = s->lse_part;
            if (flashcl_attention_forward(ctx, NULL, &c, 0, NULL, NULL) !=
                FLASHCL_SUCCESS) {
                fprintf(stderr, "rank %d: %s\n", s->rank,
                        flashcl_context_last_error(ctx));
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
}

/* lockstep: a barrier after each step, as the ring's exchange makes each
 * step wait for the previous rank's */
static void compute_alone(const setup *s, void *host_block, bool lockstep)
{
    for (int step = 0; step < s->ranks; ++step) {
        if (step > 0)
            clEnqueueWriteBuffer(flashcl_context_queue(ctx), s->kv_block,
                                 CL_TRUE, 0, s->kv_bytes, host_block, 0, NULL,
                                 NULL);
        compute_step(s, (s->rank + s->ranks - step) % s->ranks);
        clFinish(flashcl_context_queue(ctx));
        if (lockstep)
            MPI_Barrier(MPI_COMM_WORLD);
    }
}

static void exchange_alone(const setup *s, void *blocks[2])
{
    const int next = (s->rank + 1) % s->ranks;
    const int prev = (s->rank + s->ranks - 1) % s->ranks;
    for (int step = 0; step + 1 < s->ranks; ++step) {
        MPI_Request moves[2];
        MPI_Isend(blocks[step % 2], (int)s->kv_bytes, MPI_BYTE, next, step,
                  MPI_COMM_WORLD, &moves[0]);
        MPI_Irecv(blocks[1 - step % 2], (int)s->kv_bytes, MPI_BYTE, prev, step,
                  MPI_COMM_WORLD, &moves[1]);
        MPI_Waitall(2, moves, MPI_STATUSES_IGNORE);
    }
}

static void ring_call(const setup *s)
{
    if (flashcl_cp_attention_forward(MPI_COMM_WORLD, ctx, NULL, &s->shard,
                                     &s->cp) != FLASHCL_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", s->rank, flashcl_cp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* as_ranks > 0: rank 0 of as_ranks ranks, whatever MPI runs (staging) */
static setup make_setup(int64_t total, int64_t heads, int64_t dim, int causal,
                        int as_ranks)
{
    setup s;
    memset(&s, 0, sizeof s);
    MPI_Comm_rank(MPI_COMM_WORLD, &s.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &s.ranks);
    if (as_ranks > 0) {
        s.rank = 0;
        s.ranks = as_ranks;
    }
    s.cp = (flashcl_cp_desc)FLASHCL_CP_DESC_INIT;
    s.cp.mode = FLASHCL_CP_RING;
    s.cp.layout = causal ? FLASHCL_CP_ZIGZAG : FLASHCL_CP_CONTIGUOUS;
    s.cp.seqlen_total = total;
    s.chunks = flashcl_cp_shard_rows(&s.cp, s.rank, s.ranks, s.first, &s.rows);
    if (s.chunks == 0) {
        if (s.rank == 0)
            fprintf(stderr, "seqlen_total %lld does not split into %d\n",
                    (long long)total, s.ranks);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    s.n = s.rows * s.chunks;
    const size_t tensor = (size_t)(s.n * heads * dim) * call_elem();
    s.kv_bytes = 2 * tensor;
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.dtype = call_dtype;
    d.batch = 1;
    d.heads_q = heads;
    d.head_dim = dim;
    d.seqlen_q = d.seqlen_k = s.n;
    d.causal = causal;
    d.q.buffer = device_buffer(tensor);
    d.k.buffer = device_buffer(tensor);
    d.v.buffer = device_buffer(tensor);
    d.o.buffer = device_buffer(tensor);
    s.shard = d;
    s.kv_block = device_buffer(s.kv_bytes);
    s.o_part = device_buffer(tensor);
    s.lse_part = device_buffer((size_t)(s.n * heads) * 4);
    const size_t parts = (size_t)s.ranks * (size_t)s.chunks;
    s.o_parts = device_buffer(tensor * parts);
    s.lse_parts = device_buffer((size_t)(s.n * heads) * 4 * parts);
    return s;
}

typedef void (*timed_fn)(const setup *s, void *arg);

static double once(const setup *s, timed_fn fn, void *arg)
{
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    fn(s, arg);
    return MPI_Wtime() - t0;
}

/* The timings interleaved rep by rep, so that a shared machine's
 * drift falls on all three alike: the medians of this rank, the slowest
 * rank's on rank 0, in ms. */
enum { TIMINGS = 5 };

static void time_all(const setup *s, int reps, const timed_fn fn[TIMINGS],
                     void *const arg[TIMINGS], double slowest[TIMINGS])
{
    double *t = malloc(sizeof *t * (size_t)reps * TIMINGS), mine[TIMINGS];
    for (int k = 0; k < TIMINGS; ++k)
        fn[k](s, arg[k]); /* warm-up: compiles, first touches */
    for (int i = 0; i < reps; ++i)
        for (int k = 0; k < TIMINGS; ++k)
            t[k * reps + i] = once(s, fn[k], arg[k]);
    for (int k = 0; k < TIMINGS; ++k)
        mine[k] = median(t + k * reps, reps) * 1e3;
    free(t);
    MPI_Reduce(mine, slowest, TIMINGS, MPI_DOUBLE, MPI_MAX, 0,
               MPI_COMM_WORLD);
}

static void run_ring(const setup *s, void *arg)
{
    (void)arg;
    ring_call(s);
}

static void run_compute(const setup *s, void *arg)
{
    compute_alone(s, ((void **)arg)[0], false);
}

static void run_lockstep(const setup *s, void *arg)
{
    compute_alone(s, ((void **)arg)[0], true);
}

/* the ring's final merge: ranks * chunks partials of the shard's rows */
static void run_merge(const setup *s, void *arg)
{
    (void)arg;
    const flashcl_attention_desc *d = &s->shard;
    flashcl_combine_desc m = FLASHCL_COMBINE_DESC_INIT;
    m.num_partials = (int64_t)s->ranks * s->chunks;
    m.batch = 1;
    m.heads = d->heads_q;
    m.seqlen_q = s->n;
    m.head_dim_v = d->head_dim;
    m.dtype = m.partial_dtype = call_dtype; /* as the ring merges */
    m.o_partial.buffer = s->o_parts;
    m.o_partial_stride = (size_t)(s->n * d->heads_q * d->head_dim);
    m.lse_partial.buffer = s->lse_parts;
    m.lse_partial_stride = (size_t)(s->n * d->heads_q);
    m.o = d->o;
    if (flashcl_combine_partials(ctx, NULL, &m, 0, NULL, NULL) !=
            FLASHCL_SUCCESS ||
        clFinish(flashcl_context_queue(ctx)) != CL_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", s->rank,
                flashcl_context_last_error(ctx));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

static void run_exchange(const setup *s, void *arg)
{
    exchange_alone(s, (void **)arg);
}

static double seconds_between(cl_event e)
{
    cl_ulong start = 0, end = 0;
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_START, sizeof start,
                            &start, NULL);
    clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof end, &end,
                            NULL);
    clReleaseEvent(e);
    return end > start ? (double)(end - start) * 1e-9 : 0.0;
}

/* One K/V block to host memory and back, blocking; the two commands'
 * device-side seconds in dev[0] (read) and dev[1] (write). */
static void stage_block(const setup *s, void *host, double dev[2])
{
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_event read, write;
    if (clEnqueueReadBuffer(queue, s->kv_block, CL_TRUE, 0, s->kv_bytes, host,
                            0, NULL, &read) != CL_SUCCESS ||
        clEnqueueWriteBuffer(queue, s->kv_block, CL_TRUE, 0, s->kv_bytes,
                             host, 0, NULL, &write) != CL_SUCCESS) {
        fprintf(stderr, "staging a K/V block of %zu bytes failed\n",
                s->kv_bytes);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    dev[0] = seconds_between(read);
    dev[1] = seconds_between(write);
}

/* One chunk pair: query chunk 0 against the block's key chunk 0, no
 * causal skip (the non-diagonal pairs' cost). */
static void one_pair(const setup *s)
{
    setup one = *s; /* a ring of one rank whose one chunk is s's first */
    one.chunks = 1;
    one.ranks = 1;
    one.first[0] = 0;
    one.shard.causal = 0;
    one.cp.layout = FLASHCL_CP_CONTIGUOUS;
    one.cp.seqlen_total = s->rows;
    compute_step(&one, 0);
    clFinish(flashcl_context_queue(ctx));
}

static int staging_main(int argc, char **argv)
{
    const int64_t total = argc > 1 ? atoll(argv[1]) : 8192;
    const int64_t heads = argc > 2 ? atoll(argv[2]) : 8;
    const int64_t dim = argc > 3 ? atoll(argv[3]) : 64;
    const int causal = argc > 4 ? atoi(argv[4]) : 0;
    const int reps = argc > 5 ? atoi(argv[5]) : 7;
    const int ranks = argc > 6 ? atoi(argv[6]) : 2;
    const char *dtype = argc > 7 ? argv[7] : "fp32";
    if (reps < 1 || ranks < 2 ||
        (strcmp(dtype, "fp32") != 0 && strcmp(dtype, "bf16") != 0)) {
        fprintf(stderr, "staging: reps >= 1, ranks >= 2, dtype fp32 or bf16\n");
        return 2;
    }
    call_dtype = strcmp(dtype, "bf16") == 0 ? FLASHCL_DTYPE_BF16
                                            : FLASHCL_DTYPE_FP32;
    setup s = make_setup(total, heads, dim, causal, ranks);
    void *host = malloc(s.kv_bytes);
    double *t = malloc(sizeof *t * (size_t)reps * 5), dev[2];
    for (int i = -1; i < reps; ++i) { /* i = -1: the warm-up */
        double t0 = MPI_Wtime();
        stage_block(&s, host, dev);
        const double staged = MPI_Wtime() - t0;
        t0 = MPI_Wtime();
        one_pair(&s);
        const double pair = MPI_Wtime() - t0;
        t0 = MPI_Wtime();
        compute_step(&s, ranks - 1);
        clFinish(flashcl_context_queue(ctx));
        const double step = MPI_Wtime() - t0;
        if (i < 0)
            continue;
        const double row[5] = {staged, dev[0], dev[1], pair, step};
        for (int k = 0; k < 5; ++k)
            t[k * reps + i] = row[k] * 1e3;
    }
    double ms[5];
    for (int k = 0; k < 5; ++k)
        ms[k] = median(t + k * reps, reps);
    char device[128] = "";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof device,
                    device, NULL);
    printf("mode,as_ranks,seqlen_total,heads,head_dim,causal,dtype,block_MiB,"
           "staging_host_ms,read_dev_ms,write_dev_ms,pair_ms,step_ms,"
           "staging_per_step_host,staging_per_step_dev,device\n");
    printf("staging,%d,%lld,%lld,%lld,%d,%s,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,"
           "%.3f,%.3f,%s\n",
           ranks, (long long)total, (long long)heads, (long long)dim, causal,
           dtype,
           (double)s.kv_bytes / 1048576.0, ms[0], ms[1], ms[2], ms[3], ms[4],
           ms[4] > 0 ? ms[0] / ms[4] : 0, ms[4] > 0 ? (ms[1] + ms[2]) / ms[4] : 0,
           device);
    free(host);
    free(t);
    cl_mem all[] = {s.shard.q.buffer, s.shard.k.buffer, s.shard.v.buffer,
                    s.shard.o.buffer, s.kv_block, s.o_part, s.lse_part,
                    s.o_parts, s.lse_parts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        clReleaseMemObject(all[i]);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "staging") == 0) {
        int rc = 2;
        if (flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS) {
            rc = staging_main(argc - 1, argv + 1);
            flashcl_context_release(ctx);
        } else {
            fprintf(stderr, "no OpenCL device: %s\n",
                    flashcl_last_create_error());
        }
        MPI_Finalize();
        return rc;
    }
    const int64_t total = argc > 1 ? atoll(argv[1]) : 8192;
    const int64_t heads = argc > 2 ? atoll(argv[2]) : 8;
    const int64_t dim = argc > 3 ? atoll(argv[3]) : 64;
    const int causal = argc > 4 ? atoi(argv[4]) : 0;
    const int reps = argc > 5 ? atoi(argv[5]) : 5;
    if (argc > 6 && strcmp(argv[6], "bf16") == 0)
        call_dtype = FLASHCL_DTYPE_BF16;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "no OpenCL device: %s\n", flashcl_last_create_error());
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    setup s = make_setup(total, heads, dim, causal, 0);
    void *blocks[2] = {calloc(1, s.kv_bytes), calloc(1, s.kv_bytes)};
    const timed_fn fn[TIMINGS] = {run_ring, run_compute, run_lockstep,
                                  run_merge, run_exchange};
    void *const arg[TIMINGS] = {NULL, blocks, blocks, NULL, blocks};
    double ms[TIMINGS];
    time_all(&s, reps, fn, arg, ms);
    const double ring = ms[0], compute = ms[1], lockstep = ms[2],
                 merge = ms[3], exchange = ms[4];
    if (s.rank == 0) {
        char device[128] = "";
        clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME,
                        sizeof device, device, NULL);
        printf("ranks,seqlen_total,heads,head_dim,causal,block_MiB,ring_ms,"
               "compute_ms,lockstep_ms,merge_ms,exchange_ms,exposed_ms,"
               "exchange_share,"
               "overlap,dtype,device\n");
        const double exposed = ring - compute - merge;
        const double overlap = exchange > 0 ? 1 - exposed / exchange : 0;
        printf("%d,%lld,%lld,%lld,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.3f,"
               "%.2f,%s,%s\n",
               s.ranks, (long long)total, (long long)heads, (long long)dim,
               causal, (double)s.kv_bytes / 1048576.0, ring, compute,
               lockstep, merge, exchange, exposed, exchange / ring, overlap,
               call_dtype == FLASHCL_DTYPE_BF16 ? "bf16" : "fp32", device);
    }
    free(blocks[0]);
    free(blocks[1]);
    cl_mem all[] = {s.shard.q.buffer, s.shard.k.buffer, s.shard.v.buffer,
                    s.shard.o.buffer, s.kv_block, s.o_part, s.lse_part,
                    s.o_parts, s.lse_parts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        clReleaseMemObject(all[i]);
    flashcl_context_release(ctx);
    MPI_Finalize();
    return 0;
}
