/* Causal attention over one long sequence across MPI ranks, checked
 * against the single-device call.
 *
 *   mpirun -np 4 examples/cp_ring [seqlen_total]     (default 65536)
 *
 * Each rank makes its zig-zag shard of Q, K and V (the values depend only
 * on the row's position, so every rank can also make the whole sequence),
 * runs flashcl_cp_attention_forward in ring mode, and then, on the
 * single-device call over the whole sequence, compares its rows. fp32,
 * 4 heads, head dim 64. The single-device call is the slow part on a CPU:
 * pass a smaller length there (ctest runs 1024 on 4 ranks). */
#include <flashcl_mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HEADS = 4, DIM = 64 };

/* Element (row, h, d) of Q, K or V (which = 0, 1, 2): a function of the
 * position alone. */
static float value(int which, int64_t row, int h, int d)
{
    const double x = (double)(row * 131 + h * 17 + d * 7 + which * 1000);
    return (float)sin(x * 0.618);
}

static float *make(int which, int64_t first, int64_t rows)
{
    float *t = malloc((size_t)rows * HEADS * DIM * sizeof *t);
    for (int64_t r = 0; r < rows; ++r)
        for (int h = 0; h < HEADS; ++h)
            for (int d = 0; d < DIM; ++d)
                t[(r * HEADS + h) * DIM + d] = value(which, first + r, h, d);
    return t;
}

static cl_mem buffer(flashcl_context *ctx, const float *host, size_t floats)
{
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx),
                              CL_MEM_READ_WRITE |
                                  (host ? CL_MEM_COPY_HOST_PTR : 0),
                              floats * sizeof(float), (void *)host, &err);
    return err == CL_SUCCESS ? m : NULL;
}

/* Q, K, V, O of `rows` rows starting at the rows `first` names. */
static flashcl_attention_desc call(flashcl_context *ctx, const int64_t *first,
                                   int chunks, int64_t rows)
{
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = 1;
    d.heads_q = HEADS;
    d.head_dim = DIM;
    d.seqlen_q = d.seqlen_k = rows * chunks;
    d.causal = 1;
    const size_t floats = (size_t)rows * chunks * HEADS * DIM;
    cl_mem *views[] = {&d.q.buffer, &d.k.buffer, &d.v.buffer};
    for (int which = 0; which < 3; ++which) {
        float *all = malloc(floats * sizeof *all);
        for (int c = 0; c < chunks; ++c) {
            float *part = make(which, first[c], rows);
            memcpy(all + (size_t)c * rows * HEADS * DIM, part,
                   (size_t)rows * HEADS * DIM * sizeof *part);
            free(part);
        }
        *views[which] = buffer(ctx, all, floats);
        free(all);
    }
    d.o.buffer = buffer(ctx, NULL, floats);
    return d;
}

static void release(flashcl_attention_desc *d)
{
    clReleaseMemObject(d->q.buffer);
    clReleaseMemObject(d->k.buffer);
    clReleaseMemObject(d->v.buffer);
    clReleaseMemObject(d->o.buffer);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, ranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    flashcl_cp_desc cp = FLASHCL_CP_DESC_INIT;
    cp.mode = FLASHCL_CP_RING;
    cp.layout = FLASHCL_CP_ZIGZAG;
    cp.seqlen_total = argc > 1 ? atoll(argv[1]) : 65536;
    flashcl_context *ctx = NULL;
    int64_t first[2], rows;
    const int chunks = flashcl_cp_shard_rows(&cp, rank, ranks, first, &rows);
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS || !chunks) {
        fprintf(stderr, "rank %d: no device, or %lld rows do not split into "
                "%d zig-zag shards\n", rank, (long long)cp.seqlen_total, ranks);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    flashcl_attention_desc mine = call(ctx, first, chunks, rows);
    double start = MPI_Wtime();
    flashcl_status st =
        flashcl_cp_attention_forward(MPI_COMM_WORLD, ctx, NULL, &mine, &cp);
    const double seconds = MPI_Wtime() - start;
    if (st != FLASHCL_SUCCESS) {
        fprintf(stderr, "rank %d: %s\n", rank, flashcl_cp_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const size_t floats = (size_t)rows * chunks * HEADS * DIM;
    float *got = malloc(floats * sizeof *got);
    clEnqueueReadBuffer(flashcl_context_queue(ctx), mine.o.buffer, CL_TRUE, 0,
                        floats * sizeof *got, got, 0, NULL, NULL);

    const int64_t zero = 0;
    flashcl_attention_desc whole = call(ctx, &zero, 1, cp.seqlen_total);
    flashcl_attention_forward(ctx, NULL, &whole, 0, NULL, NULL);
    double worst = 0;
    float *row = malloc((size_t)HEADS * DIM * sizeof *row);
    for (int c = 0; c < chunks; ++c)
        for (int64_t r = 0; r < rows; ++r) {
            const size_t at = (size_t)(first[c] + r) * HEADS * DIM;
            clEnqueueReadBuffer(flashcl_context_queue(ctx), whole.o.buffer,
                                CL_TRUE, at * sizeof *row,
                                (size_t)HEADS * DIM * sizeof *row, row, 0,
                                NULL, NULL);
            const float *mine_row = got + ((size_t)c * rows + r) * HEADS * DIM;
            for (int i = 0; i < HEADS * DIM; ++i)
                worst = fmax(worst, fabs(mine_row[i] - row[i]));
        }
    double all_worst = 0, all_seconds = 0;
    MPI_Reduce(&worst, &all_worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&seconds, &all_seconds, 1, MPI_DOUBLE, MPI_MAX, 0,
               MPI_COMM_WORLD);
    if (rank == 0)
        printf("%lld tokens on %d ranks (ring, zig-zag): %.3f s; max |O - "
               "single device| %.3g\n",
               (long long)cp.seqlen_total, ranks, all_seconds, all_worst);
    free(row);
    free(got);
    release(&mine);
    release(&whole);
    flashcl_context_release(ctx);
    MPI_Finalize();
    return all_worst <= 1e-5 || rank != 0 ? 0 : 1;
}
