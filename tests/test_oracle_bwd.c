/*
 * Checks the float64 gradient oracle (support/oracle_bwd.c) against finite
 * differences of the forward oracle, one case per variant: the loss is
 * sum(dO . O), and each element of Q, K, V (and each sink logit) is moved
 * by +-h. Needs no OpenCL device. Also checks that FA2's low-precision
 * reference stays near the oracle (it is a yardstick, not a copy).
 */
#include "oracle_bwd.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, HQ = 4, NQ = 5, NK = 7, D = 4, DV = 3 };

typedef struct fd_case {
    const char *name;
    int heads_kv;
    int seqlen_q, seqlen_k;
    int causal, top_left, window, left, right;
    double scale, softcap;
    int alibi, bias, mask, sinks;
} fd_case;

static const fd_case cases[] = {
    {"plain", 4, NQ, NK, 0, 0, 0, 0, 0, 0.6, 0, 0, 0, 0, 0},
    {"causal bottom-right", 4, NQ, NK, 1, 0, 0, 0, 0, 0.6, 0, 0, 0, 0, 0},
    {"causal top-left, Nq > Nk", 4, NK, NQ, 1, 1, 0, 0, 0, 0.6, 0, 0, 0, 0, 0},
    {"window", 4, NQ, NK, 0, 0, 1, 1, 2, 0.6, 0, 0, 0, 0, 0},
    {"alibi", 4, NQ, NK, 0, 0, 0, 0, 0, 0.6, 0, 1, 0, 0, 0},
    {"bias", 4, NQ, NK, 0, 0, 0, 0, 0, 0.6, 0, 0, 1, 0, 0},
    {"mask (a row sees nothing)", 4, NQ, NK, 0, 0, 0, 0, 0, 0.6, 0, 0, 0, 1, 0},
    {"softcap", 4, NQ, NK, 0, 0, 0, 0, 0, 1.7, 0.9, 0, 0, 0, 0},
    {"sinks", 4, NQ, NK, 0, 0, 0, 0, 0, 0.6, 0, 0, 0, 0, 1},
    {"GQA", 2, NQ, NK, 0, 0, 0, 0, 0, 0.6, 0, 0, 0, 0, 0},
    {"MQA, causal, sinks", 1, NQ, NK, 1, 0, 0, 0, 0, 0.6, 0, 0, 0, 0, 1},
    {"negative scale", 4, NQ, NK, 0, 0, 0, 0, 0, -0.8, 0, 0, 0, 0, 0},
    {"scale 0", 4, NQ, NK, 0, 0, 0, 0, 0, 0.0, 0, 0, 0, 0, 0},
};

typedef struct fd_problem {
    oracle_problem p;
    double *q, *k, *v, *d_o, *bias;
    float slopes[HQ], sinks[HQ];
    unsigned char *mask;
} fd_problem;

static double uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (double)(*state >> 8) / (double)(1u << 24) * 2.0 - 1.0;
}

static double *random_array(size_t n, unsigned *state)
{
    double *a = malloc(n * sizeof *a);
    for (size_t e = 0; e < n; ++e)
        a[e] = uniform(state);
    return a;
}

static void packed_view(oracle_view *view, const void *base, size_t heads,
                        size_t seq, size_t dim, flashcl_dtype dtype)
{
    memset(view, 0, sizeof *view);
    view->base = base;
    view->dtype = dtype;
    oracle_packed_strides(FLASHCL_LAYOUT_BHND, heads, seq, dim, view->stride);
}

