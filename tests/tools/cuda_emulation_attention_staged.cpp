// Driver for the CUDA emulation test (test_cuda_emulation.py): the staged split-K decode attention
// (src/ops/attention/attention_split_staged_cuda.cu) over an f16 cache — ldmatrix, ldmatrix .trans and f16 mma
// fragments, a swizzled two-stage cp.async ring — and over an f32 cache, on the host emulation, against a naive
// double reference of each split's partial (m, l, acc). Exit status 0 when every case agrees.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/attention/attention_split.cuh"

namespace deltabit::cuda {
// The kernel file's launch asks whether programmatic launch is on (programmatic_launch.cu, which reads an
// environment switch of the library); launches are sequential here, so either answer runs the same kernel.
bool programmatic_launch_enabled() { return true; }
}  // namespace deltabit::cuda

using namespace deltabit;

namespace {

struct Case {
    cuda::KvElement element;
    int64_t n_past, tokens, n_head, n_kv_head, head_dim, splits;
};

// Returns the number of bad partials.
int run_case(const Case& c, uint32_t seed) {
    const int64_t n = c.n_past + c.tokens, group = c.n_head / c.n_kv_head, d = c.head_dim, S = c.splits;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> q(size_t(c.tokens * c.n_head * d)), k(size_t(n * c.n_kv_head * d)), v(k.size());
    for (auto& x : q) x = 2 * dist(rng);
    for (auto& x : k) x = dist(rng);
    for (auto& x : v) x = dist(rng);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    if (c.element == cuda::KvElement::f16) {  // the reference then sees the cache's f16 values
        for (size_t i = 0; i < k.size(); ++i) k[i] = half_to_float(k16[i] = float_to_half(k[i]));
        for (size_t i = 0; i < v.size(); ++i) v[i] = half_to_float(v16[i] = float_to_half(v[i]));
    }
    const bool f16 = c.element == cuda::KvElement::f16;
    const int32_t n_past = int32_t(c.n_past);
    std::vector<float> acc(size_t(c.tokens * c.n_head * S * d), NAN), ml(size_t(c.tokens * c.n_head * S * 2), NAN);
    cuda::SplitArgs args{q.data(),
                         cuda::plain_kv_view(c.element, f16 ? static_cast<void*>(k16.data()) : k.data()),
                         cuda::plain_kv_view(c.element, f16 ? static_cast<void*>(v16.data()) : v.data()),
                         &n_past,
                         acc.data(),
                         ml.data(),
                         c.tokens,
                         c.n_head,
                         c.n_kv_head,
                         d,
                         S,
                         float(M_LOG2E / std::sqrt(double(d)))};
    if (!cuda::launch_attention_split_staged(dim3(unsigned(S), unsigned(c.n_kv_head), unsigned(c.tokens)), args,
                                             c.element, nullptr)) {
        std::printf("  shape not supported by the staged kernel\n");
        return 1;
    }
    // Per (token, head, split): m = max score (log2 domain), l = Σ 2^(s − m), acc = Σ 2^(s − m) v. The kernel
    // forms q and the weights as f16 hi + lo terms (products of f32 class) and adds at most 75 keys' terms of
    // size ≤ 1 (|v| ≤ 1, weights ≤ 1) in f32: γ_75 = 75 · 2^−24 ≈ 4.5e-6 of l, plus the lo terms' 2^−22 —
    // within 1e-5 (measured worst 3.9e-7); a wrong key, dim or head is off by O(0.01 .. 1).
    const int64_t per_split = cuda::keys_per_split(n, S);
    int bad = 0;
    double worst = 0;
    for (int64_t t = 0; t < c.tokens; ++t)
        for (int64_t h = 0; h < c.n_head; ++h)
            for (int64_t s = 0; s < S; ++s) {
                const int64_t begin = s * per_split, end = std::min(begin + per_split, c.n_past + t + 1);
                const int64_t part = (t * c.n_head + h) * S + s;
                if (begin >= n) continue;  // a split past the cache: the kernel writes nothing
                std::vector<double> score;
                double m = -INFINITY;
                for (int64_t p = begin; p < end; ++p) {
                    double dot = 0;
                    for (int64_t j = 0; j < d; ++j)
                        dot += double(q[size_t((t * c.n_head + h) * d + j)]) *
                               k[size_t((p * c.n_kv_head + h / group) * d + j)];
                    score.push_back(dot * M_LOG2E / std::sqrt(double(d)));
                    m = std::max(m, score.back());
                }
                const float got_m = ml[size_t(2 * part)], got_l = ml[size_t(2 * part + 1)];
                double l = 0, error = 0;
                for (const double x : score) l += std::exp2(x - m);
                if (score.empty()) {
                    error = (got_m == -INFINITY && got_l == 0) ? 0 : INFINITY;
                } else {
                    error = std::fabs(got_m - m) + std::fabs(got_l * std::exp2(got_m - m) - l) / l;
                }
                for (int64_t j = 0; j < d; ++j) {
                    double want = 0;
                    for (size_t i = 0; i < score.size(); ++i)
                        want += std::exp2(score[i] - m) *
                                v[size_t(((begin + int64_t(i)) * c.n_kv_head + h / group) * d + j)];
                    const double got = acc[size_t(part * d + j)] * (score.empty() ? 1.0 : std::exp2(got_m - m));
                    error = std::max(error, std::isnan(got) ? INFINITY : std::fabs(got - want) / std::max(l, 1.0));
                }
                worst = std::max(worst, error);
                if (!(error <= 1e-5) && bad++ < 5)
                    std::printf("  token %lld head %lld split %lld: error %.3g\n", (long long)t, (long long)h,
                                (long long)s, error);
            }
    std::printf("%s d=%lld past=%lld T=%lld H=%lld/%lld splits=%lld: worst %.3g, %s\n", f16 ? "f16" : "f32",
                (long long)d, (long long)c.n_past, (long long)c.tokens, (long long)c.n_head, (long long)c.n_kv_head,
                (long long)S, worst, bad == 0 ? "agrees" : "DISAGREES");
    return bad;
}

}  // namespace

int main() {
    // Splits of 64 keys (the minimum) and fewer keys than a split; partial last tiles; group 1 to 6; the
    // last token sees more keys than the first; a split past the end of the cache.
    const Case cases[] = {
        {cuda::KvElement::f16, 100, 2, 4, 2, 128, 2},
        {cuda::KvElement::f16, 37, 1, 6, 1, 64, 2},
        {cuda::KvElement::f16, 150, 1, 2, 2, 256, 3},
        {cuda::KvElement::f32, 70, 2, 2, 1, 128, 2},
    };
    int bad = 0;
    for (size_t i = 0; i < std::size(cases); ++i) bad += run_case(cases[i], uint32_t(7 + i));
    return bad == 0 ? 0 : 1;
}
