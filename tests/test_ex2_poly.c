/* The wgmma kernel's FP32-pipe exponent (cl/nvidia/ex2_poly.clh),
 * compiled here from the kernel's own source, against exp2 in double:
 * relative error over the softmax's range, exact zero below -126 (a
 * fully masked row must sum to 0), NaN kept, and the rounding magic
 * not folded away (f stays in [-0.5, 0.5]: checked through the error
 * at half-integers, where a wrong rounding doubles it). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static uint32_t ex2p_as_uint(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}
static float ex2p_as_float(uint32_t u)
{
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}
#define EX2P_AS_UINT(x) ex2p_as_uint(x)
#define EX2P_AS_FLOAT(x) ex2p_as_float(x)
#define EX2P_FN static float
#include "../cl/nvidia/ex2_poly.clh"

static int failures;

static void expect(int ok, const char *what, float x, double got, double want)
{
    if (!ok && failures++ < 10)
        fprintf(stderr, "FAIL %s: x = %.9g: got %.9g, want %.9g\n", what,
                (double)x, got, want);
}

int main(void)
{
    double worst = 0.0;
    long n = 0;
    /* the softmax's arguments: s sl2 - m sl2 <= 0, rounding may leave a
     * few ulp above 0 */
    for (double xd = -125.0; xd <= 0.001; xd += 1.0 / 4096.0 + 1e-7, ++n) {
        const float x = (float)xd;
        const double want = exp2((double)x);
        const double got = nv_ex2_poly(x);
        const double rel = fabs(got / want - 1.0);
        if (rel > worst)
            worst = rel;
        expect(rel < 8e-5, "relative error", x, got, want);
    }
    for (int k = -125; k <= 0; ++k) { /* the rounding ties */
        const float x = (float)k - 0.5f;
        const double want = exp2((double)x);
        const double got = nv_ex2_poly(x);
        expect(fabs(got / want - 1.0) < 8e-5, "half-integer", x, got, want);
    }
    for (double xd = -126.0; xd < -125.0; xd += 1.0 / 1024.0) {
        const float x = (float)xd;
        const double got = nv_ex2_poly(x);
        expect(got >= 0.0 && got < 2.4e-38, "subnormal range", x, got,
               exp2(xd));
    }
    const float below[] = {-126.001f, -127.f, -200.f, -1e30f, -INFINITY};
    for (size_t i = 0; i < sizeof below / sizeof below[0]; ++i) {
        const float got = nv_ex2_poly(below[i]);
        expect(got == 0.f && !signbit(got), "exact +0", below[i], got, 0.0);
    }
    expect(isnan(nv_ex2_poly(NAN)), "NaN kept", NAN, nv_ex2_poly(NAN), NAN);
    printf("nv_ex2_poly: %ld points in [-125, 0], max relative error %.3g\n",
           n, worst);
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