static void set_variants(fd_problem *f, const fd_case *c, unsigned *state)
{
    oracle_problem *p = &f->p;
    const size_t scores = (size_t)B * HQ * c->seqlen_q * c->seqlen_k;
    if (c->alibi) {
        for (int h = 0; h < HQ; ++h)
            f->slopes[h] = 0.25f * (float)(h + 1);
        p->alibi.base = f->slopes;
        p->alibi.dtype = FLASHCL_DTYPE_FP32;
        p->alibi.stride[1] = 1;
    }
    if (c->bias) {
        f->bias = random_array(scores, state);
        packed_view(&p->bias, f->bias, HQ, c->seqlen_q, c->seqlen_k,
                    FLASHCL_DTYPE_FP64);
    }
    if (c->mask) {
        f->mask = malloc(scores);
        for (size_t e = 0; e < scores; ++e)
            f->mask[e] = uniform(state) > -0.4;
        /* Row 1 of (b 0, h 0) sees no key: its gradients must be 0. */
        memset(f->mask + c->seqlen_k, 0, (size_t)c->seqlen_k);
        packed_view(&p->mask, f->mask, HQ, c->seqlen_q, c->seqlen_k,
                    FLASHCL_DTYPE_FP32);
    }
    if (c->sinks) {
        for (int h = 0; h < HQ; ++h)
            f->sinks[h] = (float)uniform(state);
        p->sinks.base = f->sinks;
        p->sinks.dtype = FLASHCL_DTYPE_FP32;
        p->sinks.stride[1] = 1;
    }
}

static void make_problem(fd_problem *f, const fd_case *c)
{
    memset(f, 0, sizeof *f);
    unsigned state = 12345u;
    oracle_problem *p = &f->p;
    p->batch = B;
    p->heads_q = HQ;
    p->heads_kv = (size_t)c->heads_kv;
    p->seqlen_q = (size_t)c->seqlen_q;
    p->seqlen_k = (size_t)c->seqlen_k;
    p->head_dim = D;
    p->head_dim_v = DV;
    p->scale = c->scale;
    p->causal = c->causal;
    p->causal_align =
        c->top_left ? FLASHCL_CAUSAL_TOP_LEFT : FLASHCL_CAUSAL_BOTTOM_RIGHT;
    p->window = c->window;
    p->window_left = c->left;
    p->window_right = c->right;
    p->softcap = c->softcap;
    f->q = random_array(B * HQ * p->seqlen_q * D, &state);
    f->k = random_array(B * p->heads_kv * p->seqlen_k * D, &state);
    f->v = random_array(B * p->heads_kv * p->seqlen_k * DV, &state);
    f->d_o = random_array(B * HQ * p->seqlen_q * DV, &state);
    packed_view(&p->q, f->q, HQ, p->seqlen_q, D, FLASHCL_DTYPE_FP64);
    packed_view(&p->k, f->k, p->heads_kv, p->seqlen_k, D, FLASHCL_DTYPE_FP64);
    packed_view(&p->v, f->v, p->heads_kv, p->seqlen_k, DV, FLASHCL_DTYPE_FP64);
    set_variants(f, c, &state);
}

static void free_problem(fd_problem *f)
{
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->d_o);
    free(f->bias);
    free(f->mask);
}

static double loss(const fd_problem *f)
{
    const size_t n = B * HQ * f->p.seqlen_q * DV;
    double *o = malloc(n * sizeof *o);
    ck_assert_int_eq(oracle_attention(&f->p, o, NULL, NULL), 0);
    double sum = 0;
    for (size_t e = 0; e < n; ++e)
        sum += f->d_o[e] * o[e];
    free(o);
    return sum;
}

/* Central difference of the loss in *x, against `analytic`. */
static void check_element(fd_problem *f, double *x, double analytic,
                          const char *what, size_t index, const char *name)
{
    const double h = 1e-5, saved = *x;
    *x = saved + h;
    const double up = loss(f);
    *x = saved - h;
    const double down = loss(f);
    *x = saved;
    const double numeric = (up - down) / (2 * h);
    ck_assert_msg(fabs(numeric - analytic) <= 1e-7 * fmax(1, fabs(numeric)),
                  "%s: d%s[%zu] = %.12g, finite difference %.12g", name,
                  what, index, analytic, numeric);
}

