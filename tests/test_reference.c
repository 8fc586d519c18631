/*
 * Checks of the yardstick the tests, the `flashcl` tool and the benchmark
 * share (support/oracle.c): the fp16/bf16 conversions (exhaustively), and
 * the float64 oracle on cases with a closed-form answer, every variant of
 * the descriptor included, through both its entry points (the tests'
 * ref_attention and oracle_problem_from_desc). Needs no OpenCL device.
 */
#include "reference.h"
#include "test_common.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int half_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

static int bf16_is_nan(uint16_t b)
{
    return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu);
}

START_TEST(test_half_round_trip)
{
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        if (half_is_nan((uint16_t)h)) {
            ck_assert(isnan(oracle_half_to_float((uint16_t)h)));
            ck_assert(half_is_nan(oracle_float_to_half(NAN)));
            continue;
        }
        uint16_t back = oracle_float_to_half(oracle_half_to_float((uint16_t)h));
        ck_assert_msg(back == h, "half %04x -> %04x", h, back);
    }
}
END_TEST

/* Every half decodes to its exact value, computed here independently:
 * (-1)^s * 2^(e-15) * (1 + m/1024), subnormals 2^-14 * m/1024. */
START_TEST(test_half_exact_values)
{
    for (uint32_t h = 0; h <= 0xffffu; h++) {
        int exponent = (int)((h >> 10) & 0x1fu), mantissa = (int)(h & 0x3ffu);
        if (exponent == 31)
            continue; /* inf and NaN: test_half_round_trip */
        double want = exponent == 0
                          ? ldexp((double)mantissa, -24)
                          : ldexp(1024.0 + mantissa, exponent - 25);
        if (h & 0x8000u)
            want = -want;
        ck_assert_msg((double)oracle_half_to_float((uint16_t)h) == want,
                      "half %04x -> %.9g, want %.9g", h,
                      (double)oracle_half_to_float((uint16_t)h), want);
    }
    ck_assert(isinf(oracle_half_to_float(0x7c00u)));
    ck_assert(oracle_half_to_float(0xfc00u) < 0);
}
END_TEST

/* Between two neighbouring finite halves a < b (positive), the midpoint
 * rounds to the even one, and anything off the midpoint to the nearer one. */
START_TEST(test_half_round_to_nearest_even)
{
    for (uint16_t a = 0; a < 0x7bffu; a++) {
        float low = oracle_half_to_float(a), high = oracle_half_to_float(a + 1);
        float mid = (float)(((double)low + high) / 2); /* exact in fp32 */
        uint16_t even = (a & 1u) ? (uint16_t)(a + 1) : a;
        ck_assert_uint_eq(oracle_float_to_half(mid), even);
        ck_assert_uint_eq(oracle_float_to_half(nextafterf(mid, 0.0f)), a);
        ck_assert_uint_eq(oracle_float_to_half(nextafterf(mid, INFINITY)),
                          a + 1);
        ck_assert_uint_eq(oracle_float_to_half(-mid), even | 0x8000u);
    }
    ck_assert_uint_eq(oracle_float_to_half(65520.0f), 0x7c00u); /* tie -> inf */
    ck_assert_uint_eq(oracle_float_to_half(65519.0f), 0x7bffu);
    ck_assert_uint_eq(oracle_float_to_half(ldexpf(1.0f, -25)), 0u); /* tie */
    ck_assert_uint_eq(oracle_float_to_half(ldexpf(1.5f, -25)), 1u);
    ck_assert_uint_eq(oracle_float_to_half(1e-30f), 0u);
    ck_assert_uint_eq(oracle_float_to_half(INFINITY), 0x7c00u);
}
END_TEST

