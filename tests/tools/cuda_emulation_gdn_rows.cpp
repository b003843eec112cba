// Driver of tests/tools/cuda_emulation_gdn_rows.sh: the rows forms of the gated DeltaNet decode step
// (gdn_decode_prepare_rows, gdn_decode_recurrent_rows) over B = 1, 3, 5 rows against B single calls, bit for
// bit — every output, written window and state, and the old window and state of rows that write elsewhere
// untouched — and each case's first single call against the CPU chain (conv1d → l2_norm → gdn_gates → delta
// rule → gated_rms_norm) within a loose relative bound, since the emulation's libm and FMA contraction are
// the host's. Rows mix in place and ping-pong windows and states. The recurrent kernel runs where its
// clusters are one block (value_dim <= 32); larger shapes run the prepare kernel only. Exit status 0 when
// every case agrees.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ops/conv1d.h"
#include "ops/delta_rule.h"
#include "ops/delta_rule/delta_rule_cuda.h"
#include "ops/gated_rms_norm.h"
#include "ops/gdn_gates.h"
#include "ops/l2_norm.h"

namespace deltabit::cuda {
bool programmatic_launch_enabled() { return true; }
// The quantised output is not emulated here (matmul_cuda.cu would pull in the matmul kernels).
void require_plain_view(const QuantizedActivationsView&, const char*) { emu::fail("quantised output not emulated"); }
}  // namespace deltabit::cuda

using namespace deltabit;

namespace {

int failures = 0;

std::vector<float> uniform(size_t n, std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> x(n);
    for (float& v : x) v = d(rng);
    return x;
}

// A device (host, poisoned by cudaMalloc) copy of x, or n poisoned floats.
float* dev(const std::vector<float>& x) {
    void* p = nullptr;
    cudaMalloc(&p, std::max<size_t>(x.size(), 1) * sizeof(float));
    if (!x.empty()) std::memcpy(p, x.data(), x.size() * sizeof(float));
    return static_cast<float*>(p);
}
float* dev(int64_t n) {
    void* p = nullptr;
    cudaMalloc(&p, std::max<size_t>(size_t(n), 1) * sizeof(float));
    return static_cast<float*>(p);
}

bool same(const float* got, const float* want, int64_t n, const std::string& what) {
    for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(want[i])) {
            std::printf("FAIL %s: reference [%lld] is %g\n", what.c_str(), (long long)i, want[i]);
            ++failures;
            return false;
        }
        if (std::memcmp(got + i, want + i, 4) != 0) {
            std::printf("FAIL %s: [%lld] is %g, want %g\n", what.c_str(), (long long)i, got[i], want[i]);
            ++failures;
            return false;
        }
    }
    return true;
}

void near_reference(const float* got, const std::vector<float>& want, double tol, const std::string& what) {
    double scale = 0, worst = 0;
    for (float w : want) scale = std::max(scale, double(std::fabs(w)));
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    if (!(worst <= tol * std::max(scale, 1e-30))) {
        std::printf("FAIL %s vs the CPU reference: worst %g, scale %g\n", what.c_str(), worst, scale);
        ++failures;
    }
}

