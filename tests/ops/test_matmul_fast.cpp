// The CPU fast matmul (ops/cpu_fast/matmul_cpu_fast.h) against the naive reference (ops/reference/matmul_cpu.cpp), over hostile
// shapes (N = 1, 63, 65, 127, 129, 1037; K an odd number of blocks; T = 1 … 9, across the 4-token tile), every
// weight dtype, every instruction set this CPU has, and 1 to 4 threads; outputs NaN-poisoned and guarded.
//
// Bounds (u = 2⁻²⁴, γ_m = m·u / (1 − m·u), the classic bound on m fp32 roundings along any summation path):
//  * f32 mode: the reference sums in double and rounds once; the fast path sums K products in fp32 lanes then
//    reduces the lanes, at most K + 8 roundings deep, so |fast − ref| ≤ γ_{K+8}·Σ|w·x| + u·|ref|.
//  * int8 mode against the exact int8 product E = Σ_blocks d·s·Σ level·q (computed here in double, exact:
//    the fp16 d, a level ≤ 8 bits, q 8 bits and the fp32 s multiply to ≤ 51 significant bits): each block's
//    integer value is exact in int32; the kernels multiply it by fp32(d·s) (one rounding; Q1_0's and Q2_0's
//    offset term Σq a second one) and add it to one of ≤ 16 fp32 lanes, nb blocks deep, then reduce ≤ 16
//    lanes (4 levels) and add the offset sum: at most nb + 8 roundings on terms whose magnitudes add up to at
//    most M = Σ_i |d·s|·(|level_i| + 2)·|q_i| (the kernels split a Q1_0 block into 2·Σ_{set} q − Σ q and a
//    Q2_0 block into Σ c·q − Σ q with c = level + 1, whose parts are bounded by (|level| + 2)·|q|). So
//    |fast − E| ≤ γ_{nb+8}·M — checked on every element.
//  * int8 mode against the f32 reference: q = rne(fp32(x · inv)) with inv = fp32(127/max|x|) and s =
//    fp32(max|x|/127), so s·inv = 1 + ε with |ε| ≤ 2u + u², |fp32(x·inv) − x·inv| ≤ u·127, and
//    q·s − x = s·(q − x·inv) + x·(s·inv − 1) gives |q·s − x| ≤ s/2 + s·127·u + max|x|·(2u + u²) ≤ s·(1/2 + 400u)
//    (max|x| = 127·s·(1 + u)). The clamp to ±127 never binds (|x·inv| ≤ 127·(1 + 3u) rounds to ≤ 127). Hence
//    |E − exact| ≤ Σ_i |w_i|·s_i·(1/2 + 400u), and |fast − ref| ≤ that + γ_{nb+8}·M + u·|ref|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "ops/matmul.h"
#include "ops/cpu_fast/matmul_cpu_fast.h"

namespace deltabit {
namespace {

constexpr double kUnit = 0x1p-24;  // fp32 unit roundoff
double gamma(double m) { return m * kUnit / (1.0 - m * kUnit); }

constexpr DType kQuantized[] = {DType::Q8_0, DType::Q4_0, DType::Q1_0, DType::Q2_0, DType::Q2_0_G64};
constexpr DType kAllWeights[] = {DType::F32,  DType::F16,  DType::BF16,    DType::Q8_0,
                                 DType::Q4_0, DType::Q1_0, DType::Q2_0, DType::Q2_0_G64};

struct Shape {
    int64_t rows, blocks, tokens;
};
// Rows across the row-group (16) and task boundaries; odd numbers of blocks; tokens around the tile of 4.
constexpr Shape kShapes[] = {{1, 1, 1},  {63, 3, 1},  {65, 1, 5},  {127, 5, 4},
                             {129, 3, 9}, {1037, 9, 1}, {1037, 3, 3}, {64, 33, 2}};

// Random stored weights: every code byte random (all levels, Q8_0's −128 included), fp16 scales of random
// sign and magnitude 2⁻⁸…2⁻¹; plain-float types hold N(0, 1) values.
std::vector<uint8_t> random_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    const WeightView shape{nullptr, t, rows, cols};
    std::vector<uint8_t> bytes(shape.row_bytes() * size_t(rows));
    if (!is_quantized(t)) {
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t r = 0; r < rows; ++r) {
            for (float& v : row) v = normal(rng);
            quantize_row(t, row.data(), bytes.data() + size_t(r) * shape.row_bytes(), cols);
        }
        return bytes;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& b : bytes) b = uint8_t(byte(rng));
    std::uniform_real_distribution<float> magnitude(-8.0f, -1.0f);
    const size_t block_bytes = dtype_info(t).block_bytes;
    for (size_t at = 0; at < bytes.size(); at += block_bytes) {
        const float d = std::exp2(magnitude(rng)) * (byte(rng) & 1 ? 1.0f : -1.0f);
        const uint16_t h = float_to_half(d);
        std::memcpy(bytes.data() + at, &h, 2);
    }
    return bytes;
}

