/*
 * FLASHCL_TILES (issue 15): the portable kernel's tiles forced for
 * experiments. A legal override is what describe reports and what a
 * forward call runs (checked against the float64 oracle); an unknown key,
 * a malformed value or tiles illegal on the device (local memory,
 * work-group limit, divisibility) are refused: describe and the forward
 * call fail with FLASHCL_ERROR_INVALID_VALUE, a message saying why and
 * what is legal, and nothing written (issue 42: a refused experiment that
 * ran the table's tiles passed silently). Runs on the portable path
 * (FLASHCL_PATH=portable in ctest).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "test_common.h"

#include <stdlib.h>
#include <string.h>

static flashcl_variant_info describe(const attention_case *c,
                                     const char *tiles)
{
    if (tiles)
        ck_assert_int_eq(setenv("FLASHCL_TILES", tiles, 1), 0);
    else
        unsetenv("FLASHCL_TILES");
    flashcl_attention_desc desc = case_shape_desc(c);
    flashcl_variant_info info;
    flashcl_context *ctx = shared_context();
    ck_assert_msg(flashcl_describe_variant(ctx, &desc, &info) ==
                      FLASHCL_SUCCESS,
                  "describe with FLASHCL_TILES=%s: %s", tiles ? tiles : "",
                  flashcl_context_last_error(ctx));
    return info;
}

static attention_case the_case(size_t head_dim, ref_dtype dtype)
{
    attention_case c = small_case(dtype, 70, 90, 0, 4242);
    c.head_dim = head_dim;
    return c;
}

START_TEST(legal_override_runs)
{
    const attention_case c = the_case(32, REF_FP32);
    const flashcl_variant_info table = describe(&c, NULL);
    ck_assert_str_eq(table.path, "portable");
    /* different from the table on every key, and legal everywhere */
    const int m = table.block_m == 32 ? 16 : 32;
    const int n = table.block_n == 16 ? 32 : 16;
    const int vec = table.vector_width == 4 ? 8 : 4;
    char tiles[96];
    snprintf(tiles, sizeof tiles, "block_m=%d,block_n=%d,vec=%d,wg=%d", m, n,
             vec, m);
    const flashcl_variant_info forced = describe(&c, tiles);
    ck_assert_int_eq(forced.block_m, m);
    ck_assert_int_eq(forced.block_n, n);
    ck_assert_int_eq(forced.vector_width, vec);
    ck_assert_int_eq(forced.work_group_size, m);
    ck_assert_msg(strstr(forced.reason, "FLASHCL_TILES") != NULL, "reason: %s",
                  forced.reason);
    ck_assert_str_eq(flashcl_context_last_error(shared_context()), "");
    run_case(&c); /* with the forced tiles, against the oracle */

    /* several query rows per work-item, each item's rows strided by the
     * work-group: against the oracle at 2 and 4 rows */
    for (int rows = 2; rows <= 4; rows *= 2) {
        snprintf(tiles, sizeof tiles, "block_m=%d,block_n=%d,vec=%d,rows=%d",
                 m, n, vec, rows);
        const flashcl_variant_info more = describe(&c, tiles);
        ck_assert_int_eq(more.block_m, m);
        ck_assert_int_eq(more.work_group_size, m / rows);
        run_case(&c);
    }

    /* one key alone: the others stay the table's */
    snprintf(tiles, sizeof tiles, "block_n=%d", n);
    const flashcl_variant_info one = describe(&c, tiles);
    ck_assert_int_eq(one.block_n, n);
    ck_assert_int_eq(one.block_m, table.block_m);
    ck_assert_int_eq(one.vector_width, table.vector_width);
    unsetenv("FLASHCL_TILES");
}
END_TEST

