/*
 * Checks of the test suite's own yardstick: the fp16/bf16 conversions
 * (exhaustively) and the float64 reference attention on cases with a
 * closed-form answer. Needs no OpenCL device.
 */
#include "reference.h"

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
            ck_assert(isnan(ref_half_to_float((uint16_t)h)));
            ck_assert(half_is_nan(ref_float_to_half(NAN)));
            continue;
        }
        uint16_t back = ref_float_to_half(ref_half_to_float((uint16_t)h));
        ck_assert_msg(back == h, "half %04x -> %04x", h, back);
    }
}
END_TEST

/* Between two neighbouring finite halves a < b (positive), the midpoint
 * rounds to the even one, and anything off the midpoint to the nearer one. */
START_TEST(test_half_round_to_nearest_even)
{
    for (uint16_t a = 0; a < 0x7bffu; a++) {
        float low = ref_half_to_float(a), high = ref_half_to_float(a + 1);
        float mid = (float)(((double)low + high) / 2); /* exact in fp32 */
        uint16_t even = (a & 1u) ? (uint16_t)(a + 1) : a;
        ck_assert_uint_eq(ref_float_to_half(mid), even);
        ck_assert_uint_eq(ref_float_to_half(nextafterf(mid, 0.0f)), a);
        ck_assert_uint_eq(ref_float_to_half(nextafterf(mid, INFINITY)),
                          a + 1);
        ck_assert_uint_eq(ref_float_to_half(-mid), even | 0x8000u);
    }
    ck_assert_uint_eq(ref_float_to_half(65520.0f), 0x7c00u); /* tie -> inf */
    ck_assert_uint_eq(ref_float_to_half(65519.0f), 0x7bffu);
    ck_assert_uint_eq(ref_float_to_half(ldexpf(1.0f, -25)), 0u); /* tie */
    ck_assert_uint_eq(ref_float_to_half(ldexpf(1.5f, -25)), 1u);
    ck_assert_uint_eq(ref_float_to_half(1e-30f), 0u);
    ck_assert_uint_eq(ref_float_to_half(INFINITY), 0x7c00u);
}
END_TEST

START_TEST(test_bf16_conversions)
{
    for (uint32_t b = 0; b <= 0xffffu; b++) {
        float value = ref_bf16_to_float((uint16_t)b);
        if (bf16_is_nan((uint16_t)b)) {
            ck_assert(isnan(value));
            ck_assert(bf16_is_nan(ref_float_to_bf16(value)));
            continue;
        }
        ck_assert_uint_eq(ref_float_to_bf16(value), b);
        if ((b & 0x7fffu) >= 0x7f7fu)
            continue; /* no finite neighbour above */
        float next = ref_bf16_to_float((uint16_t)(b + 1));
        float mid = (float)(((double)value + next) / 2);
        uint16_t even = (b & 1u) ? (uint16_t)(b + 1) : (uint16_t)b;
        ck_assert_uint_eq(ref_float_to_bf16(mid), even);
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

int main(void)
{
    Suite *suite = suite_create("reference");
    TCase *tc = tcase_create("reference");
    tcase_add_test(tc, test_half_round_trip);
    tcase_add_test(tc, test_half_round_to_nearest_even);
    tcase_add_test(tc, test_bf16_conversions);
    tcase_add_test(tc, test_reference_closed_form);
    tcase_add_test(tc, test_reference_causal_gqa_strided);
    suite_add_tcase(suite, tc);
    SRunner *runner = srunner_create(suite);
    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
