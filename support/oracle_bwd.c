/* The float64 gradient oracle (see oracle_bwd.h). */
#include "oracle_bwd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One query row's work space, seqlen_k and head-dim long. */
typedef struct row_space {
    double *score, *d_cap, *prob, *o_row, *dq_row;
} row_space;

typedef struct bwd_run {
    const oracle_problem *p;
    oracle *o;
    const double *q, *k, *v, *d_o;
    flashcl_dtype rounding;
    oracle_grads *g;
    row_space row;
} bwd_run;

static double rnd(const bwd_run *r, double value)
{
    return r->rounding == FLASHCL_DTYPE_FP64
               ? value
               : oracle_quantize(value, r->rounding);
}

static double dot(const double *a, const double *b, size_t n)
{
    double sum = 0.0;
    for (size_t d = 0; d < n; ++d)
        sum += a[d] * b[d];
    return sum;
}

/* FA2's reorder_ops: scores = q . (k * scale), each step rounded. */
static double rounded_score(const bwd_run *r, size_t b, size_t h, size_t i,
                            size_t j, double exact, double *d_cap)
{
    const oracle_problem *p = r->p;
    const size_t hk = h / (p->heads_q / p->heads_kv);
    const double *q_row =
        r->q + ((b * p->heads_q + h) * p->seqlen_q + i) * p->head_dim;
    const double *k_row =
        r->k + ((b * p->heads_kv + hk) * p->seqlen_k + j) * p->head_dim;
    double product = 0;
    for (size_t d = 0; d < p->head_dim; ++d)
        product += q_row[d] * rnd(r, k_row[d] * p->scale);
    product = rnd(r, product);
    double s = product;
    *d_cap = 1;
    if (p->softcap > 0) {
        const double t = rnd(r, tanh(rnd(r, product / p->softcap)));
        s = rnd(r, p->softcap * t);
        *d_cap = rnd(r, 1 - t * t);
    }
    /* The variants' additive terms and mask: what the exact score adds to
     * the capped product, rounded once. */
    const double exact_capped =
        p->softcap > 0 ? p->softcap * tanh(p->scale *
                                           dot(q_row, k_row, p->head_dim) /
                                           p->softcap)
                       : p->scale * dot(q_row, k_row, p->head_dim);
    if (exact == -INFINITY)
        return -INFINITY;
    const double extra = exact - exact_capped;
    return extra == 0 ? s : rnd(r, s + extra);
}

/* Fills score/d_cap/prob over the band; returns the row's LSE (-inf when
 * the row sees nothing). */
static double row_probabilities(bwd_run *r, size_t b, size_t h, size_t i,
                                size_t first, size_t count)
{
    row_space *w = &r->row;
    double row_max = oracle_sink(r->o, h);
    for (size_t t = 0; t < count; ++t) {
        const size_t j = first + t;
        w->score[t] = oracle_score(r->o, b, h, i, j, &w->d_cap[t]);
        if (r->rounding != FLASHCL_DTYPE_FP64)
            w->score[t] =
                rounded_score(r, b, h, i, j, w->score[t], &w->d_cap[t]);
        row_max = fmax(row_max, w->score[t]);
    }
    if (row_max == -INFINITY)
        return -INFINITY;
    double sum = exp(oracle_sink(r->o, h) - row_max);
    for (size_t t = 0; t < count; ++t)
        sum += exp(w->score[t] - row_max);
    const double lse = row_max + log(sum);
    for (size_t t = 0; t < count; ++t)
        w->prob[t] = rnd(r, exp(w->score[t] - lse));
    return lse;
}

static const double *v_row_of(const bwd_run *r, size_t b, size_t hk,
                              size_t j)
{
    const oracle_problem *p = r->p;
    return r->v + ((b * p->heads_kv + hk) * p->seqlen_k + j) * p->head_dim_v;
}

/* Delta_i: dO . O exactly, or sum_j P dP as autograd forms it. */
static double row_delta(bwd_run *r, const double *d_o_row, size_t b,
                        size_t hk, size_t first, size_t count)
{
    const oracle_problem *p = r->p;
    row_space *w = &r->row;
    double delta = 0;
    if (r->rounding != FLASHCL_DTYPE_FP64) {
        for (size_t t = 0; t < count; ++t)
            delta += w->prob[t] *
                     rnd(r, dot(d_o_row, v_row_of(r, b, hk, first + t),
                                p->head_dim_v));
        return rnd(r, delta);
    }
    memset(w->o_row, 0, p->head_dim_v * sizeof *w->o_row);
    for (size_t t = 0; t < count; ++t) {
        const double *v_row = v_row_of(r, b, hk, first + t);
        for (size_t d = 0; d < p->head_dim_v; ++d)
            w->o_row[d] += w->prob[t] * v_row[d];
    }
    return dot(d_o_row, w->o_row, p->head_dim_v);
}

