/* cl/common/band.clh against a per-pair scan (issue 47, item 3): a test
 * kernel runs every band function over many small problems (seqlen_q,
 * seqlen_k, top-left or bottom-right diagonal, left and right bounds,
 * BM x BN tiles), including empty bands, rows that see no key and rows
 * whose diagonal lies past seqlen_k, in every switch combination
 * (FLASHCL_CAUSAL, FLASHCL_WINDOW_LEFT) and with band_int long and int.
 * The host then checks each answer against the visibility rule applied
 * to every (row, key) pair:
 *   - band_visible agrees with the rule;
 *   - band_keys covers every key a block's rows see, exactly when the
 *     block's first and last rows see keys; band_tile_* are the tiles
 *     that cover it, and none more;
 *   - band_tile_crosses holds exactly when some pair of the (row block x
 *     key tile) is hidden;
 *   - band_rows is exactly the rows that see some key of a key tile. */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

typedef struct band_case {
    int seqlen_q, seqlen_k, diag, left, right, bm, bn, out;
} band_case;

/* Each work-item runs one case (8 ints in `cases`) and writes its
 * answers from `out` on: visibility of every (row, key), keys up to
 * seqlen_k included (bit 0 band_visible, bit 1 band_row_lo/hi, bit 2
 * band_outside); per row block
 * keys begin, end, tile first, tile end, then crosses for every key
 * tile plus one past the keys; per key tile its rows begin, end. */
static const char *kernel_source =
    "#include \"band.clh\"\n"
    "__kernel void band_answers(__global const int *cases, __global int *out)\n"
    "{\n"
    "    __global const int *c = cases + 8 * get_global_id(0);\n"
    "    const band_int sq = c[0], sk = c[1], diag = c[2], left = c[3],\n"
    "                   right = c[4], bm = c[5], bn = c[6];\n"
    "    __global int *o = out + c[7];\n"
    "    for (band_int i = 0; i < sq; ++i)\n"
    "        for (band_int j = 0; j <= sk; ++j)\n"
    "            *o++ = band_visible(j, i, diag, left, right, sk) +\n"
    "                   2 * (j >= band_row_lo(i + diag, left) &&\n"
    "                        j <= band_row_hi(i + diag, right, sk)) +\n"
    "                   4 * !band_outside(j, band_row_lo(i + diag, left),\n"
    "                                     band_row_hi(i + diag, right, sk));\n"
    "    const band_int tiles = (sk + bn - 1) / bn;\n"
    "    for (band_int r0 = 0; r0 < sq; r0 += bm) {\n"
    "        const band_int rl = min(sq, r0 + bm) - 1;\n"
    "        const band_range keys = band_keys(r0, rl, diag, left, right, sk);\n"
    "        *o++ = keys.begin;\n"
    "        *o++ = keys.end;\n"
    "        *o++ = band_tile_first(keys.begin, bn);\n"
    "        *o++ = band_tile_end(keys.begin, keys.end, bn);\n"
    "        for (band_int t = 0; t <= tiles; ++t)\n"
    "            *o++ = band_tile_crosses(t * bn, bn, r0, rl, diag, left,\n"
    "                                     right, sk);\n"
    "    }\n"
    "    for (band_int t = 0; t < tiles; ++t) {\n"
    "        const band_range rows = band_rows(t * bn, min(sk, t * bn + bn) - 1,\n"
    "                                          diag, left, right, sq);\n"
    "        *o++ = rows.begin;\n"
    "        *o++ = rows.end;\n"
    "    }\n"
    "}\n";

static int ceil_div(int a, int b) { return (a + b - 1) / b; }

static int answers_size(const band_case *c)
{
    const int blocks = ceil_div(c->seqlen_q, c->bm);
    const int tiles = ceil_div(c->seqlen_k, c->bn);
    return c->seqlen_q * (c->seqlen_k + 1) + blocks * (4 + tiles + 1) + 2 * tiles;
}

/* The rule itself (include/flashcl.h), with the switches as given. */
static int sees(const band_case *c, int causal, int windowed, int i, int j)
{
    if (j < 0 || j >= c->seqlen_k)
        return 0;
    if (causal && j > i + c->diag + c->right)
        return 0;
    if (windowed && j < i + c->diag - c->left)
        return 0;
    return 1;
}

static int row_sees_any(const band_case *c, int causal, int windowed, int i)
{
    for (int j = 0; j < c->seqlen_k; ++j)
        if (sees(c, causal, windowed, i, j))
            return 1;
    return 0;
}

