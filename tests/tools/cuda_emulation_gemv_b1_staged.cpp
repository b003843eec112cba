// Driver for the CUDA emulation of gemv_q1_0_b1_staged (src/ops/matmul/gemv_b1_staged_cuda.cu: a cp.async ring
// per warp, the binary m16n8k128 mma from shared memory) against
//   - a naive double reference built from ±1 weights, within the fp32 bound of GemvB1Cuda's test
//     (tests/cuda/test_gemv_cuda.cpp: ceil(groups / S) + 2 + (S − 1) + 3 roundings of Σ|term|, plus one of the
//     reference's);
//   - a host twin of gemv_q1_0_b1's summation order (a lane's units in order by fmaf, the quad by two xor
//     shuffles, the K slices in slice order), bit for bit — the claim the kernel's header makes;
// with NaN-poisoned outputs, a guard band after y and views whose scales start mid-word. The activations' bit
// planes are built here on the host from gemv_b1_cuda.h's description of their layout (its builder lives in a
// file the emulation cannot compile), so a layout misread on either side shows as a wrong y.
// Exit status 0 when every case agrees; otherwise the first disagreements are printed.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "core/half.h"
#include "ops/matmul/gemv_b1_device.cuh"
#include "ops/matmul/gemv_b1_staged_cuda.h"

namespace deltabit {
// The kernel file's host code asks for the row size (weight_repack.cpp, not linked here): Q1_0 only.
size_t gemv_code_row_bytes(DType, int64_t k) { return size_t(k / 8); }
}  // namespace deltabit

namespace deltabit::cuda {
// The launch asks whether programmatic launch is on (programmatic_launch.cu reads an environment switch);
// launches are sequential here, so either answer runs the same kernel.
bool programmatic_launch_enabled() { return true; }
// gemv_b1_cuda.cu's constructor (that file is not compiled here): the planes' bytes, filled by the driver.
ActivationBitPlanes::ActivationBitPlanes(int64_t cols) : buffer(size_t(b1_detail::plane_bytes(cols))), max_cols(cols) {}
}  // namespace deltabit::cuda

using namespace deltabit;

namespace {

constexpr int kGuardFloats = 64;
constexpr float kGuard = 12345.0f;

struct Config {
    cuda::GemvB1StagedConfig c;
    std::string text() const {
        return "warps " + std::to_string(c.warps_per_block) + " splits " + std::to_string(c.splits) + " stages " +
               std::to_string(c.stages) + " groups " + std::to_string(c.stage_groups) + " grid cap " +
               std::to_string(c.max_grid) + (c.balanced_grid ? " balanced" : "");
    }
};

// The planes of gemv_b1_cuda.h: word 0 zero; unit u, word j, parity p at 16-byte word 1 + (u·4 + j)·2 + p,
// its four 32-bit lanes planes p, p + 2, p + 4, p + 6; bit L of a plane is the bit of input 32j + 4·(L % 8) + L / 8.
std::vector<uint32_t> host_planes(const std::vector<int8_t>& q, int64_t units) {
    const int64_t padded = cuda::b1_detail::padded_units(units * 128);
    std::vector<uint32_t> planes(size_t(cuda::b1_detail::plane_bytes(units * 128) / 4), 0);
    for (int64_t u = 0; u < padded; ++u)
        for (int j = 0; j < 4; ++j)
            for (int p = 0; p < 8; ++p) {
                uint32_t bits = 0;
                for (int L = 0; L < 32 && u < units; ++L)
                    if ((int(q[size_t(u * 128 + 32 * j + 4 * (L % 8) + L / 8)]) >> p) & 1) bits |= 1u << L;
                planes[size_t((1 + (u * 4 + j) * 2 + (p & 1)) * 4 + p / 2)] = bits;
            }
    return planes;
}

// y of one row in gemv_q1_0_b1's order with `splits` K slices (float arithmetic as the device's: the product
// d · scale rounded, then one fmaf).
float b1_order(const std::vector<int>& dots, const std::vector<uint16_t>& row_scales,
               const std::vector<cuda::ActivationGroupMeta>& meta, int64_t units, int splits) {
    const int64_t groups = (units + 3) / 4;
    float total = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const int64_t begin = s * groups / splits, end = (s + 1) * groups / splits;
        float lane[4] = {0, 0, 0, 0};
        for (int t = 0; t < 4; ++t)
            for (int64_t i = begin; i < end; ++i) {
                const int64_t u = 4 * i + t;
                if (u >= units) {
                    lane[t] = std::fmaf(0.0f, 0.0f, lane[t]);
                    continue;
                }
                lane[t] = std::fmaf(float(dots[size_t(u)]), half_to_float(row_scales[size_t(u)]) * meta[size_t(u)].scale,
                                    lane[t]);
            }
        const float quad = (lane[0] + lane[1]) + (lane[2] + lane[3]);
        total = s == 0 ? quad : total + quad;
    }
    return total;
}