START_TEST(test_bf16_conversions)
{
    for (uint32_t b = 0; b <= 0xffffu; b++) {
        float value = oracle_bf16_to_float((uint16_t)b);
        if (bf16_is_nan((uint16_t)b)) {
            ck_assert(isnan(value));
            ck_assert(bf16_is_nan(oracle_float_to_bf16(value)));
            continue;
        }
        ck_assert_uint_eq(oracle_float_to_bf16(value), b);
        if ((b & 0x7fffu) >= 0x7f7fu)
            continue; /* no finite neighbour above */
        float next = oracle_bf16_to_float((uint16_t)(b + 1));
        float mid = (float)(((double)value + next) / 2);
        uint16_t even = (b & 1u) ? (uint16_t)(b + 1) : (uint16_t)b;
        ck_assert_uint_eq(oracle_float_to_bf16(mid), even);
    }
}
END_TEST

static ref_view packed_view(const float *data, size_t seq, size_t dim)
{
    ref_view view = {data, 0, {seq * dim, seq * dim, dim, 1}};
    return view;
}

/* Two keys with scores 0 and s = log 3 (rounded to fp32): weights 1/(1+e^s)
 * and e^s/(1+e^s), LSE = log(1 + e^s). */
START_TEST(test_reference_closed_form)
{
    float q[1] = {1.0f}, k[2] = {0.0f, (float)log(3.0)}, v[2] = {2.0f, 6.0f};
    ref_problem p = {.batch = 1, .heads_q = 1, .heads_kv = 1, .seqlen_q = 1,
                     .seqlen_k = 2, .head_dim = 1, .dtype = REF_FP32,
                     .scale = 1.0};
    p.q = packed_view(q, 1, 1);
    p.k = packed_view(k, 2, 1);
    p.v = packed_view(v, 2, 1);
    double o, lse, e = exp((double)k[1]);
    ck_assert_int_eq(ref_attention(&p, &o, &lse), 0);
    ck_assert_double_eq_tol(o, (2.0 + 6.0 * e) / (1.0 + e), 1e-15);
    ck_assert_double_eq_tol(lse, log1p(e), 1e-15);
}
END_TEST

/* Causal bottom-right with seqlen_q 3 > seqlen_k 2: row 0 sees nothing,
 * row 1 sees key 0, row 2 sees keys 0 and 1; two query heads share one
 * KV head; Q is read through a strided view with a byte offset. */
START_TEST(test_reference_causal_gqa_strided)
{
    /* Q: 2 heads x 3 rows x D 1, stored with seq stride 2, head stride 7,
     * after 3 floats of offset; unused slots hold NaN. */
    float q[16];
    for (size_t i = 0; i < 16; i++)
        q[i] = NAN;
    for (size_t h = 0; h < 2; h++)
        for (size_t s = 0; s < 3; s++)
            q[3 + h * 7 + s * 2] = 1.0f + (float)h;
    float k[2] = {0.5f, -0.25f}, v[2] = {3.0f, -1.0f};
    ref_problem p = {.batch = 1, .heads_q = 2, .heads_kv = 1, .seqlen_q = 3,
                     .seqlen_k = 2, .head_dim = 1, .dtype = REF_FP32,
                     .scale = 1.0, .causal = 1};
    p.q = (ref_view){q, 3 * sizeof(float), {0, 7, 2, 1}};
    p.k = packed_view(k, 2, 1);
    p.v = packed_view(v, 2, 1);
    double o[6], lse[6];
    ck_assert_int_eq(ref_attention(&p, o, lse), 0);
    for (size_t h = 0; h < 2; h++) {
        double qh = 1.0 + (double)h;
        double s0 = qh * k[0], s1 = qh * k[1];
        ck_assert(o[h * 3] == 0.0 && isinf(lse[h * 3]) && lse[h * 3] < 0);
        ck_assert_double_eq_tol(o[h * 3 + 1], v[0], 1e-15);
        ck_assert_double_eq_tol(lse[h * 3 + 1], s0, 1e-15);
        double w1 = 1.0 / (1.0 + exp(s0 - s1));
        ck_assert_double_eq_tol(o[h * 3 + 2], (1 - w1) * v[0] + w1 * v[1],
                                1e-14);
        ck_assert_double_eq_tol(lse[h * 3 + 2], log(exp(s0) + exp(s1)),
                                1e-14);
    }
}
END_TEST