#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "case Nq %d Nk %d diag %d left %d right %d "      \
                            "%dx%d causal %d window %d: ",                    \
                    c->seqlen_q, c->seqlen_k, c->diag, c->left, c->right,      \
                    c->bm, c->bn, causal, windowed);                           \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
            return 1;                                                          \
        }                                                                      \
    } while (0)

static int check_block(const band_case *c, int causal, int windowed, int r0,
                       const int *a)
{
    const int rl = (r0 + c->bm < c->seqlen_q ? r0 + c->bm : c->seqlen_q) - 1;
    const int begin = a[0], end = a[1], tile_first = a[2], tile_end = a[3];
    const int tiles = ceil_div(c->seqlen_k, c->bn);
    int lo = c->seqlen_k, hi = -1;
    for (int i = r0; i <= rl; ++i)
        for (int j = 0; j < c->seqlen_k; ++j)
            if (sees(c, causal, windowed, i, j)) {
                lo = j < lo ? j : lo;
                hi = j > hi ? j : hi;
            }
    EXPECT(0 <= begin && begin <= end && end <= c->seqlen_k,
           "rows %d..%d: keys [%d, %d) out of order", r0, rl, begin, end);
    EXPECT(hi < 0 || (begin <= lo && hi < end),
           "rows %d..%d: keys [%d, %d) miss seen keys %d..%d", r0, rl, begin,
           end, lo, hi);
    if (row_sees_any(c, causal, windowed, r0) &&
        row_sees_any(c, causal, windowed, rl))
        EXPECT(begin == lo && end == hi + 1,
               "rows %d..%d: keys [%d, %d), seen %d..%d", r0, rl, begin, end,
               lo, hi);
    int want_first = begin / c->bn, want_end = want_first;
    if (end > begin)
        want_end = ceil_div(end, c->bn);
    EXPECT(tile_first == want_first && tile_end == want_end,
           "rows %d..%d keys [%d, %d): tiles [%d, %d), want [%d, %d)", r0,
           rl, begin, end, tile_first, tile_end, want_first, want_end);
    for (int t = 0; t <= tiles; ++t) {
        int hidden = 0;
        for (int i = r0; i <= rl && !hidden; ++i)
            for (int j = t * c->bn; j < (t + 1) * c->bn && !hidden; ++j)
                hidden = !sees(c, causal, windowed, i, j);
        EXPECT(a[4 + t] == hidden, "rows %d..%d tile %d: crosses %d, want %d",
               r0, rl, t, a[4 + t], hidden);
    }
    return 0;
}

static int check_rows(const band_case *c, int causal, int windowed, int t,
                      const int *a)
{
    const int first = t * c->bn;
    const int last = (first + c->bn < c->seqlen_k ? first + c->bn
                                                  : c->seqlen_k) - 1;
    int lo = c->seqlen_q, hi = -1;
    for (int i = 0; i < c->seqlen_q; ++i)
        for (int j = first; j <= last; ++j)
            if (sees(c, causal, windowed, i, j)) {
                lo = i < lo ? i : lo;
                hi = i > hi ? i : hi;
            }
    EXPECT(0 <= a[0] && a[0] <= a[1] && a[1] <= c->seqlen_q,
           "keys %d..%d: rows [%d, %d) out of order", first, last, a[0], a[1]);
    if (hi < 0)
        EXPECT(a[0] == a[1], "keys %d..%d: rows [%d, %d), none sees them",
               first, last, a[0], a[1]);
    else
        EXPECT(a[0] == lo && a[1] == hi + 1,
               "keys %d..%d: rows [%d, %d), want [%d, %d)", first, last, a[0],
               a[1], lo, hi + 1);
    return 0;
}

/* 1 on the first wrong answer of case c (printed). */
static int check_case(const band_case *c, int causal, int windowed,
                      const int *a)
{
    for (int i = 0; i < c->seqlen_q; ++i)
        for (int j = 0; j <= c->seqlen_k; ++j)
            EXPECT(*a++ == 7 * sees(c, causal, windowed, i, j),
                   "band_visible, band_row_lo/hi, band_outside (key %d, "
                   "row %d) wrong",
                   j, i);
    const int tiles = ceil_div(c->seqlen_k, c->bn);
    for (int r0 = 0; r0 < c->seqlen_q; r0 += c->bm, a += 4 + tiles + 1)
        if (check_block(c, causal, windowed, r0, a))
            return 1;
    for (int t = 0; t < tiles; ++t, a += 2)
        if (check_rows(c, causal, windowed, t, a))
            return 1;
    return 0;
}

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* Every combination of these: rows past the keys (top-left with Nq > Nk),
 * keys before the first row's diagonal (bottom-right with Nk > Nq),
 * windows narrower than a tile and wider than the problem. */