// recurrent: false runs only the prepare kernel (shapes whose recurrent clusters exceed one block).
void run(const cuda::GdnDecodeDims& d, int64_t B, bool recurrent, uint32_t seed) {
    const int64_t Hk = d.n_key_heads, Hv = d.n_value_heads, dk = d.key_dim, dv = d.value_dim, K = d.conv_kernel;
    const int64_t C = 2 * Hk * dk + Hv * dv, W = (K - 1) * C, QK = Hk * dk, V = Hv * dv, S = Hv * dk * dv;
    std::mt19937 rng(seed);
    const auto conv_w = uniform(size_t(C * K), rng, -1, 1), ssm_a = uniform(size_t(Hv), rng, -8, -0.1f),
               dt = uniform(size_t(Hv), rng, -1, 1), norm_w = uniform(size_t(dv), rng, 0.5f, 1.5f);
    const auto mixed = uniform(size_t(B * C), rng, -2, 2), b = uniform(size_t(B * Hv), rng, -4, 4),
               a = uniform(size_t(B * Hv), rng, -4, 4), z = uniform(size_t(B * V), rng, -4, 4);
    std::vector<std::vector<float>> windows, states;
    for (int64_t i = 0; i < B; ++i) {
        windows.push_back(uniform(size_t(W), rng, -2, 2));
        states.push_back(uniform(size_t(S), rng, -0.5f, 0.5f));
    }
    float *dw = dev(conv_w), *dssm = dev(ssm_a), *ddt = dev(dt), *dnorm = dev(norm_w), *dmixed = dev(mixed),
          *db = dev(b), *da = dev(a), *dz = dev(z);
    // Rows alternate: even rows in place, odd rows elsewhere; the conv and state the other way round on rows 4k+2/3.
    auto conv_in_place = [](int64_t i) { return i % 2 == 0; };
    auto state_in_place = [](int64_t i) { return (i % 4 < 2) == (i % 2 == 0); };
    std::vector<cuda::GdnDecodeRow> table;
    std::vector<float*> conv_written, state_written;
    for (int64_t i = 0; i < B; ++i) {
        float* cin = dev(windows[size_t(i)]);
        float* cout = conv_in_place(i) ? cin : dev(W);
        float* sin = dev(states[size_t(i)]);
        float* sout = state_in_place(i) ? sin : dev(S);
        table.push_back({cin, cout, sin, sout});
        conv_written.push_back(cout);
        state_written.push_back(sout);
    }
    void* dtable = nullptr;
    cudaMalloc(&dtable, table.size() * sizeof(cuda::GdnDecodeRow));
    std::memcpy(dtable, table.data(), table.size() * sizeof(cuda::GdnDecodeRow));
    const auto* rows = static_cast<const cuda::GdnDecodeRow*>(dtable);
    float *q = dev(B * QK), *k = dev(B * QK), *v = dev(B * V), *beta = dev(B * Hv), *g = dev(B * Hv), *out = dev(B * V);
    cuda::gdn_decode_prepare_rows(dmixed, db, da, dw, rows, B, dssm, ddt, d, 1e-6f, q, k, v, beta, g, nullptr);
    if (recurrent) cuda::gdn_decode_recurrent_rows(q, k, v, beta, g, dz, dnorm, 1e-6f, d, rows, B, out, nullptr);

    char name[160];
    std::snprintf(name, sizeof name, "H %lld/%lld dk %lld dv %lld K %lld %s, %lld rows%s", (long long)Hk, (long long)Hv,
                  (long long)dk, (long long)dv, (long long)K,
                  d.key_head_map == cpu::KeyHeadMap::tiled ? "tiled" : "grouped", (long long)B,
                  recurrent ? "" : " (prepare only)");
    const int before = failures;
    for (int64_t i = 0; i < B; ++i) {
        const std::string what = std::string(name) + ", row " + std::to_string(i);
        float* cin = dev(windows[size_t(i)]);
        float* cout = conv_in_place(i) ? cin : dev(W);
        float* sin = dev(states[size_t(i)]);
        float* sout = state_in_place(i) ? sin : dev(S);
        float *rq = dev(QK), *rk = dev(QK), *rv = dev(V), *rbeta = dev(Hv), *rg = dev(Hv), *rout = dev(V);
        cuda::gdn_decode_prepare(dmixed + i * C, db + i * Hv, da + i * Hv, dw, cin, cout, dssm, ddt, d, 1e-6f, rq, rk,
                                 rv, rbeta, rg, nullptr);
        if (recurrent)
            cuda::gdn_decode_recurrent(rq, rk, rv, rbeta, rg, dz + i * V, dnorm, 1e-6f, d, sin, sout, rout, nullptr);
        same(q + i * QK, rq, QK, what + " q");
        same(k + i * QK, rk, QK, what + " k");
        same(v + i * V, rv, V, what + " v");
        same(beta + i * Hv, rbeta, Hv, what + " beta");
        same(g + i * Hv, rg, Hv, what + " g");
        same(conv_written[size_t(i)], cout, W, what + " conv window");
        if (!conv_in_place(i) && std::memcmp(table[size_t(i)].conv_in, windows[size_t(i)].data(), size_t(W) * 4) != 0) {
            std::printf("FAIL %s: old window changed\n", what.c_str());
            ++failures;
        }
        if (recurrent) {
            same(out + i * V, rout, V, what + " out");
            same(state_written[size_t(i)], sout, S, what + " state");
            if (!state_in_place(i) &&
                std::memcmp(table[size_t(i)].state_in, states[size_t(i)].data(), size_t(S) * 4) != 0) {
                std::printf("FAIL %s: old state changed\n", what.c_str());
                ++failures;
            }
        }
        // The single call itself against the CPU chain (row 0 of each case; fp32 vs double, loosely).
        if (i == 0) {
            std::vector<float> conv_out(static_cast<size_t>(C)), window = windows[0], state = states[0];
            cpu::conv1d_causal_silu(mixed.data(), conv_w.data(), window.data(), 1, C, K, conv_out.data());
            std::vector<float> cq(conv_out.begin(), conv_out.begin() + QK),
                ck(conv_out.begin() + QK, conv_out.begin() + 2 * QK);
            const std::vector<float> cv(conv_out.begin() + 2 * QK, conv_out.end());
            cpu::l2_norm(cq.data(), Hk, dk, 1e-6f, cq.data());
            cpu::l2_norm(ck.data(), Hk, dk, 1e-6f, ck.data());
            std::vector<float> cbeta(static_cast<size_t>(Hv)), cg(static_cast<size_t>(Hv)), o(static_cast<size_t>(V)),
                y(static_cast<size_t>(V));
            cpu::gdn_gates(b.data(), a.data(), ssm_a.data(), dt.data(), 1, Hv, cbeta.data(), cg.data());
            near_reference(rq, cq, 1e-4, what + " q");
            near_reference(rk, ck, 1e-4, what + " k");
            near_reference(rv, cv, 1e-5, what + " v");
            near_reference(rbeta, cbeta, 1e-5, what + " beta");
            near_reference(rg, cg, 1e-5, what + " g");
            if (std::memcmp(cout, window.data(), size_t(W) * 4) != 0) {
                std::printf("FAIL %s: window differs from the CPU roll\n", what.c_str());
                ++failures;
            }
            if (recurrent) {
                const cpu::DeltaRuleDims rd{1, Hk, Hv, dk, dv, d.key_head_map};
                cpu::gated_delta_rule_recurrent(cq.data(), ck.data(), cv.data(), cg.data(), cbeta.data(), rd,
                                                state.data(), o.data());
                cpu::gated_rms_norm(o.data(), z.data(), norm_w.data(), Hv, dv, 1e-6f, y.data());
                near_reference(sout, state, 1e-4, what + " state");
                near_reference(rout, y, 1e-3, what + " out");
            }
        }
    }
    std::printf("%s %s\n", failures == before ? "ok  " : "FAIL", name);
}

}  // namespace