// Activations with the spread of a real hidden state: N(0, 1) with a few outliers ×20, and one all-zero group.
std::vector<float> random_activations(int64_t tokens, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, 63);
    std::vector<float> x(size_t(tokens * cols));
    for (float& v : x) v = normal(rng) * (pick(rng) == 0 ? 20.0f : 1.0f);
    if (cols >= 64) std::fill_n(x.begin(), 32, 0.0f);
    return x;
}

// One group rounded as ops/matmul.h states (restated here naively as the oracle of the rounding).
void round_group(const float* x, int64_t n, int8_t* q, float* s) {
    float amax = 0.0f;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
    *s = amax / 127.0f;
    for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
}

struct Int8Oracle {
    std::vector<double> exact;      // E, [T][N]
    std::vector<double> magnitude;  // M, [T][N]
    std::vector<double> rounding;   // Σ|w|·s·(1/2 + 400u), [T][N]
};

// The exact int8 products of the int8 mode, from the dequantised weights (exact in fp32: quant.h).
Int8Oracle int8_oracle(const float* x, const WeightView& w, int64_t T) {
    const int64_t K = w.cols, N = w.rows, G = cpu_fast::int8_group(w.dtype);
    std::vector<float> dq(static_cast<size_t>(K));
    std::vector<int8_t> q(static_cast<size_t>(K));
    std::vector<float> s(static_cast<size_t>(K / G));
    Int8Oracle o{std::vector<double>(size_t(T * N)), std::vector<double>(size_t(T * N)), std::vector<double>(size_t(T * N))};
    const int64_t block = dtype_info(w.dtype).block_elems;
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t g = 0; g < K / G; ++g) round_group(x + t * K + g * G, G, q.data() + g * G, &s[size_t(g)]);
        for (int64_t n = 0; n < N; ++n) {
            dequantize_row(w.dtype, w.row(n), dq.data(), K);
            double e = 0, m = 0, r = 0;
            for (int64_t i = 0; i < K; ++i) {
                const double si = s[size_t(i / G)];
                const auto* row = static_cast<const uint8_t*>(w.row(n));
                const double d = half_to_float(uint16_t(row[(i / block) * dtype_info(w.dtype).block_bytes] |
                                                        row[(i / block) * dtype_info(w.dtype).block_bytes + 1] << 8));
                const double lvl = d == 0.0 ? 0.0 : double(dq[size_t(i)]) / d;
                e += double(dq[size_t(i)]) * q[size_t(i)] * si;
                m += std::fabs(d * si) * (std::fabs(lvl) + 2.0) * std::abs(int(q[size_t(i)]));
                r += std::fabs(double(dq[size_t(i)])) * si * (0.5 + 400 * kUnit);
            }
            o.exact[size_t(t * N + n)] = e;
            o.magnitude[size_t(t * N + n)] = m;
            o.rounding[size_t(t * N + n)] = r;
        }
    }
    return o;
}

// Σ|w·x| per output, for the f32 bound.
std::vector<double> abs_products(const float* x, const WeightView& w, int64_t T) {
    std::vector<float> dq(static_cast<size_t>(w.cols));
    std::vector<double> out(size_t(T * w.rows));
    for (int64_t n = 0; n < w.rows; ++n) {
        dequantize_row(w.dtype, w.row(n), dq.data(), w.cols);
        for (int64_t t = 0; t < T; ++t) {
            double m = 0;
            for (int64_t i = 0; i < w.cols; ++i) m += std::fabs(double(dq[size_t(i)]) * x[t * w.cols + i]);
            out[size_t(t * w.rows + n)] = m;
        }
    }
    return out;
}

constexpr int kGuard = 16;
const float kGuardValue = -12345.5f;

// The fast path into a NaN-poisoned buffer with guard values past its end; the guards are checked.
std::vector<float> run_fast(const float* x, const WeightView& w, int64_t T, cpu_fast::Activations a, int threads,
                            cpu_fast::Isa isa) {
    ThreadPool pool(threads);
    std::vector<float> y(size_t(T * w.rows) + kGuard, std::numeric_limits<float>::quiet_NaN());
    std::fill(y.end() - kGuard, y.end(), kGuardValue);
    cpu_fast::matmul(x, w, T, y.data(), a, pool, isa);
    for (int i = 0; i < kGuard; ++i) EXPECT_EQ(y[y.size() - kGuard + size_t(i)], kGuardValue) << "guard " << i;
    y.resize(y.size() - kGuard);
    return y;
}

