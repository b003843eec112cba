// Rung 5 of the correctness ladder (DESIGN.md §6), the distribution gates: a lossy path's next-token
// distribution against an exact one's, per depth bin — mean KL(exact ‖ lossy) < 0.005, p99 KL < 0.05,
// top-1 agreement ≥ 96.5%. The thresholds are DESIGN.md's, fixed before the first run; never widen them.
// Shared by the KV-format gates (test_kivi_gates.cpp) and the GPU-against-CPU gates on the trained
// default model (tests/cuda/test_default_model_gates_cuda.cpp).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace deltabit::test {

inline constexpr double kMaxMeanKl = 0.005;
inline constexpr double kMaxP99Kl = 0.05;
inline constexpr double kMinTop1 = 0.965;

struct DepthBin {
    int64_t first, end;  // positions [first, end)
};
inline constexpr DepthBin kBins[] = {{0, 128}, {128, 512}, {512, 1024}, {1024, 2048}, {2048, 4096}};

inline std::vector<double> log_softmax(const float* logits, int64_t n) {
    const double top = *std::max_element(logits, logits + n);
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - top);
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(logits[i]) - top - std::log(sum);
    return out;
}

inline int64_t argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

struct BinResult {
    DepthBin bin;
    int64_t n = 0;
    double mean_kl = 0.0, p99_kl = 0.0, top1 = 0.0;
};

// Per depth bin over one or more windows (`window` positions each, every window a fresh sequence from
// depth 0; 0: one window of every position).
inline std::vector<BinResult> compare_by_depth(const std::vector<float>& exact, const std::vector<float>& lossy,
                                        int64_t vocab, int64_t window = 0) {
    const int64_t total = int64_t(exact.size()) / vocab;
    const int64_t length = window > 0 ? window : total;
    std::vector<BinResult> out;
    for (const DepthBin& bin : kBins) {
        if (bin.first >= length) break;
        std::vector<double> kl;
        int64_t agree = 0;
        for (int64_t w = 0; w < total; w += length)
        for (int64_t t = w + bin.first; t < w + std::min(bin.end, length); ++t) {
            const float* p = exact.data() + t * vocab;
            const float* q = lossy.data() + t * vocab;
            const std::vector<double> lp = log_softmax(p, vocab), lq = log_softmax(q, vocab);
            double d = 0.0;
            for (int64_t i = 0; i < vocab; ++i) d += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
            kl.push_back(std::max(d, 0.0));  // a sum of tiny terms can land a hair below zero
            agree += argmax(p, vocab) == argmax(q, vocab);
        }
        BinResult r{bin, int64_t(kl.size())};
        for (double d : kl) r.mean_kl += d / double(kl.size());
        std::sort(kl.begin(), kl.end());
        r.p99_kl = kl[size_t(std::ceil(0.99 * double(kl.size()))) - 1];  // nearest rank
        r.top1 = double(agree) / double(kl.size());
        out.push_back(r);
    }
    return out;
}

// One line per bin: "[ gate ] WHAT depth A-B  n N  mean KL …  p99 KL …  top-1 …%".
inline void print_table(const std::string& what, const std::vector<BinResult>& bins) {
    for (const BinResult& r : bins)
        std::printf("[ gate ] %-28s depth %4lld-%-4lld  n %4lld  mean KL %.2e  p99 KL %.2e  top-1 %6.2f%%\n",
                    what.c_str(), static_cast<long long>(r.bin.first), static_cast<long long>(r.bin.end - 1),
                    static_cast<long long>(r.n), r.mean_kl, r.p99_kl, 100.0 * r.top1);
}

inline void expect_gates(const std::string& what, const std::vector<BinResult>& bins) {
    for (const BinResult& r : bins) {
        const std::string where = what + " depth " + std::to_string(r.bin.first) + "-" + std::to_string(r.bin.end - 1);
        EXPECT_LT(r.mean_kl, kMaxMeanKl) << where;
        EXPECT_LT(r.p99_kl, kMaxP99Kl) << where;
        EXPECT_GE(r.top1, kMinTop1) << where;
    }
}

}  // namespace deltabit::test