/* ---- the oracle's variants, each against a closed form --------------- */

/* A one-head problem over fp64 arrays: Q [nq][d], K [nk][d], V [nk][dv],
 * all packed. The variant fields are the caller's to set. */
static oracle_problem small_problem(const double *q, const double *k,
                                    const double *v, size_t nq, size_t nk,
                                    size_t d, size_t dv)
{
    oracle_problem p;
    memset(&p, 0, sizeof p);
    p.batch = p.heads_q = p.heads_kv = 1;
    p.seqlen_q = nq;
    p.seqlen_k = nk;
    p.head_dim = d;
    p.head_dim_v = dv;
    p.scale = 1.0;
    p.q = (oracle_view){q, 0, {nq * d, nq * d, d, 1}, FLASHCL_DTYPE_FP64};
    p.k = (oracle_view){k, 0, {nk * d, nk * d, d, 1}, FLASHCL_DTYPE_FP64};
    p.v = (oracle_view){v, 0, {nk * dv, nk * dv, dv, 1}, FLASHCL_DTYPE_FP64};
    return p;
}

/* softmax over the given scores (-inf: not seen) of values v, and the LSE;
 * `sink` joins the denominator when finite. */
static void expected_row(const double *scores, const double *v, size_t n,
                         double sink, double *o, double *lse)
{
    double sum = isinf(sink) ? 0.0 : exp(sink), acc = 0.0;
    for (size_t j = 0; j < n; j++)
        if (!isinf(scores[j])) {
            sum += exp(scores[j]);
            acc += exp(scores[j]) * v[j];
        }
    *o = sum > 0 ? acc / sum : 0.0;
    *lse = sum > 0 ? log(sum) : -INFINITY;
}

static void check_row(oracle_problem *p, size_t i, const double *scores,
                      const double *v, double sink)
{
    double *o = malloc(p->seqlen_q * p->head_dim_v * sizeof *o);
    double *lse = malloc(p->seqlen_q * sizeof *lse);
    ck_assert(o && lse);
    ck_assert_int_eq(oracle_attention(p, o, NULL, lse), 0);
    double want_o, want_lse;
    expected_row(scores, v, p->seqlen_k, sink, &want_o, &want_lse);
    ck_assert_msg(fabs(o[i * p->head_dim_v] - want_o) <= 1e-14,
                  "row %zu: O %.17g, want %.17g", i, o[i * p->head_dim_v],
                  want_o);
    if (isinf(want_lse))
        ck_assert(isinf(lse[i]) && lse[i] < 0);
    else
        ck_assert_msg(fabs(lse[i] - want_lse) <= 1e-14,
                      "row %zu: LSE %.17g, want %.17g", i, lse[i], want_lse);
    free(o);
    free(lse);
}

/* Scores 10 and -4 through softcap 5: 5 tanh(2) and 5 tanh(-0.8). */
START_TEST(test_oracle_softcap)
{
    double q[1] = {2.0}, k[2] = {5.0, -2.0}, v[2] = {1.0, -3.0};
    oracle_problem p = small_problem(q, k, v, 1, 2, 1, 1);
    p.softcap = 5.0;
    double scores[2] = {5.0 * tanh(2.0), 5.0 * tanh(-0.8)};
    check_row(&p, 0, scores, v, -INFINITY);
}
END_TEST

/* Sinks join the max and the denominator; a row that sees no key gets
 * O = 0 and LSE = sink. */