std::string label(DType t, const Shape& s, cpu_fast::Isa isa, int threads) {
    return std::string(dtype_name(t)) + " N=" + std::to_string(s.rows) + " blocks=" + std::to_string(s.blocks) +
           " T=" + std::to_string(s.tokens) + " " + std::string(cpu_fast::isa_name(isa)) + " threads=" +
           std::to_string(threads);
}

int64_t cols_of(DType t, const Shape& s) {
    // Plain-float types have no block: give them the Q1_0 block's width so K is odd multiples of 128, plus 7
    // to leave a scalar tail after the 16- and 8-wide steps.
    return is_quantized(t) ? s.blocks * int64_t(dtype_info(t).block_elems) : s.blocks * 128 + 7;
}

TEST(MatmulFast, Int8ModeWithinTheDerivedBoundsOfTheExactInt8AndTheF32Reference) {
    int cases = 0;
    for (DType t : kQuantized) {
        for (const Shape& s : kShapes) {
            const int64_t K = cols_of(t, s), T = s.tokens;
            const std::vector<uint8_t> bytes = random_weights(t, s.rows, K, uint32_t(K * 31 + s.rows));
            const WeightView w{bytes.data(), t, s.rows, K};
            const std::vector<float> x = random_activations(T, K, uint32_t(s.rows + 7 * K));
            const Int8Oracle o = int8_oracle(x.data(), w, T);
            std::vector<float> ref(size_t(T * s.rows));
            cpu::matmul(x.data(), w, T, ref.data());
            const double g = gamma(double(K / dtype_info(t).block_elems) + 8);
            for (cpu_fast::Isa isa : cpu_fast::supported_isas()) {
                std::vector<float> first;
                for (int threads = 1; threads <= 4; ++threads) {
                    const std::vector<float> y = run_fast(x.data(), w, T, cpu_fast::Activations::int8, threads, isa);
                    const std::string what = label(t, s, isa, threads);
                    for (size_t i = 0; i < y.size(); ++i) {
                        ASSERT_TRUE(std::isfinite(y[i])) << what << " element " << i;
                        ASSERT_LE(std::fabs(y[i] - o.exact[i]), g * o.magnitude[i]) << what << " element " << i;
                        ASSERT_LE(std::fabs(double(y[i]) - ref[i]),
                                  o.rounding[i] + g * o.magnitude[i] + kUnit * std::fabs(ref[i]))
                            << what << " element " << i;
                    }
                    if (first.empty())
                        first = y;
                    else
                        ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float)))
                            << what << ": the result depends on the thread count";
                    ++cases;
                }
            }
        }
    }
    EXPECT_GE(cases, 5 * 8 * 4);
}

TEST(MatmulFast, F32ModeWithinFp32RoundingOfTheReferenceForEveryDtype) {
    for (DType t : kAllWeights) {
        for (const Shape& s : kShapes) {
            const int64_t K = cols_of(t, s), T = s.tokens;
            const std::vector<uint8_t> bytes = random_weights(t, s.rows, K, uint32_t(K * 17 + s.rows));
            const WeightView w{bytes.data(), t, s.rows, K};
            const std::vector<float> x = random_activations(T, K, uint32_t(s.rows + 3 * K));
            std::vector<float> ref(size_t(T * s.rows));
            cpu::matmul(x.data(), w, T, ref.data());
            const std::vector<double> m = abs_products(x.data(), w, T);
            const double g = gamma(double(K) + 8);
            for (cpu_fast::Isa isa : cpu_fast::supported_isas()) {
                std::vector<float> first;
                for (int threads = 1; threads <= 4; ++threads) {
                    const std::vector<float> y = run_fast(x.data(), w, T, cpu_fast::Activations::f32, threads, isa);
                    const std::string what = label(t, s, isa, threads);
                    for (size_t i = 0; i < y.size(); ++i)
                        ASSERT_LE(std::fabs(double(y[i]) - ref[i]), g * m[i] + kUnit * std::fabs(ref[i]))
                            << what << " element " << i;
                    if (first.empty())
                        first = y;
                    else
                        ASSERT_EQ(0, std::memcmp(first.data(), y.data(), y.size() * sizeof(float))) << what;
                }
            }
        }
    }
}

