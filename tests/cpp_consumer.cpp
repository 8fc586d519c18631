// A C++ program using flashcl.h as a C++ consumer does (issue 42 item 10),
// built with -Wall -Wextra -Wpedantic -Werror at C++11 and at the newest
// standard the compiler has, so a header change that warns in C++ fails
// the build. It writes every *_INIT macro in the forms C++ code uses
// (copy-, direct- and member-initialised, inside an aggregate, in new,
// constexpr from C++14), then runs a forward call and a merge of partials
// with initialised descriptors and checks both against its own float64
// host computation: a field the initialiser left non-zero would change
// the answer or be refused.
#include <flashcl.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

namespace {

const int B = 1, H = 2, NQ = 3, NK = 5, D = 8, P = 2;
const double TOLERANCE = 1e-4; // fp32 arithmetic on a few terms

#if __cplusplus >= 201402L
constexpr flashcl_attention_desc constant_desc = FLASHCL_ATTENTION_DESC_INIT;
static_assert(constant_desc.struct_size == sizeof(flashcl_attention_desc),
              "FLASHCL_ATTENTION_DESC_INIT sets struct_size at compile time");
constexpr flashcl_combine_desc constant_combine = FLASHCL_COMBINE_DESC_INIT;
static_assert(constant_combine.struct_size == sizeof(flashcl_combine_desc),
              "FLASHCL_COMBINE_DESC_INIT sets struct_size at compile time");
constexpr flashcl_backward_desc constant_backward = FLASHCL_BACKWARD_DESC_INIT;
static_assert(constant_backward.struct_size == sizeof(flashcl_backward_desc),
              "FLASHCL_BACKWARD_DESC_INIT sets struct_size at compile time");
#endif

struct with_member {
    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
};

struct in_aggregate {
    flashcl_combine_desc desc;
    int tag;
};

bool initialisers_set_struct_size()
{
    const size_t size = sizeof(flashcl_attention_desc);
    flashcl_attention_desc copied = FLASHCL_ATTENTION_DESC_INIT;
    flashcl_attention_desc listed FLASHCL_ATTENTION_DESC_INIT;
    flashcl_attention_desc direct(FLASHCL_ATTENTION_DESC_INIT);
    flashcl_attention_desc array[2] = {FLASHCL_ATTENTION_DESC_INIT,
                                       FLASHCL_ATTENTION_DESC_INIT};
    with_member member;
    flashcl_attention_desc *allocated =
        new flashcl_attention_desc FLASHCL_ATTENTION_DESC_INIT;
    in_aggregate combine = {FLASHCL_COMBINE_DESC_INIT, 1};
    flashcl_backward_desc backward = FLASHCL_BACKWARD_DESC_INIT;
    bool ok = copied.struct_size == size && listed.struct_size == size &&
              direct.struct_size == size && array[1].struct_size == size &&
              member.desc.struct_size == size &&
              allocated->struct_size == size &&
              combine.desc.struct_size == sizeof(flashcl_combine_desc) &&
              backward.struct_size == sizeof(flashcl_backward_desc);
    delete allocated;
    if (!ok)
        std::fprintf(stderr, "an initialiser form left struct_size unset\n");
    return ok;
}

std::vector<float> random_values(size_t count, unsigned &state)
{
    std::vector<float> values(count);
    for (float &x : values) {
        state = state * 1103515245u + 12345u;
        x = static_cast<float>((state >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return values;
}

// Packed BNHD: [batch, seq, heads, dim].
size_t at(int s, int h, int d) { return (static_cast<size_t>(s) * H + h) * D + d; }

bool close(const char *what, size_t index, double found, double expected)
{
    if (std::fabs(found - expected) <= TOLERANCE)
        return true;
    std::fprintf(stderr, "%s[%zu] = %.9g, expected %.9g\n", what, index,
                 found, expected);
    return false;
}

// Defaults: scale 1/sqrt(D), no mask, heads_kv = heads_q.
bool forward_matches_host(flashcl_context *ctx, unsigned &state)
{
    std::vector<float> q = random_values(B * NQ * H * D, state);
    std::vector<float> k = random_values(B * NK * H * D, state);
    std::vector<float> v = random_values(B * NK * H * D, state);
    std::vector<float> o(q.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> lse(B * H * NQ, std::numeric_limits<float>::quiet_NaN());

    flashcl_attention_desc desc = FLASHCL_ATTENTION_DESC_INIT;
    desc.batch = B;
    desc.heads_q = H;
    desc.seqlen_q = NQ;
    desc.seqlen_k = NK;
    desc.head_dim = D;
    flashcl_status status = flashcl_attention_forward_host(
        ctx, &desc, q.data(), k.data(), v.data(), o.data(), lse.data());
    if (status != FLASHCL_SUCCESS) {
        std::fprintf(stderr, "flashcl_attention_forward_host: %s: %s\n",
                     flashcl_status_string(status),
                     flashcl_context_last_error(ctx));
        return false;
    }
    bool ok = true;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (int h = 0; h < H; h++)
        for (int i = 0; i < NQ; i++) {
            double s[NK], m = -HUGE_VAL, sum = 0.0;
            for (int j = 0; j < NK; j++) {
                s[j] = 0.0;
                for (int d = 0; d < D; d++)
                    s[j] += static_cast<double>(q[at(i, h, d)]) * k[at(j, h, d)];
                s[j] *= scale;
                m = s[j] > m ? s[j] : m;
            }
            for (int j = 0; j < NK; j++)
                sum += std::exp(s[j] - m);
            for (int d = 0; d < D; d++) {
                double acc = 0.0;
                for (int j = 0; j < NK; j++)
                    acc += std::exp(s[j] - m) * v[at(j, h, d)];
                ok &= close("O", at(i, h, d), o[at(i, h, d)], acc / sum);
            }
            size_t row = static_cast<size_t>(h) * NQ + i;
            ok &= close("LSE", row, lse[row], m + std::log(sum));
        }
    return ok;
}

cl_mem device_copy(cl_context context, std::vector<float> &host)
{
    cl_int err = CL_SUCCESS;
    cl_mem mem = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                                host.size() * sizeof(float), host.data(), &err);
    if (err != CL_SUCCESS) {
        std::fprintf(stderr, "clCreateBuffer: %d\n", static_cast<int>(err));
        return nullptr;
    }
    return mem;
}

// flashcl_combine_partials on packed [P, B, H, NQ, D] partials (B = 1): O,
// packed BNHD (the default layout), is the partials weighted by
// exp(lse_p - max), LSE ([B, H, NQ]) their log-sum-exp.
bool combine_matches_host(flashcl_context *ctx, unsigned &state)
{
    const size_t rows = static_cast<size_t>(B) * H * NQ;
    std::vector<float> o_partial = random_values(P * rows * D, state);
    std::vector<float> lse_partial = random_values(P * rows, state);
    std::vector<float> o(rows * D, std::numeric_limits<float>::quiet_NaN());
    std::vector<float> lse(rows, std::numeric_limits<float>::quiet_NaN());

    cl_context context = flashcl_context_cl_context(ctx);
    cl_mem mems[4] = {device_copy(context, o_partial),
                      device_copy(context, lse_partial),
                      device_copy(context, o), device_copy(context, lse)};
    bool ok = mems[0] && mems[1] && mems[2] && mems[3];
    if (ok) {
        flashcl_combine_desc desc = FLASHCL_COMBINE_DESC_INIT;
        desc.num_partials = P;
        desc.batch = B;
        desc.heads = H;
        desc.seqlen_q = NQ;
        desc.head_dim_v = D;
        desc.o_partial.buffer = mems[0];
        desc.lse_partial.buffer = mems[1];
        desc.o.buffer = mems[2];
        desc.lse.buffer = mems[3];
        cl_command_queue queue = flashcl_context_queue(ctx);
        flashcl_status status =
            flashcl_combine_partials(ctx, nullptr, &desc, 0, nullptr, nullptr);
        if (status != FLASHCL_SUCCESS) {
            std::fprintf(stderr, "flashcl_combine_partials: %s: %s\n",
                         flashcl_status_string(status),
                         flashcl_context_last_error(ctx));
            ok = false;
        } else if (clEnqueueReadBuffer(queue, mems[2], CL_TRUE, 0,
                                       o.size() * sizeof(float), o.data(), 0,
                                       nullptr, nullptr) != CL_SUCCESS ||
                   clEnqueueReadBuffer(queue, mems[3], CL_TRUE, 0,
                                       lse.size() * sizeof(float), lse.data(),
                                       0, nullptr, nullptr) != CL_SUCCESS) {
            std::fprintf(stderr, "reading the merged result failed\n");
            ok = false;
        }
    }
    for (size_t r = 0; ok && r < rows; r++) {
        const int h = static_cast<int>(r / NQ), i = static_cast<int>(r % NQ);
        double m = -HUGE_VAL, sum = 0.0;
        for (int p = 0; p < P; p++)
            m = lse_partial[p * rows + r] > m ? lse_partial[p * rows + r] : m;
        for (int p = 0; p < P; p++)
            sum += std::exp(lse_partial[p * rows + r] - m);
        for (int d = 0; d < D; d++) {
            double acc = 0.0;
            for (int p = 0; p < P; p++)
                acc += std::exp(lse_partial[p * rows + r] - m) *
                       o_partial[(p * rows + r) * D + d];
            ok &= close("combined O", at(i, h, d), o[at(i, h, d)], acc / sum);
        }
        ok &= close("combined LSE", r, lse[r], m + std::log(sum));
    }
    for (cl_mem mem : mems)
        if (mem)
            clReleaseMemObject(mem);
    return ok;
}

} // namespace

int main()
{
    if (flashcl_version_number() != FLASHCL_VERSION_NUMBER) {
        std::fprintf(stderr, "header %s, library %s\n", FLASHCL_VERSION_STRING,
                     flashcl_version_string());
        return 1;
    }
    bool ok = initialisers_set_struct_size();
    flashcl_context *ctx = nullptr;
    if (flashcl_context_create(&ctx, nullptr) != FLASHCL_SUCCESS) {
        std::fprintf(stderr, "%s\n", flashcl_last_create_error());
        return 1;
    }
    unsigned state = 12345;
    ok &= forward_matches_host(ctx, state);
    ok &= combine_matches_host(ctx, state);
    flashcl_context_release(ctx);
    std::printf("C++ %ld consumer: %s\n", static_cast<long>(__cplusplus),
                ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