static void one_row(bwd_run *r, size_t b, size_t h, size_t i)
{
    const oracle_problem *p = r->p;
    const size_t hk = h / (p->heads_q / p->heads_kv);
    const double key_scale = r->rounding == FLASHCL_DTYPE_FP64 ? p->scale : 1;
    size_t first;
    const size_t count = oracle_band(p, i, &first);
    const double lse = row_probabilities(r, b, h, i, first, count);
    if (lse == -INFINITY)
        return;
    row_space *w = &r->row;
    const size_t q_at = ((b * p->heads_q + h) * p->seqlen_q + i);
    const double *d_o_row = r->d_o + q_at * p->head_dim_v;
    const double *q_row = r->q + q_at * p->head_dim;
    const double delta = row_delta(r, d_o_row, b, hk, first, count);
    memset(w->dq_row, 0, p->head_dim * sizeof *w->dq_row);
    for (size_t t = 0; t < count; ++t) {
        const size_t j = first + t, kv_at = (b * p->heads_kv + hk) *
                                                p->seqlen_k + j;
        const double *v_row = r->v + kv_at * p->head_dim_v;
        const double *k_row = r->k + kv_at * p->head_dim;
        const double d_p = rnd(r, dot(d_o_row, v_row, p->head_dim_v));
        const double d_s =
            rnd(r, rnd(r, w->prob[t] * (d_p - delta)) * w->d_cap[t]);
        for (size_t d = 0; d < p->head_dim_v; ++d)
            r->g->dv[kv_at * p->head_dim_v + d] += w->prob[t] * d_o_row[d];
        for (size_t d = 0; d < p->head_dim; ++d) {
            const double k_d = r->rounding == FLASHCL_DTYPE_FP64
                                   ? k_row[d]
                                   : rnd(r, k_row[d] * p->scale);
            w->dq_row[d] += key_scale * d_s * k_d;
            r->g->dk[kv_at * p->head_dim + d] += key_scale * d_s * q_row[d];
        }
    }
    for (size_t d = 0; d < p->head_dim; ++d)
        r->g->dq[q_at * p->head_dim + d] = rnd(r, w->dq_row[d]);
    if (r->g->d_sinks && oracle_sink(r->o, h) != -INFINITY)
        r->g->d_sinks[h] -=
            rnd(r, exp(oracle_sink(r->o, h) - lse)) * delta;
}

static void round_all(const bwd_run *r, double *values, size_t count,
                      double factor)
{
    for (size_t e = 0; e < count; ++e)
        values[e] = rnd(r, rnd(r, values[e]) * factor);
}

static int alloc_row(row_space *w, const oracle_problem *p)
{
    const size_t n = p->seqlen_k ? p->seqlen_k : 1;
    w->score = malloc(n * sizeof *w->score);
    w->d_cap = malloc(n * sizeof *w->d_cap);
    w->prob = malloc(n * sizeof *w->prob);
    w->o_row = malloc((p->head_dim_v + 1) * sizeof *w->o_row);
    w->dq_row = malloc((p->head_dim + 1) * sizeof *w->dq_row);
    return w->score && w->d_cap && w->prob && w->o_row && w->dq_row ? 0 : -1;
}

static void free_row(row_space *w)
{
    free(w->score);
    free(w->d_cap);
    free(w->prob);
    free(w->o_row);
    free(w->dq_row);
}

int oracle_backward(const oracle_problem *p, const double *d_o,
                    flashcl_dtype rounding, oracle_grads *g)
{
    bwd_run r = {p, oracle_create(p), NULL, NULL, NULL, d_o, rounding, g,
                 {NULL, NULL, NULL, NULL, NULL}};
    if (!r.o || alloc_row(&r.row, p) != 0) {
        oracle_release(r.o);
        free_row(&r.row);
        return -1;
    }
    oracle_decoded(r.o, &r.q, &r.k, &r.v);
    const size_t kv_rows = p->batch * p->heads_kv * p->seqlen_k;
    memset(g->dq, 0,
           p->batch * p->heads_q * p->seqlen_q * p->head_dim * sizeof *g->dq);
    memset(g->dk, 0, kv_rows * p->head_dim * sizeof *g->dk);
    memset(g->dv, 0, kv_rows * p->head_dim_v * sizeof *g->dv);
    if (g->d_sinks)
        memset(g->d_sinks, 0, p->heads_q * sizeof *g->d_sinks);
    for (size_t b = 0; b < p->batch; ++b)
        for (size_t h = 0; h < p->heads_q; ++h)
            for (size_t i = 0; i < p->seqlen_q; ++i)
                one_row(&r, b, h, i);
    if (rounding != FLASHCL_DTYPE_FP64) {
        /* dK = (dS^T Q) rounded, then times the scale (K was pre-scaled). */
        round_all(&r, g->dk, kv_rows * p->head_dim, p->scale);
        round_all(&r, g->dv, kv_rows * p->head_dim_v, 1);
        if (g->d_sinks)
            round_all(&r, g->d_sinks, p->heads_q, 1);
    }
    free_row(&r.row);
    oracle_release(r.o);
    return 0;
}