// The int8 mode rounds (so the bound test above is not comparing f32 with itself): on every quantised type
// some outputs differ from the f32 mode.
TEST(MatmulFast, Int8ModeReallyRoundsTheActivations) {
    ThreadPool pool(2);
    for (DType t : kQuantized) {
        const int64_t K = 3 * int64_t(dtype_info(t).block_elems), N = 65;
        const std::vector<uint8_t> bytes = random_weights(t, N, K, 5);
        const WeightView w{bytes.data(), t, N, K};
        const std::vector<float> x = random_activations(1, K, 6);
        std::vector<float> a(static_cast<size_t>(N)), b(static_cast<size_t>(N));
        const cpu_fast::Counters before = cpu_fast::counters();
        cpu_fast::matmul(x.data(), w, 1, a.data(), cpu_fast::Activations::int8, pool);
        cpu_fast::matmul(x.data(), w, 1, b.data(), cpu_fast::Activations::f32, pool);
        const cpu_fast::Counters after = cpu_fast::counters();
        EXPECT_EQ(after.int8 - before.int8, 1) << dtype_name(t);
        EXPECT_EQ(after.f32 - before.f32, 1) << dtype_name(t);
        int differ = 0;
        for (int64_t n = 0; n < N; ++n) differ += a[size_t(n)] != b[size_t(n)];
        EXPECT_GT(differ, N / 2) << dtype_name(t);
    }
}

// A prompt's tokens computed together (tiles of 4) give the bits each token gives alone (decode).
TEST(MatmulFast, TokenTilingDoesNotChangeABit) {
    ThreadPool pool(3);
    for (DType t : kAllWeights) {
        for (cpu_fast::Activations a : {cpu_fast::Activations::f32, cpu_fast::Activations::int8}) {
            const int64_t K = is_quantized(t) ? 5 * int64_t(dtype_info(t).block_elems) : 647, N = 129, T = 11;
            const std::vector<uint8_t> bytes = random_weights(t, N, K, 9);
            const WeightView w{bytes.data(), t, N, K};
            const std::vector<float> x = random_activations(T, K, 10);
            for (cpu_fast::Isa isa : cpu_fast::supported_isas()) {
                std::vector<float> together(size_t(T * N)), alone(static_cast<size_t>(N));
                cpu_fast::matmul(x.data(), w, T, together.data(), a, pool, isa);
                for (int64_t tok = 0; tok < T; ++tok) {
                    cpu_fast::matmul(x.data() + tok * K, w, 1, alone.data(), a, pool, isa);
                    ASSERT_EQ(0, std::memcmp(alone.data(), together.data() + tok * N, size_t(N) * sizeof(float)))
                        << dtype_name(t) << " " << cpu_fast::isa_name(isa) << " token " << tok;
                }
            }
        }
    }
}

// The int8 mode's rounding is the reference's (cpu::matmul_int8_activations with the weight's block as the
// group): the fast result lies within the fp32-summation bound of that naive product, whose own rounding of
// q·s to fp32 adds u per term.
TEST(MatmulFast, Int8ModeMatchesTheNaiveInt8Reference) {
    ThreadPool pool(2);
    for (DType t : kQuantized) {
        const int64_t K = 7 * int64_t(dtype_info(t).block_elems), N = 127, T = 5;
        const std::vector<uint8_t> bytes = random_weights(t, N, K, 21);
        const WeightView w{bytes.data(), t, N, K};
        const std::vector<float> x = random_activations(T, K, 22);
        std::vector<float> naive(size_t(T * N));
        cpu::matmul_int8_activations(x.data(), w, T, naive.data(), cpu_fast::int8_group(t));
        const Int8Oracle o = int8_oracle(x.data(), w, T);
        const double g = gamma(7 + 8);
        const std::vector<float> y = run_fast(x.data(), w, T, cpu_fast::Activations::int8, 2, cpu_fast::best_isa());
        for (size_t i = 0; i < y.size(); ++i)
            ASSERT_LE(std::fabs(double(y[i]) - naive[i]), (g + kUnit) * o.magnitude[i] + kUnit * std::fabs(naive[i]))
                << dtype_name(t) << " element " << i;
    }
}

TEST(MatmulFast, ThisMachineRunsAVectorPath) {
    const std::vector<cpu_fast::Isa> isas = cpu_fast::supported_isas();
    ASSERT_FALSE(isas.empty());
    EXPECT_EQ(isas.front(), cpu_fast::Isa::scalar);
    EXPECT_EQ(cpu_fast::best_isa(), isas.back());
    std::printf("[ cpu ] instruction sets: ");
    for (cpu_fast::Isa isa : isas) std::printf("%s ", std::string(cpu_fast::isa_name(isa)).c_str());
    std::printf("(best %s)\n", std::string(cpu_fast::isa_name(cpu_fast::best_isa())).c_str());
}

}  // namespace
}  // namespace deltabit