// One shape: rows `first`.. of an (n + first)-row matrix of K = units · 128 (a view whose scales start mid-word
// when first · units is odd). Returns the number of bad outputs.
int run_case(int64_t n, int64_t units, int64_t first, const std::vector<Config>& configs, uint32_t seed) {
    const int64_t k = units * 128, total_rows = n + first;
    std::mt19937 rng(seed);
    std::vector<uint8_t> bit(size_t(total_rows * k));
    for (auto& b : bit) b = uint8_t(rng() & 1);
    std::vector<uint16_t> scale(size_t(total_rows * units));
    std::uniform_real_distribution<float> scale_dist(0.01f, 0.1f);
    for (auto& s : scale) s = float_to_half(scale_dist(rng));
    // The GEMV layout (ops/matmul/weight_repack.h): in each 32-weight word, bit 8·c + j holds weight 4·j + c.
    std::vector<uint8_t> codes(size_t(total_rows * k / 8), 0);
    for (int64_t r = 0; r < total_rows; ++r)
        for (int64_t w = 0; w < k / 32; ++w)
            for (int j = 0; j < 8; ++j)
                for (int c = 0; c < 4; ++c)
                    if (bit[size_t(r * k + 32 * w + 4 * j + c)]) codes[size_t(r * k / 8 + 4 * w + c)] |= uint8_t(1u << j);
    std::vector<int8_t> q(static_cast<size_t>(k));
    std::uniform_int_distribution<int> code_dist(-127, 127);
    for (auto& x : q) x = int8_t(code_dist(rng));
    std::vector<cuda::ActivationGroupMeta> meta(static_cast<size_t>(units));
    std::uniform_real_distribution<float> act_scale(0.001f, 0.02f);
    for (int64_t g = 0; g < units; ++g) {
        int32_t sum = 0;
        for (int64_t i = 0; i < 128; ++i) sum += q[size_t(g * 128 + i)];
        meta[size_t(g)] = {act_scale(rng), sum};
    }
    const std::vector<uint32_t> planes_host = host_planes(q, units);

    // The scales padded to 16 bytes as upload_gemv_weights pads them (a 4-byte word holding the last scale
    // may reach past it); the padding is never a term.
    cuda::DeviceBuffer d_codes(codes.size()), d_scales((scale.size() * 2 + 15) / 16 * 16), d_q(q.size()),
        d_meta(meta.size() * sizeof(meta[0])), d_y(size_t(n + kGuardFloats) * sizeof(float));
    d_codes.upload(codes.data(), codes.size());
    d_scales.upload(scale.data(), scale.size() * 2);
    d_q.upload(q.data(), q.size());
    d_meta.upload(meta.data(), d_meta.bytes());
    cuda::ActivationBitPlanes planes(k);
    planes.buffer.upload(planes_host.data(), planes_host.size() * 4);
    const cuda::QuantizedActivationsView x{d_q.get<int8_t>(), d_meta.get<cuda::ActivationGroupMeta>(), k};
    const cuda::GemvWeightView all{d_codes.get<uint8_t>(), d_scales.get<uint16_t>(), DType::Q1_0, total_rows, k};
    const cuda::GemvWeightView w = all.slice_rows(first, n);

    // The exact integer dots per (row, unit), the reference and the bound's magnitude per row.
    std::vector<std::vector<int>> dots(static_cast<size_t>(n), std::vector<int>(static_cast<size_t>(units)));
    std::vector<double> exact(static_cast<size_t>(n)), magnitude(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r)
        for (int64_t u = 0; u < units; ++u) {
            int dot = 0;
            for (int64_t i = 0; i < 128; ++i)
                dot += (bit[size_t((first + r) * k + u * 128 + i)] ? 1 : -1) * q[size_t(u * 128 + i)];
            dots[size_t(r)][size_t(u)] = dot;
            const double term =
                double(dot) * half_to_float(scale[size_t((first + r) * units + u)]) * meta[size_t(u)].scale;
            exact[size_t(r)] += term;
            magnitude[size_t(r)] += std::fabs(term);
        }

    int bad = 0;
    const double unit_roundoff = std::ldexp(1.0, -24);
    for (const Config& config : configs) {
        const std::vector<float> guard(kGuardFloats, kGuard);
        std::vector<float> poison(size_t(n), NAN);
        d_y.upload(poison.data(), poison.size() * sizeof(float));
        d_y.upload(guard.data(), guard.size() * sizeof(float), size_t(n) * sizeof(float));
        const cuda::GemvB1StagedLaunch launch = cuda::gemv_q1_0_b1_staged(x, planes, w, d_y.get<float>(), nullptr, config.c);
        std::vector<float> y(size_t(n + kGuardFloats));
        d_y.download(y.data(), y.size() * sizeof(float));
        const int S = config.c.splits;
        const int64_t groups = (units + 3) / 4;
        const int64_t depth = (groups + S - 1) / S + 2 + (S - 1) + 3;
        int case_bad = 0, twin_differs = 0;
        for (int64_t r = 0; r < n; ++r) {
            const double got = y[size_t(r)];
            const double bound = double(depth) * unit_roundoff * magnitude[size_t(r)] +
                                 unit_roundoff * std::fabs(exact[size_t(r)]);
            if (!(std::fabs(got - exact[size_t(r)]) <= bound) && case_bad++ < 3)
                std::printf("  N=%lld K=%lld first %lld, %s: y[%lld] = %.9g, reference %.9g (bound %.3g)\n",
                            (long long)n, (long long)k, (long long)first, config.text().c_str(), (long long)r, got,
                            exact[size_t(r)], bound);
            const std::vector<uint16_t> row_scales(scale.begin() + (first + r) * units,
                                                   scale.begin() + (first + r + 1) * units);
            const float twin = b1_order(dots[size_t(r)], row_scales, meta, units, S);
            if (std::memcmp(&twin, &y[size_t(r)], sizeof twin) != 0 && twin_differs++ < 3)
                std::printf("  N=%lld K=%lld first %lld, %s: y[%lld] = %.9g, gemv_q1_0_b1's order gives %.9g\n",
                            (long long)n, (long long)k, (long long)first, config.text().c_str(), (long long)r, got,
                            twin);
        }
        for (int i = 0; i < kGuardFloats; ++i)
            if (y[size_t(n + i)] != kGuard && case_bad++ < 3)
                std::printf("  N=%lld K=%lld, %s: guard float %d after y overwritten\n", (long long)n, (long long)k,
                            config.text().c_str(), i);
        std::printf("N=%lld K=%lld first %lld, %s (grid %lld, %zu bytes): %s\n", (long long)n, (long long)k,
                    (long long)first, config.text().c_str(), (long long)launch.grid, launch.smem_bytes,
                    case_bad + twin_differs == 0 ? "agrees" : "DISAGREES");
        bad += case_bad + twin_differs;
    }
    return bad;
}

}  // namespace