/* Rows [from0, from0 + rows) of every head of a [heads][from_rows][dim]
 * array into rows [to0, to0 + rows) of a [heads][to_rows][dim] one. */
static void copy_rows(const double *from, size_t from_rows, size_t from0,
                      double *to, size_t to_rows, size_t to0, size_t heads,
                      size_t rows, size_t dim)
{
    for (size_t h = 0; h < heads; ++h)
        if (rows)
            memcpy(to + (h * to_rows + to0) * dim,
                   from + (h * from_rows + from0) * dim,
                   rows * dim * sizeof *to);
}

static void move_view(oracle_view *view, size_t elements)
{
    if (view->base)
        view->offset += elements * oracle_dtype_size(view->dtype);
}

/* Sequence b of the packed problem as a dense one. */
static oracle_problem sequence_problem(const oracle_problem *p, size_t b,
                                       size_t q0, size_t nq, size_t k0,
                                       size_t nk)
{
    oracle_problem s = *p;
    s.seqlen_q = nq;
    s.seqlen_k = nk;
    move_view(&s.q, q0 * p->q.stride[2]);
    move_view(&s.k, k0 * p->k.stride[2]);
    move_view(&s.v, k0 * p->v.stride[2]);
    move_view(&s.bias, b * p->bias.stride[0]);
    move_view(&s.alibi, b * p->alibi.stride[0]);
    if (s.mask.base) /* one byte an element */
        s.mask.offset += b * p->mask.stride[0];
    return s;
}

int oracle_backward_varlen(const oracle_problem *p, size_t batch,
                           const int *cu_q, const int *cu_k,
                           const double *d_o, flashcl_dtype rounding,
                           oracle_grads *g)
{
    const size_t hq = p->heads_q, hkv = p->heads_kv, d = p->head_dim,
                 dv = p->head_dim_v, tq = p->seqlen_q, tk = p->seqlen_k;
    memset(g->dq, 0, hq * tq * d * sizeof *g->dq);
    memset(g->dk, 0, hkv * tk * d * sizeof *g->dk);
    memset(g->dv, 0, hkv * tk * dv * sizeof *g->dv);
    if (g->d_sinks)
        memset(g->d_sinks, 0, hq * sizeof *g->d_sinks);
    if (!cu_q || !cu_k)
        return -1;
    double *space = malloc((hq * tq * (d + dv) + hkv * tk * (d + dv) + hq + 1) *
                           sizeof *space);
    int status = space ? 0 : -1;
    for (size_t b = 0; b < batch && status == 0; ++b) {
        const size_t q0 = (size_t)cu_q[b], nq = (size_t)(cu_q[b + 1] - cu_q[b]);
        const size_t k0 = (size_t)cu_k[b],
                     nk = (size_t)(cu_k[b + 1] - cu_k[b]);
        const oracle_problem s = sequence_problem(p, b, q0, nq, k0, nk);
        double *part_do = space, *dq = part_do + hq * nq * dv,
               *dk = dq + hq * nq * d, *dv_part = dk + hkv * nk * d,
               *sinks = dv_part + hkv * nk * dv;
        if (nq == 0 || nk == 0)
            continue; /* no gradient: the rows see no key, or no row */
        copy_rows(d_o, tq, q0, part_do, nq, 0, hq, nq, dv);
        oracle_grads part = {dq, dk, dv_part, g->d_sinks ? sinks : NULL};
        status = oracle_backward(&s, part_do, rounding, &part);
        if (status != 0)
            break;
        copy_rows(dq, nq, 0, g->dq, tq, q0, hq, nq, d);
        copy_rows(dk, nk, 0, g->dk, tk, k0, hkv, nk, d);
        copy_rows(dv_part, nk, 0, g->dv, tk, k0, hkv, nk, dv);
        for (size_t h = 0; g->d_sinks && h < hq; ++h)
            g->d_sinks[h] += sinks[h];
    }
    free(space);
    return status;
}