// With --split (a build whose launches hold 2 rows, cuda_emulation_gdn_rows.sh): 5 rows in three launches
// of each kernel, over the shapes that run both kernels.
int main(int argc, char** argv) {
    const bool split = argc > 1 && std::string(argv[1]) == "--split";
    uint32_t seed = 1;
    // Recurrent clusters of one block (value_dim <= 32): both kernels; the lanes 1, 2, 4, 8.
    for (const int64_t B : split ? std::vector<int64_t>{5} : std::vector<int64_t>{1, 3, 5}) {
        run({1, 1, 1, 1, 1, cpu::KeyHeadMap::tiled}, B, true, seed++);
        run({2, 6, 63, 17, 4, cpu::KeyHeadMap::tiled}, B, true, seed++);
        run({2, 4, 65, 24, 3, cpu::KeyHeadMap::grouped}, B, true, seed++);
        run({1, 2, 256, 32, 4, cpu::KeyHeadMap::grouped}, B, true, seed++);
        run({2, 2, 32, 8, 2, cpu::KeyHeadMap::tiled}, B, true, seed++);
    }
    if (!split) {
        // Larger value heads (clusters of several blocks): the prepare kernel only.
        run({16, 48, 128, 128, 4, cpu::KeyHeadMap::tiled}, 3, false, seed++);
        run({3, 3, 32, 1000, 2, cpu::KeyHeadMap::tiled}, 2, false, seed++);
        run({1, 2, 256, 129, 4, cpu::KeyHeadMap::grouped}, 4, false, seed++);
    }
    std::printf(failures == 0 ? "all cases agree\n" : "%d failures\n", failures);
    return failures == 0 ? 0 : 1;
}