START_TEST(test_oracle_sinks)
{
    double q[2] = {1.0, 1.0}, k[1] = {0.5}, v[1] = {4.0};
    float sink = 1.25f;
    oracle_problem p = small_problem(q, k, v, 2, 1, 1, 1);
    p.sinks = (oracle_view){&sink, 0, {0, 1, 0, 0}, FLASHCL_DTYPE_FP32};
    p.causal = 1; /* bottom-right, Nq 2 > Nk 1: row 0 sees nothing */
    double none[1] = {-INFINITY}, row1[1] = {0.5};
    check_row(&p, 0, none, v, sink);
    check_row(&p, 1, row1, v, sink);
    double o[2], lse[2];
    ck_assert_int_eq(oracle_attention(&p, o, NULL, lse), 0);
    ck_assert(o[0] == 0.0 && lse[0] == (double)sink);
}
END_TEST

/* ALiBi's distance is |i + diag - j|, diag = Nk - Nq bottom-right, 0
 * top-left; per-(batch, head) slopes through strides; after softcap,
 * before the bias. */
START_TEST(test_oracle_alibi_bias_mask)
{
    double q[2] = {1.0, 1.0}, k[3] = {0.0, 0.0, 0.0}, v[3] = {1.0, 2.0, 7.0};
    float slopes[3] = {99.0f, 0.5f, 99.0f}; /* (b 0, h 0) at offset 4 */
    float bias[3] = {0.25f, -INFINITY, 1.0f}; /* one row, broadcast over i */
    unsigned char mask[6] = {1, 1, 1, 1, 1, 0};
    for (int align = 0; align < 2; ++align) {
        oracle_problem p = small_problem(q, k, v, 2, 3, 1, 1);
        p.causal_align = align ? FLASHCL_CAUSAL_TOP_LEFT
                               : FLASHCL_CAUSAL_BOTTOM_RIGHT;
        p.alibi = (oracle_view){slopes, 4, {1, 1, 0, 0}, FLASHCL_DTYPE_FP32};
        p.bias = (oracle_view){bias, 0, {0, 0, 0, 1}, FLASHCL_DTYPE_FP32};
        p.mask = (oracle_view){mask, 0, {0, 0, 3, 1}, FLASHCL_DTYPE_FP32};
        const double diag = align ? 0.0 : 1.0;
        for (size_t i = 0; i < 2; ++i) {
            double scores[3];
            for (size_t j = 0; j < 3; ++j)
                scores[j] = -0.5 * fabs((double)i + diag - (double)j) +
                            bias[j];
            if (i == 1)
                scores[2] = -INFINITY; /* mask[1][2] = 0 */
            check_row(&p, i, scores, v, -INFINITY);
        }
    }
}
END_TEST

/* Which keys a query sees, straight from the header:
 * causal j <= i + diag; window i + diag - left <= j <= i + diag + right
 * (-1 unbounded). All scores 0 and V = j, so O is the mean visible j. */
static int header_sees(size_t nq, size_t nk, int causal, int top_left,
                       int64_t left, int64_t right, int64_t i, int64_t j)
{
    int64_t diag = top_left ? 0 : (int64_t)nk - (int64_t)nq;
    if (causal && j > i + diag)
        return 0;
    if (left >= 0 && j < i + diag - left)
        return 0;
    return !(right >= 0 && j > i + diag + right);
}

START_TEST(test_oracle_band)
{
    static const int64_t bounds[][2] = {{-1, -1}, {0, 0},  {2, 1},
                                        {1, -1},  {-1, 3}, {50, 50}};
    static const size_t sizes[][2] = {{5, 5}, {3, 7}, {7, 3}};
    double q[7] = {0}, k[7] = {0}, v[7] = {0, 1, 2, 3, 4, 5, 6};
    for (size_t s = 0; s < 3; ++s)
        for (size_t w = 0; w < 6; ++w)
            for (int flags = 0; flags < 4; ++flags) {
                const size_t nq = sizes[s][0], nk = sizes[s][1];
                oracle_problem p = small_problem(q, k, v, nq, nk, 1, 1);
                p.causal = flags & 1;
                p.causal_align = (flags & 2) ? FLASHCL_CAUSAL_TOP_LEFT
                                             : FLASHCL_CAUSAL_BOTTOM_RIGHT;
                p.window = 1;
                p.window_left = bounds[w][0];
                p.window_right = bounds[w][1];
                for (size_t i = 0; i < nq; ++i) {
                    double scores[7];
                    for (size_t j = 0; j < nk; ++j)
                        scores[j] = header_sees(nq, nk, p.causal, flags & 2,
                                                p.window_left, p.window_right,
                                                (int64_t)i, (int64_t)j)
                                        ? 0.0
                                        : -INFINITY;
                    check_row(&p, i, scores, v, -INFINITY);
                }
            }
}
END_TEST