int main() {
    // Configs: K slices 1 to 8; rings of 2 to 8 stages of 1 to 8 groups; grids capped so that blocks walk
    // several rounds (the ring running across tiles and the round barrier's two buffers), one of them balanced
    // (9 tiles on a cap of 4 blocks: 3 blocks of 3 rounds); one warp alone.
    auto config = [](int warps, int splits, int stages, int groups, int max_grid, bool balanced = false) {
        cuda::GemvB1StagedConfig c;
        c.balanced_grid = balanced;
        c.warps_per_block = warps;
        c.splits = splits;
        c.stages = stages;
        c.stage_groups = groups;
        c.max_grid = max_grid;
        return Config{c};
    };
    const std::vector<Config> configs = {config(8, 4, 4, 2, 0), config(8, 8, 2, 1, 2), config(4, 1, 3, 8, 1),
                                         config(6, 3, 6, 2, 0), config(1, 1, 2, 1, 1), config(8, 2, 8, 2, 3),
                                         config(4, 4, 4, 4, 0), config(8, 8, 2, 1, 4, true)};
    struct Case {
        int64_t n, units, first;
    };
    // Rows off multiples of 16 and below one tile; K = 128, 384, 640 (partial unit groups: units past the row
    // within a group) and 16 · 128 (slices of whole groups, a stage's worth in each); odd units with an odd
    // first row (scales starting mid-word, rows alternating between word offsets).
    const Case cases[] = {{5, 1, 0}, {17, 3, 1}, {45, 5, 0}, {33, 16, 0}, {70, 9, 3}, {130, 40, 0}};
    int bad = 0;
    for (const Case& c : cases) bad += run_case(c.n, c.units, c.first, configs, uint32_t(c.n * 131 + c.units));
    return bad == 0 ? 0 : 1;
}
