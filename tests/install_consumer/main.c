/* A program outside the build tree that finds an installed flashcl (CMake
 * package or pkg-config) and uses its public cl_mem API the way a consumer
 * does: it makes its own OpenCL buffers with clCreateBuffer, so it links
 * against OpenCL itself (pkg-config must list OpenCL in Requires, not
 * Requires.private), runs flashcl_attention_forward on them on its own
 * queue and checks O and LSE against a small host computation of its own.
 * Then the host-memory call on the same problem. */
#include <flashcl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 1, H = 2, NQ = 3, NK = 5, D = 4 };
#define Q_ELEMS (B * NQ * H * D)
#define KV_ELEMS (B * NK * H * D)

/* Packed BNHD: [batch, seq, heads, dim]. */
static size_t at(int b, int s, int h, int d, int seqlen)
{
    return (((size_t)b * seqlen + s) * H + h) * D + d;
}

static void host_attention(const float *q, const float *k, const float *v,
                           double *o, double *lse)
{
    const double scale = 1.0 / sqrt((double)D);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < NQ; i++) {
                double s[NK], m = -INFINITY, sum = 0.0;
                for (int j = 0; j < NK; j++) {
                    s[j] = 0.0;
                    for (int d = 0; d < D; d++)
                        s[j] += (double)q[at(b, i, h, d, NQ)] *
                                k[at(b, j, h, d, NK)];
                    s[j] *= scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (int j = 0; j < NK; j++)
                    sum += exp(s[j] - m);
                for (int d = 0; d < D; d++) {
                    double acc = 0.0;
                    for (int j = 0; j < NK; j++)
                        acc += exp(s[j] - m) * v[at(b, j, h, d, NK)];
                    o[at(b, i, h, d, NQ)] = acc / sum;
                }
                lse[((size_t)b * H + h) * NQ + i] = m + log(sum);
            }
}

static int check(const char *what, const float *o, const float *lse,
                 const double *ref_o, const double *ref_lse)
{
    for (size_t e = 0; e < Q_ELEMS; e++)
        if (!(fabs(o[e] - ref_o[e]) <= 1e-5)) {
            fprintf(stderr, "%s: O[%zu] = %.9g, expected %.9g\n", what, e,
                    (double)o[e], ref_o[e]);
            return 1;
        }
    for (size_t r = 0; r < B * H * NQ; r++)
        if (!(fabs(lse[r] - ref_lse[r]) <= 1e-5)) {
            fprintf(stderr, "%s: LSE[%zu] = %.9g, expected %.9g\n", what, r,
                    (double)lse[r], ref_lse[r]);
            return 1;
        }
    return 0;
}

static cl_mem buffer(cl_context context, size_t bytes, void *init)
{
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(context,
                                CL_MEM_READ_WRITE |
                                    (init ? CL_MEM_COPY_HOST_PTR : 0),
                                bytes, init, &err);
    if (err != CL_SUCCESS || !mem) {
        fprintf(stderr, "clCreateBuffer(%zu bytes): %d\n", bytes, (int)err);
        exit(1);
    }
    return mem;
}

int main(void)
{
    if (flashcl_version_number() != FLASHCL_VERSION_NUMBER) {
        fprintf(stderr, "header %s, library %s\n", FLASHCL_VERSION_STRING,
                flashcl_version_string());
        return 1;
    }
    flashcl_context *ctx;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "%s\n", flashcl_last_create_error());
        return 1;
    }

    float q[Q_ELEMS], k[KV_ELEMS], v[KV_ELEMS];
    unsigned x = 12345;
    float *all[3] = {q, k, v};
    size_t counts[3] = {Q_ELEMS, KV_ELEMS, KV_ELEMS};
    for (int t = 0; t < 3; t++)
        for (size_t e = 0; e < counts[t]; e++) {
            x = x * 1103515245u + 12345u;
            all[t][e] = (float)((x >> 8) % 2001) / 1000.0f - 1.0f;
        }
    double ref_o[Q_ELEMS], ref_lse[B * H * NQ];
    host_attention(q, k, v, ref_o, ref_lse);

    /* The consumer's own queue and buffers; O and LSE start as NaN. */
    cl_context context = flashcl_context_cl_context(ctx);
    cl_device_id device = flashcl_context_device(ctx);
    cl_int err = CL_SUCCESS;
    cl_command_queue queue = clCreateCommandQueue(context, device, 0, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateCommandQueue: %d\n", (int)err);
        return 1;
    }
    float o[Q_ELEMS], lse[B * H * NQ];
    memset(o, 0xFF, sizeof o);
    memset(lse, 0xFF, sizeof lse);
    cl_mem q_mem = buffer(context, sizeof q, q);
    cl_mem k_mem = buffer(context, sizeof k, k);
    cl_mem v_mem = buffer(context, sizeof v, v);
    cl_mem o_mem = buffer(context, sizeof o, o);
    cl_mem lse_mem = buffer(context, sizeof lse, lse);

    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = B;
    d.heads_q = H;
    d.seqlen_q = NQ;
    d.seqlen_k = NK;
    d.head_dim = D;
    d.q.buffer = q_mem;
    d.k.buffer = k_mem;
    d.v.buffer = v_mem;
    d.o.buffer = o_mem;
    d.lse.buffer = lse_mem;
    cl_event done = NULL;
    flashcl_status s = flashcl_attention_forward(ctx, queue, &d, 0, NULL, &done);
    if (s != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl_attention_forward: %s: %s\n",
                flashcl_status_string(s), flashcl_context_last_error(ctx));
        return 1;
    }
    err = clWaitForEvents(1, &done);
    err |= clEnqueueReadBuffer(queue, o_mem, CL_TRUE, 0, sizeof o, o, 0, NULL,
                               NULL);
    err |= clEnqueueReadBuffer(queue, lse_mem, CL_TRUE, 0, sizeof lse, lse, 0,
                               NULL, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "waiting for / reading the result failed\n");
        return 1;
    }
    int failed = check("flashcl_attention_forward", o, lse, ref_o, ref_lse);

    memset(o, 0xFF, sizeof o);
    memset(lse, 0xFF, sizeof lse);
    s = flashcl_attention_forward_host(ctx, &d, q, k, v, o, lse);
    if (s != FLASHCL_SUCCESS) {
        fprintf(stderr, "flashcl_attention_forward_host: %s: %s\n",
                flashcl_status_string(s), flashcl_context_last_error(ctx));
        return 1;
    }
    failed |= check("flashcl_attention_forward_host", o, lse, ref_o, ref_lse);

    clReleaseEvent(done);
    cl_mem mems[5] = {q_mem, k_mem, v_mem, o_mem, lse_mem};
    for (int m = 0; m < 5; m++)
        clReleaseMemObject(mems[m]);
    clReleaseCommandQueue(queue);
    flashcl_context_release(ctx);
    if (failed)
        return 1;
    printf("installed flashcl %s works (cl_mem and host calls)\n",
           flashcl_version_string());
    return 0;
}