/* Window fields are ignored while window is 0. */
START_TEST(test_oracle_window_off)
{
    double q[1] = {0}, k[3] = {0}, v[3] = {1.0, 2.0, 6.0};
    oracle_problem p = small_problem(q, k, v, 1, 3, 1, 1);
    p.window_left = p.window_right = 0;
    double scores[3] = {0, 0, 0};
    check_row(&p, 0, scores, v, -INFINITY);
}
END_TEST

/* oracle_problem_from_desc: defaults (heads_kv, head_dim_v, scale with and
 * without explicit_scale), packed strides in both layouts, D_v != D, GQA,
 * fp16 storage; the result matches a hand-built problem. */
START_TEST(test_oracle_from_desc)
{
    flashcl_attention_desc d = FLASHCL_ATTENTION_DESC_INIT;
    d.batch = 1;
    d.heads_q = 2;
    d.seqlen_q = 1;
    d.seqlen_k = 2;
    d.head_dim = 4;
    ck_assert(fabs(oracle_desc_scale(&d) - 0.5) < 1e-17);
    d.scale = -3.0f;
    ck_assert(oracle_desc_scale(&d) == -3.0);
    d.scale = 0.0f;
    d.explicit_scale = 1;
    ck_assert(oracle_desc_scale(&d) == 0.0);

    /* scale 0 exactly: uniform weights over the visible keys. */
    d.head_dim_v = 1;
    d.dtype = FLASHCL_DTYPE_FP16;
    d.layout = FLASHCL_LAYOUT_BHND;
    uint16_t q[8], k[8], v[2];
    for (int i = 0; i < 8; ++i) {
        q[i] = oracle_float_to_half(1.0f + (float)i);
        k[i] = oracle_float_to_half(0.5f * (float)i);
    }
    v[0] = oracle_float_to_half(3.0f);
    v[1] = oracle_float_to_half(-1.0f);
    oracle_inputs in = {.q = q, .k = k, .v = v};
    oracle_problem p;
    char why[128];
    ck_assert_int_eq(oracle_problem_from_desc(&d, &in, &p, why, sizeof why), 0);
    ck_assert_uint_eq(p.heads_kv, 2);
    ck_assert_uint_eq(p.q.stride[1], 4); /* BHND: [b][h][s][d] */
    ck_assert_uint_eq(p.k.stride[2], 4);
    ck_assert_uint_eq(p.v.stride[1], 2);
    double o[2], lse[2];
    d.heads_kv = 1; /* GQA: both query heads read the one K/V head */
    ck_assert_int_eq(oracle_problem_from_desc(&d, &in, &p, why, sizeof why), 0);
    ck_assert_int_eq(oracle_attention(&p, o, NULL, lse), 0);
    for (int h = 0; h < 2; ++h) {
        ck_assert(fabs(o[h] - 1.0) < 1e-15); /* (3 + -1) / 2 */
        ck_assert(fabs(lse[h] - log(2.0)) < 1e-15);
    }

    /* Default scale 1/sqrt(4) in BNHD: the same as a hand-built problem,
     * and as the closed form. */
    d.explicit_scale = 0;
    d.layout = FLASHCL_LAYOUT_BNHD;
    ck_assert_int_eq(oracle_problem_from_desc(&d, &in, &p, why, sizeof why), 0);
    oracle_problem hand;
    memset(&hand, 0, sizeof hand);
    hand.batch = hand.heads_kv = hand.seqlen_q = hand.head_dim_v = 1;
    hand.heads_q = hand.seqlen_k = 2;
    hand.head_dim = 4;
    hand.scale = 0.5;
    hand.q = (oracle_view){q, 0, {8, 4, 8, 1}, FLASHCL_DTYPE_FP16};
    hand.k = (oracle_view){k, 0, {8, 4, 4, 1}, FLASHCL_DTYPE_FP16};
    hand.v = (oracle_view){v, 0, {2, 1, 1, 1}, FLASHCL_DTYPE_FP16};
    double o2[2], lse2[2];
    ck_assert_int_eq(oracle_attention(&p, o, NULL, lse), 0);
    ck_assert_int_eq(oracle_attention(&hand, o2, NULL, lse2), 0);
    for (int h = 0; h < 2; ++h) {
        double s0 = 0, s1 = 0;
        for (int e = 0; e < 4; ++e) {
            double qe = oracle_half_to_float(q[h * 4 + e]);
            s0 += qe * oracle_half_to_float(k[e]) * 0.5;
            s1 += qe * oracle_half_to_float(k[4 + e]) * 0.5;
        }
        double want = (3.0 * exp(s0) - exp(s1)) / (exp(s0) + exp(s1));
        ck_assert_msg(fabs(o[h] - want) < 1e-14, "h %d: %.17g vs %.17g", h,
                      o[h], want);
        ck_assert(o[h] == o2[h] && lse[h] == lse2[h]);
    }

    /* A descriptor with a bias buffer but no host copy is refused. */
    d.bias.buffer = (cl_mem)&d;
    ck_assert_int_eq(oracle_problem_from_desc(&d, &in, &p, why, sizeof why),
                     -1);
    ck_assert_ptr_nonnull(strstr(why, "bias"));
}
END_TEST