static const int lengths_q[] = {1, 5, 17, 40};
static const int lengths_k[] = {1, 7, 16, 33, 70};
static const int bounds[] = {0, 1, 3, 17, 100};
static const int tile_m[] = {4, 16};
static const int tile_n[] = {8, 16};

static band_case *make_cases(int *count, int *total)
{
    const int most = COUNT(lengths_q) * COUNT(lengths_k) * 2 *
                     COUNT(bounds) * COUNT(bounds) * COUNT(tile_m) *
                     COUNT(tile_n);
    band_case *cases = malloc(sizeof(band_case) * (size_t)most);
    ck_assert_ptr_nonnull(cases);
    int n = 0, out = 0;
    for (int a = 0; a < COUNT(lengths_q); ++a)
        for (int b = 0; b < COUNT(lengths_k); ++b)
            for (int top_left = 0; top_left < 2; ++top_left)
                for (int l = 0; l < COUNT(bounds); ++l)
                    for (int r = 0; r < COUNT(bounds); ++r)
                        for (int m = 0; m < COUNT(tile_m); ++m)
                            for (int t = 0; t < COUNT(tile_n); ++t) {
                                band_case *c = &cases[n++];
                                c->seqlen_q = lengths_q[a];
                                c->seqlen_k = lengths_k[b];
                                c->diag = top_left ? 0
                                                   : c->seqlen_k - c->seqlen_q;
                                c->left = bounds[l];
                                c->right = bounds[r];
                                c->bm = tile_m[m];
                                c->bn = tile_n[t];
                                c->out = out;
                                out += answers_size(c);
                            }
    *count = n;
    *total = out;
    return cases;
}

static int *run_answers(const band_case *cases, int count, int total,
                        const char *options)
{
    flashcl_context *ctx = shared_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_device_id device = flashcl_context_device(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    cl_int err = CL_SUCCESS;
    cl_program program =
        clCreateProgramWithSource(context, 1, &kernel_source, NULL, &err);
    CL_CHECK(err);
    if (clBuildProgram(program, 1, &device, options, NULL, NULL) !=
        CL_SUCCESS) {
        static char log[16384];
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG,
                              sizeof log, log, NULL);
        ck_abort_msg("band test kernel (%s): %s", options, clip(log));
    }
    cl_kernel kernel = clCreateKernel(program, "band_answers", &err);
    CL_CHECK(err);
    const size_t out_bytes = sizeof(int) * (size_t)total;
    cl_mem case_buf = create_buffer(context, sizeof(band_case) * (size_t)count);
    cl_mem out_buf = create_buffer(context, out_bytes);
    write_buffer(queue, case_buf, cases, sizeof(band_case) * (size_t)count);
    poison_buffer(queue, out_buf, out_bytes);
    CL_CHECK(clSetKernelArg(kernel, 0, sizeof case_buf, &case_buf));
    CL_CHECK(clSetKernelArg(kernel, 1, sizeof out_buf, &out_buf));
    const size_t global = (size_t)count;
    CL_CHECK(clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, NULL, 0,
                                    NULL, NULL));
    int *answers = malloc(out_bytes);
    ck_assert_ptr_nonnull(answers);
    read_buffer(queue, out_buf, answers, out_bytes);
    clReleaseMemObject(out_buf);
    clReleaseMemObject(case_buf);
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    return answers;
}

/* _i: bit 0 FLASHCL_CAUSAL, bit 1 FLASHCL_WINDOW_LEFT, bit 2 band_int int. */
START_TEST(band_matches_pair_scan)
{
    const int causal = _i & 1, windowed = (_i >> 1) & 1, narrow = _i >> 2;
    char options[256];
    snprintf(options, sizeof options,
             "-I %s/common -DFLASHCL_CAUSAL=%d -DFLASHCL_WINDOW_LEFT=%d%s",
             FLASHCL_SOURCE_CL_DIR, causal, windowed,
             narrow ? " -DFLASHCL_BAND_T=int" : "");
    int count = 0, total = 0;
    band_case *cases = make_cases(&count, &total);
    int *answers = run_answers(cases, count, total, options);
    int wrong = 0;
    for (int n = 0; n < count && !wrong; ++n)
        wrong = check_case(&cases[n], causal, windowed,
                           answers + cases[n].out);
    free(answers);
    free(cases);
    ck_assert_msg(!wrong, "%s: a band answer differs from the pair scan "
                          "(stderr)", options);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {{band_matches_pair_scan, 8}};
    return run_tests("band", 120, NULL, NULL, tests, LENGTH(tests));
}