static const struct {
    const char *tiles;
    size_t head_dim;
    const char *why; /* a word the note must hold */
} refused[] = {
    {"block_k=8", 32, "block_k"},
    {"block_m=abc", 32, "block_m=abc"},
    {"block_m=", 32, "block_m="},
    {"block_m=32,,vec=4", 32, "not a tunable of the path (block_m"},
    {"block_m=-32", 32, "block_m=-32"},
    {"vec=3", 32, "vec 3"},
    {"block_n=20,vec=8", 32, "multiple of vec"},
    {"block_n=512", 32, "up to 256"},
    {"block_m=2048", 32, "work-group"},
    {"block_m=32,wg=64", 32, "rows per work-item"},
    {"block_m=32,wg=24", 32, "rows per work-item"},
    {"block_m=64,rows=8", 32, "rows per work-item"},
    {"rows=x", 32, "rows=x"},
    {"block_m=1024,block_n=256,vec=16", 256, "local memory"},
};

/* Local memory the device reports (PoCL: the CPU's L2 cache a core). */
static size_t device_local_mem(void)
{
    cl_ulong bytes = 0;
    clGetDeviceInfo(flashcl_context_device(shared_context()),
                    CL_DEVICE_LOCAL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    return (size_t)bytes;
}

START_TEST(illegal_override_refused)
{
    /* The largest legal tiles (1024 x 256 keys, D = 256, fp32) need 1.5 MB
     * of local memory: a device with more (PoCL on a CPU with 2 MiB of L2
     * a core reports 2 MiB) cannot refuse them, and must take them. */
    const size_t largest = (1024 * 256 + 256 * 512) * sizeof(float);
    if (strstr(refused[_i].why, "local memory") &&
        device_local_mem() >= largest) {
        const attention_case c = the_case(refused[_i].head_dim, REF_FP32);
        const flashcl_variant_info got = describe(&c, refused[_i].tiles);
        ck_assert_int_eq(got.block_m, 1024);
        ck_assert_int_eq(got.block_n, 256);
        ck_assert_str_eq(flashcl_context_last_error(shared_context()), "");
        return;
    }
    const attention_case c = the_case(refused[_i].head_dim, REF_FP32);
    ck_assert_int_eq(setenv("FLASHCL_TILES", refused[_i].tiles, 1), 0);
    flashcl_attention_desc desc = case_shape_desc(&c);
    flashcl_variant_info got;
    const flashcl_status status =
        flashcl_describe_variant(shared_context(), &desc, &got);
    unsetenv("FLASHCL_TILES");
    const char *message = flashcl_context_last_error(shared_context());
    ck_assert_msg(status == FLASHCL_ERROR_INVALID_VALUE &&
                      strstr(message, "FLASHCL_TILES") &&
                      strstr(message, "legal") &&
                      strstr(message, refused[_i].why),
                  "FLASHCL_TILES=%s: status %d, \"%s\" (want \"%s\" in it)",
                  refused[_i].tiles, (int)status, message, refused[_i].why);
    describe(&c, NULL); /* the next call clears the message */
    ck_assert_str_eq(flashcl_context_last_error(shared_context()), "");
}
END_TEST

/* A forward call under a refused override fails and writes nothing. */
START_TEST(refused_override_writes_nothing)
{
    const attention_case c = the_case(32, REF_FP16);
    flashcl_context *ctx = shared_context();
    cl_command_queue queue = flashcl_context_queue(ctx);
    case_data data;
    case_prepare(&c, flashcl_context_cl_context(ctx), queue, &data);
    flashcl_attention_desc desc = case_desc(&c, &data);
    ck_assert_int_eq(setenv("FLASHCL_TILES", "vec=3", 1), 0);
    const flashcl_status status =
        flashcl_attention_forward(ctx, NULL, &desc, 0, NULL, NULL);
    unsetenv("FLASHCL_TILES");
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    ck_assert_msg(status == FLASHCL_ERROR_INVALID_VALUE &&
                      strstr(flashcl_context_last_error(ctx), "vec 3"),
                  "status %d: %s", (int)status,
                  flashcl_context_last_error(ctx));
    ck_assert(buffer_is_poisoned(queue, data.o.view.buffer,
                                 tensor_bytes(&data.o)));
    case_release(&data);
}
END_TEST

int main(void)
{
    const test_entry tests[] = {
        {legal_override_runs, 0},
        {illegal_override_refused, (int)LENGTH(refused)},
        {refused_override_writes_nothing, 0}};
    return run_tests("tiles_override", 300, NULL, NULL, tests, LENGTH(tests));
}