/* oracle_row gives what oracle_compute writes, through output strides. */
START_TEST(test_oracle_row_and_strides)
{
    double q[6] = {0.3, -1.0, 0.7, 0.2, 1.5, -0.4};
    double k[8] = {1.0, 0.5, -0.5, 2.0, 0.1, 0.9, -1.2, 0.3};
    double v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    oracle_problem p = small_problem(q, k, v, 3, 4, 2, 3);
    p.scale = 0.7;
    oracle *o = oracle_create(&p);
    ck_assert_ptr_nonnull(o);
    double packed[9], strided[9], lse[3], row[3], row_lse;
    const size_t stride[4] = {0, 0, 1, 3}; /* transposed: [d][i] */
    oracle_compute(o, packed, NULL, lse);
    oracle_compute(o, strided, stride, NULL);
    for (size_t i = 0; i < 3; ++i) {
        oracle_row(o, 0, 0, i, row, &row_lse);
        ck_assert(row_lse == lse[i]);
        for (size_t d = 0; d < 3; ++d)
            ck_assert(row[d] == packed[i * 3 + d] &&
                      row[d] == strided[d * 3 + i]);
    }
    oracle_release(o);
}
END_TEST

/* Forks per test (Check's default), unlike run_suite(): no device here, so
 * nothing to share, and a crash stays one failed test. */
int main(void)
{
    const test_entry tests[] = {
        {test_half_round_trip, 0},
        {test_half_exact_values, 0},
        {test_half_round_to_nearest_even, 0},
        {test_bf16_conversions, 0},
        {test_reference_closed_form, 0},
        {test_reference_causal_gqa_strided, 0},
        {test_oracle_softcap, 0},
        {test_oracle_sinks, 0},
        {test_oracle_alibi_bias_mask, 0},
        {test_oracle_band, 0},
        {test_oracle_window_off, 0},
        {test_oracle_from_desc, 0},
        {test_oracle_row_and_strides, 0}};
    const test_group group = {"reference", 0, NULL, NULL, tests,
                              LENGTH(tests)};
    SRunner *runner = srunner_create(suite_from_groups("reference", &group, 1));
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