static void check_case(const fd_case *c)
{
    fd_problem f;
    make_problem(&f, c);
    const size_t nq = B * HQ * f.p.seqlen_q, nk = B * f.p.heads_kv * f.p.seqlen_k;
    oracle_grads g = {malloc(nq * D * sizeof(double)),
                      malloc(nk * D * sizeof(double)),
                      malloc(nk * DV * sizeof(double)),
                      malloc(HQ * sizeof(double))};
    ck_assert_int_eq(oracle_backward(&f.p, f.d_o, FLASHCL_DTYPE_FP64, &g), 0);
    for (size_t e = 0; e < nq * D; ++e)
        check_element(&f, &f.q[e], g.dq[e], "q", e, c->name);
    for (size_t e = 0; e < nk * D; ++e)
        check_element(&f, &f.k[e], g.dk[e], "k", e, c->name);
    for (size_t e = 0; e < nk * DV; ++e)
        check_element(&f, &f.v[e], g.dv[e], "v", e, c->name);
    if (c->mask) /* the row that sees no key */
        for (size_t d = 0; d < D; ++d)
            ck_assert(g.dq[D + d] == 0.0);
    for (int h = 0; h < HQ && c->sinks; ++h) {
        /* Sinks are fp32 inputs: step the double through a scratch copy
         * (the step is exact in fp32 at this h's magnitude only
         * approximately, so the tolerance is the float step's). */
        const float saved = f.sinks[h];
        const float step = 1.0f / 1024;
        f.sinks[h] = saved + step;
        const double up = loss(&f);
        f.sinks[h] = saved - step;
        const double down = loss(&f);
        f.sinks[h] = saved;
        const double numeric = (up - down) / (2.0 * step);
        ck_assert_msg(fabs(numeric - g.d_sinks[h]) <= 1e-5,
                      "%s: d_sinks[%d] = %.10g, finite difference %.10g",
                      c->name, h, g.d_sinks[h], numeric);
    }
    free(g.dq);
    free(g.dk);
    free(g.dv);
    free(g.d_sinks);
    free_problem(&f);
}

START_TEST(test_finite_differences)
{
    check_case(&cases[_i]);
}
END_TEST

/* FA2's bf16 reference is a yardstick: near the oracle, but not equal. */
START_TEST(test_low_precision_reference)
{
    fd_problem f;
    make_problem(&f, &cases[7]);
    const size_t nq = B * HQ * NQ, nk = B * HQ * NK;
    double *exact[3], *low[3];
    const size_t sizes[3] = {nq * D, nk * D, nk * DV};
    for (int t = 0; t < 3; ++t) {
        exact[t] = malloc(sizes[t] * sizeof(double));
        low[t] = malloc(sizes[t] * sizeof(double));
    }
    oracle_grads ge = {exact[0], exact[1], exact[2], NULL};
    oracle_grads gl = {low[0], low[1], low[2], NULL};
    ck_assert_int_eq(oracle_backward(&f.p, f.d_o, FLASHCL_DTYPE_FP64, &ge), 0);
    ck_assert_int_eq(oracle_backward(&f.p, f.d_o, FLASHCL_DTYPE_BF16, &gl), 0);
    for (int t = 0; t < 3; ++t) {
        double worst = 0, scale = 0;
        for (size_t e = 0; e < sizes[t]; ++e) {
            worst = fmax(worst, fabs(exact[t][e] - low[t][e]));
            scale = fmax(scale, fabs(exact[t][e]));
        }
        ck_assert_msg(worst > 0 && worst < 0.05 * scale,
                      "tensor %d: bf16 reference off by %g (max %g)", t,
                      worst, scale);
        free(exact[t]);
        free(low[t]);
    }
    free_problem(&f);
}
END_TEST

int main(void)
{
    Suite *suite = suite_create("oracle_bwd");
    TCase *tc = tcase_create("oracle_bwd");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_finite_differences, 0,
                        (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_low_precision_reference);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
