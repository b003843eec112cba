// GpuSampler (sampling/sampler_cuda.h). One call, temperature > 0:
//
//   begin      1 block   reset the per-call state; point override[token] at the uploaded stage 1–2 list
//   prepare    grid      x = logit (adjusted if listed); candidates (not NaN, not −inf) get the key of
//                        s = x ÷ T; max s, candidate count, argmax of the raw logits (for "no candidate"),
//                        and the lowest index whose raw logit is NaN or ±inf (the non-finite report)
//   histogram  grid      count and softmax mass of candidates per bin of (max − s)·kBinScale
//   cut        1 block   the first bin by which top-k / min-p / top-p are certainly decided
//   compact    grid      the candidates up to that bin, as (key << 32 | id), when ≤ kShortlistCapacity
//   finalize   1 block   bitonic sort of the shortlist, then top-k, top-p, min-p and the draw
//   (full)               when the cut does not bound the set (or the certificate needs every term):
//                        cub radix sort of every key, then the same finalize over the sorted vocabulary
//
// Greedy is begin + prepare (argmax of the adjusted logits, ties to the lowest id). Keys: s mapped to
// a uint32 whose ascending order is s descending, −0 folded onto +0 (the CPU's comparator treats them as
// equal and orders them by id); sorting (key, id) ascending is the CPU's order (logit desc, id asc).
#include "sampling/sampler_cuda.h"

#include "core/non_finite_choice.h"

#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>

namespace deltabit::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;
constexpr int kBins = 2048;
// Bins per unit of logit ÷ T: 2048 bins cover 64 units below the max (e^-64 ≈ 1.6e-28 of the top
// weight, far below the rounding of any sum the draw compares); everything further down shares the last
// bin. Finer bins keep the one bin an untruncated draw must sort small (a flat 248k vocabulary puts
// ~1-2k tokens in the bin at the distribution's mass peak).
constexpr double kBinScale = 32.0;
constexpr int kShortlistCapacity = 4096;  // 32 KiB of shared keys in finalize
constexpr uint32_t kNotCandidate = 0xFFFFFFFFu;
constexpr uint32_t kNoIndex = 0xFFFFFFFFu;  // SamplerState::first_non_finite when every raw logit is finite
constexpr double kUnitRoundoff = 0x1p-53;

enum Status : int32_t { kDone = 0, kNeedFullSort = 1 };

struct Adjustment {  // LogitAdjustment, laid out for the device
    int32_t token;
    uint32_t flags;  // 1 = penalised, 2 = dried
    float penalty;
    float dry;
};

struct SampleResult {
    int32_t token;
    int32_t used_rng;
    int32_t status;
    int32_t sequential;  // the sums were redone in the CPU's order
};

struct SamplerState {
    unsigned long long best;  // packed argmax (greedy: adjusted logits; sampling: raw logits)
    uint32_t first_is_nan;    // that same array's element 0 is NaN (the CPU's argmax then keeps 0)
    uint32_t first_non_finite;  // the lowest index whose raw logit is NaN or ±inf, or kNoIndex
    uint32_t max_key;         // smallest key = largest s
    uint32_t n_valid;         // candidates
    uint32_t n_shortlist;
    int32_t cut_first_bin;  // 0, except for the histogram draw: the bin holding the draw's target
    int32_t cut_bin;
    uint32_t n_cut;      // candidates in bins [cut_first_bin, cut_bin]
    double mass_before;  // histogram draw: Σ exp(s − max) over bins before cut_first_bin
    double total_all;  // Σ exp(s − max) over every candidate (parallel order; only a bound's input)
    SampleResult result;
    uint32_t hist_count[kBins];
    double hist_mass[kBins];
};

struct ChainParams {
    float temperature;
    float repeat_penalty;
    int32_t top_k;
    float top_p;
    float min_p;
    float log_min_p;
    double unit;  // the draw's uniform number, used only when more than one candidate survives
    int32_t force_sequential;
    // No stage truncates: find the bin where unit · total falls from the histogram's masses, then sort
    // only that bin (instead of the vocabulary).
    int32_t histogram_draw;
    int32_t n_adjustments;  // the Adjustment list follows this struct in the same upload
};
static_assert(sizeof(ChainParams) % alignof(Adjustment) == 0, "the list follows the parameters");

__device__ __forceinline__ const Adjustment* adjustment_list(const ChainParams* call) {
    return reinterpret_cast<const Adjustment*>(call + 1);
}

// ---- keys ----

__device__ __forceinline__ uint32_t descending_key(float s) {
    if (s == 0.0f) s = 0.0f;  // −0 → +0
    const uint32_t bits = __float_as_uint(s);
    const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ~ascending;
}

__device__ __forceinline__ float key_logit(uint32_t key) {
    const uint32_t ascending = ~key;
    return __uint_as_float((ascending & 0x80000000u) ? (ascending & 0x7FFFFFFFu) : ~ascending);
}

// Argmax packing: larger value wins, then the lower id (its complement is larger). 0 = nothing seen.
__device__ __forceinline__ unsigned long long pack_argmax(float x, int64_t i) {
    return (static_cast<unsigned long long>(~descending_key(x)) << 32) | (0xFFFFFFFFu - uint32_t(i));
}

// Monotone in s (rounding is monotone), so "bin ≤ b" is a prefix of the sorted order.
__device__ __forceinline__ int logit_bin(float s, float max_s) {
    const double d = (double(max_s) - double(s)) * kBinScale;
    if (isnan(d)) return kBins - 1;
    if (d <= 0.0) return 0;
    if (d >= double(kBins - 1)) return kBins - 1;
    return int(d);
}

__device__ __forceinline__ double softmax_weight(float s, double max_s) { return exp(double(s) - max_s); }

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ uint32_t warp_min(uint32_t v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// ---- per-call kernels ----

__global__ void begin_kernel(const ChainParams* call, int32_t* override_index, SamplerState* state) {
    const Adjustment* adjustments = adjustment_list(call);
    const int n_adjustments = call->n_adjustments;
    if (threadIdx.x == 0) {
        state->best = 0;
        state->first_is_nan = 0;
        state->first_non_finite = kNoIndex;
        state->max_key = kNotCandidate;
        state->n_valid = 0;
        state->n_shortlist = 0;
        state->cut_first_bin = 0;
        state->cut_bin = kBins - 1;
        state->n_cut = 0;
        state->mass_before = 0.0;
        state->total_all = 0.0;
        state->result = SampleResult{0, 0, kDone, 0};
    }
    for (int j = int(threadIdx.x); j < n_adjustments; j += int(blockDim.x)) override_index[adjustments[j].token] = j;
}

__global__ void reset_override_kernel(const ChainParams* call, int32_t* override_index) {
    const Adjustment* adjustments = adjustment_list(call);
    const int n_adjustments = call->n_adjustments;
    for (int j = int(threadIdx.x); j < n_adjustments; j += int(blockDim.x)) override_index[adjustments[j].token] = -1;
}

// Stage 1–2 on one listed logit, with rounding-explicit operations so nvcc cannot contract a
// multiply and a subtract into an FMA (the CPU rounds each step).
__device__ __forceinline__ float adjust(float x, const Adjustment& a, float repeat_penalty) {
    if (a.flags & 1u) {
        x = x > 0.0f ? __fdiv_rn(x, repeat_penalty) : __fmul_rn(x, repeat_penalty);
        x = __fsub_rn(x, a.penalty);
    }
    if (a.flags & 2u) x = __fsub_rn(x, a.dry);
    return x;
}

__global__ void __launch_bounds__(kThreads)
prepare_kernel(const float* logits, int64_t n_vocab, const ChainParams* call, const int32_t* override_index,
               bool greedy, uint32_t* keys, SamplerState* state) {
    const ChainParams params = *call;
    const Adjustment* adjustments = adjustment_list(call);
    const bool any_adjustment = params.n_adjustments > 0;
    unsigned long long best = 0;
    uint32_t min_key = kNotCandidate;
    uint32_t n_valid = 0;
    uint32_t first_non_finite = kNoIndex;  // this thread's indices only grow: its first is its lowest
    const int64_t stride = int64_t(gridDim.x) * kThreads;
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n_vocab; i += stride) {
        const float raw = logits[i];
        if (!isfinite(raw) && first_non_finite == kNoIndex) first_non_finite = uint32_t(i);
        float x = raw;
        if (any_adjustment) {
            const int32_t o = override_index[i];
            if (o >= 0) x = adjust(x, adjustments[o], params.repeat_penalty);
        }
        const float argmax_of = greedy ? x : raw;
        if (!isnan(argmax_of)) best = max(best, pack_argmax(argmax_of, i));
        if (i == 0) state->first_is_nan = isnan(argmax_of) ? 1u : 0u;
        if (greedy) continue;
        uint32_t key = kNotCandidate;
        if (!isnan(x) && x != -INFINITY) {
            key = descending_key(__fdiv_rn(x, params.temperature));
            min_key = min(min_key, key);
            ++n_valid;
        }
        keys[i] = key;
    }
    // A warp with nothing to report (every call on finite logits) skips the reduction.
    if (__any_sync(0xffffffffu, first_non_finite != kNoIndex)) {
        first_non_finite = warp_min(first_non_finite);
        if ((threadIdx.x & 31) == 0) atomicMin(&state->first_non_finite, first_non_finite);
    }
    best = warp_max(best);
    min_key = warp_min(min_key);
    n_valid = warp_sum(n_valid);
    if ((threadIdx.x & 31) == 0) {
        if (best != 0) atomicMax(&state->best, best);
        if (min_key != kNotCandidate) atomicMin(&state->max_key, min_key);
        if (n_valid != 0) atomicAdd(&state->n_valid, n_valid);
    }
    // The histogram is filled by the next kernel; clearing it here saves a launch.
    for (int64_t b = int64_t(blockIdx.x) * kThreads + threadIdx.x; b < kBins; b += stride) {
        state->hist_count[b] = 0;
        state->hist_mass[b] = 0.0;
    }
}

__global__ void __launch_bounds__(kThreads)
histogram_kernel(const uint32_t* keys, int64_t n_vocab, bool need_mass, SamplerState* state) {
    __shared__ uint32_t count[kBins];
    __shared__ double mass[kBins];
    if (state->n_valid == 0) return;
    for (int b = int(threadIdx.x); b < kBins; b += kThreads) {
        count[b] = 0;
        mass[b] = 0.0;
    }
    __syncthreads();
    const float max_s = key_logit(state->max_key);
    // The last bin collects the long tail; counting it in registers avoids one hot shared address.
    uint32_t tail_count = 0;
    double tail_mass = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n_vocab; i += int64_t(gridDim.x) * kThreads) {
        const uint32_t key = keys[i];
        if (key == kNotCandidate) continue;
        const float s = key_logit(key);
        const int b = logit_bin(s, max_s);
        const double w = need_mass ? softmax_weight(s, double(max_s)) : 0.0;
        if (b == kBins - 1) {
            ++tail_count;
            tail_mass += w;
        } else {
            atomicAdd(&count[b], 1u);
            if (need_mass) atomicAdd(&mass[b], w);
        }
    }
    tail_count = warp_sum(tail_count);
    tail_mass = warp_sum(tail_mass);
    if ((threadIdx.x & 31) == 0 && tail_count != 0) {
        atomicAdd(&count[kBins - 1], tail_count);
        if (need_mass) atomicAdd(&mass[kBins - 1], tail_mass);
    }
    __syncthreads();
    for (int b = int(threadIdx.x); b < kBins; b += kThreads) {
        if (count[b] == 0) continue;
        atomicAdd(&state->hist_count[b], count[b]);
        if (need_mass) atomicAdd(&state->hist_mass[b], mass[b]);
    }
}

// The candidate set after the cut must contain everything that top-k, top-p and min-p can keep
// (a prefix of the sorted order), so each stage's bound is a bin that certainly holds its prefix:
//   top-k: the first bin where the running count reaches k;
//   min-p: the bin of the threshold itself (bins are monotone in s);
//   top-p (top_k = 0): the first bin where the running mass reaches (top_p + δ)·total, δ covering the
//   rounding of both this sum and the CPU's (each ≤ n·2^-53 relative) and the exp() ulp.
// With top_k > 0 and top_p < 1 the min-p cut is skipped: top-p then needs the mass of all top k.
__global__ void __launch_bounds__(kFinalThreads) cut_kernel(const ChainParams* call, SamplerState* state) {
    const ChainParams params = *call;
    using CountScan = cub::BlockScan<uint32_t, kFinalThreads>;
    using MassScan = cub::BlockScan<double, kFinalThreads>;
    __shared__ typename CountScan::TempStorage count_scan;
    __shared__ typename MassScan::TempStorage mass_scan;
    __shared__ int cut;
    __shared__ double total_all;
    constexpr int kPerThread = kBins / kFinalThreads;
    static_assert(kBins % kFinalThreads == 0, "bins split evenly over the threads");
    const uint32_t n_valid = state->n_valid;
    if (n_valid == 0) return;

    uint32_t counts[kPerThread], bin_counts[kPerThread];
    double masses[kPerThread], bin_masses[kPerThread];
    for (int k = 0; k < kPerThread; ++k) {
        counts[k] = bin_counts[k] = state->hist_count[threadIdx.x * kPerThread + k];
        masses[k] = bin_masses[k] = state->hist_mass[threadIdx.x * kPerThread + k];
    }
    CountScan(count_scan).InclusiveSum(counts, counts);
    double mass_aggregate = 0.0;
    MassScan(mass_scan).InclusiveSum(masses, masses, mass_aggregate);
    if (threadIdx.x == 0) {
        cut = params.histogram_draw ? kBins : kBins - 1;  // kBins: no bin found yet
        total_all = mass_aggregate;
    }
    __syncthreads();

    if (params.histogram_draw) {
        // The first bin whose running mass exceeds the target (the CPU's "target < cumulative").
        const double target = params.unit * total_all;
        int bound = INT_MAX;
        for (int k = 0; k < kPerThread; ++k) {
            if (masses[k] > target) {
                bound = int(threadIdx.x) * kPerThread + k;
                break;
            }
        }
        atomicMin(&cut, bound == INT_MAX ? kBins : bound);
        __syncthreads();
        if (cut == kBins) {  // rounding put the target past the total: leave it to the full sort
            if (threadIdx.x == 0) state->n_cut = UINT32_MAX;
            return;
        }
        if (threadIdx.x == uint32_t(cut / kPerThread)) {
            const int k = cut % kPerThread;
            state->cut_first_bin = cut;
            state->cut_bin = cut;
            state->n_cut = bin_counts[k];
            state->mass_before = masses[k] - bin_masses[k];
            state->total_all = total_all;
        }
        return;
    }

    const bool top_p_on = params.top_p < 1.0f;
    const float max_s = key_logit(state->max_key);
    int bound = kBins - 1;
    if (params.top_k > 0) {
        for (int k = 0; k < kPerThread; ++k) {
            if (counts[k] >= uint32_t(params.top_k)) {
                bound = min(bound, int(threadIdx.x) * kPerThread + k);
                break;
            }
        }
    }
    if (params.min_p > 0.0f && !(params.top_k > 0 && top_p_on)) {
        bound = min(bound, logit_bin(__fadd_rn(max_s, params.log_min_p), max_s));
    }
    if (params.top_k <= 0 && top_p_on) {
        const double delta = 8.0 * (double(n_valid) + 16.0) * kUnitRoundoff;
        const double need = (double(params.top_p) + delta) * total_all;
        if (need < total_all) {
            for (int k = 0; k < kPerThread; ++k) {
                if (masses[k] >= need) {
                    bound = min(bound, int(threadIdx.x) * kPerThread + k);
                    break;
                }
            }
        }
    }
    atomicMin(&cut, bound);
    __syncthreads();
    if (threadIdx.x == uint32_t(cut / kPerThread)) {
        state->cut_bin = cut;
        state->n_cut = counts[cut % kPerThread];
        state->total_all = total_all;
    }
}

__global__ void __launch_bounds__(kThreads)
compact_kernel(const uint32_t* keys, int64_t n_vocab, SamplerState* state, unsigned long long* shortlist) {
    if (state->n_valid == 0 || state->n_cut > uint32_t(kShortlistCapacity)) return;
    const int first = state->cut_first_bin, cut = state->cut_bin;
    const float max_s = key_logit(state->max_key);
    for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n_vocab; i += int64_t(gridDim.x) * kThreads) {
        const uint32_t key = keys[i];
        if (key == kNotCandidate) continue;
        const int bin = logit_bin(key_logit(key), max_s);
        if (bin < first || bin > cut) continue;
        const uint32_t slot = atomicAdd(&state->n_shortlist, 1u);
        if (slot < uint32_t(kShortlistCapacity)) shortlist[slot] = (static_cast<unsigned long long>(key) << 32) | uint32_t(i);
    }
}

// ---- the chain over sorted candidates (one block) ----

struct FinalShared {
    cub::BlockScan<double, kFinalThreads>::TempStorage scan;
    int crossing;
    double before, after, total;
    int broadcast;
};

struct PrefixCrossing {
    double total;
    int index;  // first i whose prefix sum crosses the threshold; −1 when none does
    double before, after;  // the prefix sums at index − 1 and index
};

// Prefix sums of term(0..n−1) in parallel: each thread adds a contiguous segment in order, a block
// scan joins the segments, and each thread walks its segment again from its offset. Threshold is a
// function of the total (the draw's target is unit · total). The rounding differs from the CPU's
// left-to-right sum by at most ~2n·2^-53 of the total; the caller checks the margin.
template <typename Term, typename Threshold>
__device__ PrefixCrossing find_prefix_crossing(int n, Term term, Threshold threshold_of, bool strictly_above,
                                               FinalShared& sh) {
    const int t = int(threadIdx.x);
    const int segment = (n + kFinalThreads - 1) / kFinalThreads;
    const int begin = min(n, t * segment), end = min(n, begin + segment);
    double local = 0.0;
    for (int i = begin; i < end; ++i) local += term(i);
    double offset = 0.0;
    cub::BlockScan<double, kFinalThreads>(sh.scan).ExclusiveSum(local, offset);
    if (t == kFinalThreads - 1) {
        sh.total = offset + local;
        sh.crossing = INT_MAX;
    }
    __syncthreads();
    const double total = sh.total;
    const double threshold = threshold_of(total);
    double run = offset, before = 0.0, after = 0.0;
    int found = -1;
    for (int i = begin; i < end; ++i) {
        before = run;
        run += term(i);
        if (strictly_above ? run > threshold : run >= threshold) {
            found = i;
            after = run;
            break;
        }
    }
    if (found >= 0) atomicMin(&sh.crossing, found);
    __syncthreads();
    if (found >= 0 && found == sh.crossing) {
        sh.before = before;
        sh.after = after;
    }
    __syncthreads();
    PrefixCrossing out{total, sh.crossing == INT_MAX ? -1 : sh.crossing, sh.before, sh.after};
    __syncthreads();  // sh is reused by the next call
    return out;
}

__device__ __forceinline__ bool within_margin(double a, double b, double margin) { return !(fabs(a - b) > margin); }

// The CPU's top-p, literally (Sampler::candidates): total, then mass += w/total until ≥ top_p.
template <typename Sorted>
__device__ int sequential_top_p(const Sorted& sorted, int k, double max_s, float top_p) {
    double total = 0.0;
    for (int i = 0; i < k; ++i) total += softmax_weight(sorted.logit(i), max_s);
    double mass = 0.0;
    for (int i = 0; i < k; ++i) {
        mass += softmax_weight(sorted.logit(i), max_s) / total;
        if (mass >= double(top_p)) return i + 1;
    }
    return k;
}

// The CPU's draw, literally (Sampler::sample).
template <typename Sorted>
__device__ int sequential_draw(const Sorted& sorted, int n, double max_s, double unit) {
    double total = 0.0;
    for (int i = 0; i < n; ++i) total += softmax_weight(sorted.logit(i), max_s);
    const double target = unit * total;
    double cumulative = 0.0;
    for (int i = 0; i < n; ++i) {
        cumulative += softmax_weight(sorted.logit(i), max_s);
        if (target < cumulative) return i;
    }
    return n - 1;
}

// n sorted candidates are available (a prefix of the CPU's order that contains what survives);
// n_valid exist in all. total_all is only used by top-p when top_k = 0 and n < n_valid.
template <typename Sorted>
__device__ void run_chain(const Sorted& sorted, int n, int n_valid, double total_all, const ChainParams& params,
                          SampleResult* result, FinalShared& sh) {
    const float first = sorted.logit(0);
    const double max_s = double(first);
    const int k = params.top_k > 0 ? min(params.top_k, n_valid) : n_valid;
    const bool complete = n >= k;  // every term of top-p's total is at hand
    bool sequential = params.force_sequential != 0;
    int keep = k;

    if (params.top_p < 1.0f) {
        bool certain = false;
        if (!sequential) {
            double total_p = total_all;
            int n_terms = n_valid;
            if (complete) {
                total_p = find_prefix_crossing(
                              k, [&](int i) { return softmax_weight(sorted.logit(i), max_s); },
                              [](double) { return nan(""); }, false, sh)
                              .total;
                n_terms = k;
            }
            const int searched = min(k, n);
            const double top_p = double(params.top_p);
            const PrefixCrossing c = find_prefix_crossing(
                searched, [&](int i) { return softmax_weight(sorted.logit(i), max_s) / total_p; },
                [&](double) { return top_p; }, false, sh);
            const double margin = 8.0 * (double(n_terms) + 16.0) * kUnitRoundoff;
            if (isfinite(total_p) && total_p > 0.0) {
                if (c.index >= 0) {
                    keep = c.index + 1;
                    certain = !within_margin(c.after, top_p, margin) && !within_margin(c.before, top_p, margin);
                } else {
                    // No crossing among the `searched` at hand. All of top-k's k: top-p keeps them all.
                    // A shorter list was cut by min-p (a top-p cut would hold the crossing): top-p keeps
                    // more than the list, and min-p, which keeps at most the list, decides.
                    keep = searched;
                    certain = !within_margin(c.total, top_p, margin) && (searched == k || params.min_p > 0.0f);
                }
            }
        }
        if (!certain) {
            if (!complete) {  // the CPU's order of the whole candidate set is needed
                if (threadIdx.x == 0) result->status = kNeedFullSort;
                return;
            }
            if (threadIdx.x == 0) sh.broadcast = sequential_top_p(sorted, k, max_s, params.top_p);
            __syncthreads();
            keep = sh.broadcast;
            __syncthreads();
            sequential = true;
        }
    }

    if (params.min_p > 0.0f) {
        // min-p keeps at least one and then every s ≥ threshold: a prefix, found by bisection.
        const float threshold = __fadd_rn(first, params.log_min_p);
        int lo = 0, hi = min(keep, n);  // count of leading s ≥ threshold within [lo, hi)
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (sorted.logit(mid) >= threshold) lo = mid + 1;
            else hi = mid;
        }
        keep = min(keep, max(1, lo));
    }
    keep = min(keep, n);

    if (keep <= 1) {
        if (threadIdx.x == 0) *result = SampleResult{sorted.id(0), 0, kDone, sequential ? 1 : 0};
        return;
    }
    int chosen = -1;
    if (!sequential) {
        const double unit = params.unit;
        const PrefixCrossing c = find_prefix_crossing(
            keep, [&](int i) { return softmax_weight(sorted.logit(i), max_s); },
            [&](double total) { return unit * total; }, true, sh);
        const double target = unit * c.total;
        const double margin = 8.0 * (double(keep) + 16.0) * kUnitRoundoff * c.total;
        if (isfinite(c.total)) {
            if (c.index >= 0 && !within_margin(c.before, target, margin) && !within_margin(c.after, target, margin)) chosen = c.index;
        }
    }
    if (chosen < 0) {
        sequential = true;
        if (threadIdx.x == 0) sh.broadcast = sequential_draw(sorted, keep, max_s, params.unit);
        __syncthreads();
        chosen = sh.broadcast;
    }
    if (threadIdx.x == 0) *result = SampleResult{sorted.id(chosen), 1, kDone, sequential ? 1 : 0};
}

// No candidate at all (every logit NaN or −inf): the CPU returns argmax_lowest_id of the raw logits.
__device__ bool finish_without_candidates(SamplerState* state) {
    if (state->n_valid != 0) return false;
    if (threadIdx.x == 0) {
        const bool none = state->first_is_nan != 0 || state->best == 0;
        state->result = SampleResult{none ? 0 : int32_t(0xFFFFFFFFu - uint32_t(state->best & 0xFFFFFFFFu)), 0, kDone, 0};
    }
    return true;
}

// The untruncated draw from the one bin that holds unit · total: the prefix before the bin comes from
// the histogram, the bin's sorted candidates are walked in parallel. Both sums are in another order than
// the CPU's, so the same certificate applies, over all n_valid terms; when it fails, the caller sorts
// the vocabulary and runs the chain in full.
template <typename Sorted>
__device__ void histogram_draw(const Sorted& sorted, int n, SamplerState* state, const ChainParams& params,
                               FinalShared& sh) {
    if (state->n_valid == 1) {
        if (threadIdx.x == 0) state->result = SampleResult{sorted.id(0), 0, kDone, 0};
        return;
    }
    const double max_s = double(key_logit(state->max_key));
    const double total = state->total_all;
    const double target = params.unit * total;
    const double rest = target - state->mass_before;  // what the bin's own prefix must exceed
    const PrefixCrossing c = find_prefix_crossing(
        n, [&](int i) { return softmax_weight(sorted.logit(i), max_s); }, [&](double) { return rest; }, true, sh);
    const double margin = 8.0 * (double(state->n_valid) + 16.0) * kUnitRoundoff * total;
    const bool certain = isfinite(total) && c.index >= 0 && !within_margin(c.before, rest, margin) &&
                         !within_margin(c.after, rest, margin);
    if (threadIdx.x == 0) {
        state->result = certain ? SampleResult{sorted.id(c.index), 1, kDone, 0} : SampleResult{0, 0, kNeedFullSort, 0};
    }
}

struct SharedSorted {
    const unsigned long long* entries;
    __device__ float logit(int i) const { return key_logit(uint32_t(entries[i] >> 32)); }
    __device__ int32_t id(int i) const { return int32_t(entries[i] & 0xFFFFFFFFu); }
};

struct GlobalSorted {
    const uint32_t* keys;
    const int32_t* ids;
    __device__ float logit(int i) const { return key_logit(keys[i]); }
    __device__ int32_t id(int i) const { return ids[i]; }
};

__global__ void __launch_bounds__(kFinalThreads)
finalize_shortlist_kernel(const unsigned long long* shortlist, const ChainParams* call, SamplerState* state) {
    const ChainParams params = *call;
    __shared__ unsigned long long entries[kShortlistCapacity];
    __shared__ FinalShared sh;
    if (finish_without_candidates(state)) return;
    if (state->n_cut > uint32_t(kShortlistCapacity)) {
        if (threadIdx.x == 0) state->result.status = kNeedFullSort;
        return;
    }
    const int n = int(state->n_cut);
    int padded = 2;
    while (padded < n) padded <<= 1;
    for (int i = int(threadIdx.x); i < padded; i += kFinalThreads) entries[i] = i < n ? shortlist[i] : ~0ull;
    __syncthreads();
    // Bitonic sort, ascending (key, id) = logit descending, id ascending.
    for (int size = 2; size <= padded; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = int(threadIdx.x); i < padded; i += kFinalThreads) {
                const int partner = i ^ stride;
                if (partner > i) {
                    const bool ascending = (i & size) == 0;
                    const unsigned long long a = entries[i], b = entries[partner];
                    if ((a > b) == ascending) {
                        entries[i] = b;
                        entries[partner] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    if (params.histogram_draw) {
        histogram_draw(SharedSorted{entries}, n, state, params, sh);
        return;
    }
    run_chain(SharedSorted{entries}, n, int(state->n_valid), state->total_all, params, &state->result, sh);
}

__global__ void __launch_bounds__(kFinalThreads)
finalize_full_kernel(const uint32_t* sorted_keys, const int32_t* sorted_ids, const ChainParams* call,
                     SamplerState* state) {
    const ChainParams params = *call;
    __shared__ FinalShared sh;
    if (finish_without_candidates(state)) return;
    if (threadIdx.x == 0) state->result.status = kDone;
    const int n = int(state->n_valid);  // candidates sort before every kNotCandidate
    run_chain(GlobalSorted{sorted_keys, sorted_ids}, n, n, 0.0, params, &state->result, sh);
}

__global__ void iota_kernel(int32_t* ids, int64_t n) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        ids[i] = int32_t(i);
}

unsigned grid_for(int64_t n, int64_t items_per_thread, unsigned max_blocks) {
    const int64_t per_block = int64_t(kThreads) * items_per_thread;
    const int64_t blocks = (n + per_block - 1) / per_block;
    return unsigned(std::clamp<int64_t>(blocks, 1, max_blocks));
}

}  // namespace


// What one sample() enqueues before the host looks at the result. Each is captured once per (logits
// pointer, pass, need_mass) into a CUDA graph, so a call costs one graph launch instead of seven; the
// per-call values (ChainParams, the adjustment list) travel in the upload that precedes it.
enum class GpuSampler::Pass : int { kGreedy, kShortlist, kPrepareOnly };

struct GpuSampler::CachedGraph {
    const float* logits;
    Pass pass;
    bool need_mass;
    cudaGraphExec_t exec;
};

GpuSampler::GpuSampler(int64_t n_vocab) : n_vocab_(n_vocab) {
    if (n_vocab <= 0 || n_vocab > int64_t(INT32_MAX)) {
        fail_message("GpuSampler: vocabulary of " + std::to_string(n_vocab) + " entries is outside [1, 2^31)");
    }
    const size_t n = size_t(n_vocab);
    keys_ = DeviceBuffer(n * sizeof(uint32_t));
    keys_sorted_ = DeviceBuffer(n * sizeof(uint32_t));
    ids_ = DeviceBuffer(n * sizeof(int32_t));
    ids_sorted_ = DeviceBuffer(n * sizeof(int32_t));
    override_ = DeviceBuffer(n * sizeof(int32_t));
    shortlist_ = DeviceBuffer(size_t(kShortlistCapacity) * sizeof(unsigned long long));
    state_ = DeviceBuffer(sizeof(SamplerState));
    cuda_check(cudaMemset(override_.get(), 0xFF, n * sizeof(int32_t)), "GpuSampler: clear override index");
    iota_kernel<<<grid_for(n_vocab, 4, 1024), kThreads>>>(ids_.get<int32_t>(), n_vocab);
    cuda_check_launch("GpuSampler: iota_kernel");
    cuda_check(cub::DeviceRadixSort::SortPairs(nullptr, sort_temp_bytes_, keys_.get<uint32_t>(),
                                               keys_sorted_.get<uint32_t>(), ids_.get<int32_t>(),
                                               ids_sorted_.get<int32_t>(), int(n_vocab)),
               "GpuSampler: radix sort size query");
    sort_temp_ = DeviceBuffer(std::max<size_t>(sort_temp_bytes_, 1));
    cuda_check(cudaMallocHost(&host_result_, sizeof(SamplerState)), "GpuSampler: pinned result");
    cuda_check(cudaStreamCreateWithFlags(&capture_stream_, cudaStreamNonBlocking), "GpuSampler: capture stream");
    reserve_call(64);
    cuda_check(cudaDeviceSynchronize(), "GpuSampler: init");
}

GpuSampler::~GpuSampler() {
    drop_graphs();
    if (capture_stream_ != nullptr) cudaStreamDestroy(capture_stream_);
    if (host_result_ != nullptr) cudaFreeHost(host_result_);
    if (host_call_ != nullptr) cudaFreeHost(host_call_);
}

void GpuSampler::drop_graphs() {
    for (CachedGraph& g : graphs_) cudaGraphExecDestroy(g.exec);
    graphs_.clear();
}

// The upload buffer holds ChainParams and then up to `adjustments` entries. Growing it moves the device
// buffer, which the captured graphs point at, so they go too.
void GpuSampler::reserve_call(size_t adjustments) {
    if (adjustments <= call_capacity_) return;
    const size_t capacity = std::max(adjustments, 2 * call_capacity_);
    const size_t bytes = sizeof(ChainParams) + capacity * sizeof(Adjustment);
    cuda_check(cudaDeviceSynchronize(), "GpuSampler: grow the adjustment list");  // nothing may still read them
    drop_graphs();
    if (host_call_ != nullptr) cudaFreeHost(host_call_);
    host_call_ = nullptr;
    cuda_check(cudaMallocHost(&host_call_, bytes), "GpuSampler: pinned upload");
    call_ = DeviceBuffer(bytes);
    call_capacity_ = capacity;
}

void GpuSampler::enqueue_pass(const float* logits, Pass pass, bool need_mass, cudaStream_t stream) {
    auto* state = state_.get<SamplerState>();
    const auto* call = call_.get<ChainParams>();
    const unsigned grid = grid_for(n_vocab_, 4, 1024);
    begin_kernel<<<1, kThreads, 0, stream>>>(call, override_.get<int32_t>(), state);
    cuda_check_launch("GpuSampler: begin_kernel");
    prepare_kernel<<<grid, kThreads, 0, stream>>>(logits, n_vocab_, call, override_.get<int32_t>(),
                                                  pass == Pass::kGreedy, keys_.get<uint32_t>(), state);
    cuda_check_launch("GpuSampler: prepare_kernel");
    reset_override_kernel<<<1, kThreads, 0, stream>>>(call, override_.get<int32_t>());
    cuda_check_launch("GpuSampler: reset_override_kernel");
    if (pass == Pass::kShortlist) {
        histogram_kernel<<<grid_for(n_vocab_, 16, 128), kThreads, 0, stream>>>(keys_.get<uint32_t>(), n_vocab_,
                                                                               need_mass, state);
        cuda_check_launch("GpuSampler: histogram_kernel");
        cut_kernel<<<1, kFinalThreads, 0, stream>>>(call, state);
        cuda_check_launch("GpuSampler: cut_kernel");
        compact_kernel<<<grid, kThreads, 0, stream>>>(keys_.get<uint32_t>(), n_vocab_, state,
                                                      shortlist_.get<unsigned long long>());
        cuda_check_launch("GpuSampler: compact_kernel");
        finalize_shortlist_kernel<<<1, kFinalThreads, 0, stream>>>(shortlist_.get<unsigned long long>(), call, state);
        cuda_check_launch("GpuSampler: finalize_shortlist_kernel");
    }
    if (pass != Pass::kPrepareOnly) {
        cuda_check(cudaMemcpyAsync(host_result_, state, offsetof(SamplerState, hist_count), cudaMemcpyDeviceToHost,
                                   stream),
                   "GpuSampler: read result");
    }
}

void GpuSampler::run_pass(const float* logits, Pass pass, bool need_mass, cudaStream_t stream) {
    if (!use_graphs_) {
        enqueue_pass(logits, pass, need_mass, stream);
        return;
    }
    cudaGraphExec_t exec = nullptr;
    for (const CachedGraph& g : graphs_) {
        if (g.logits == logits && g.pass == pass && g.need_mass == need_mass) exec = g.exec;
    }
    if (exec == nullptr) {
        if (graphs_.size() >= 12) drop_graphs();  // a caller cycling through many logits buffers
        cuda_check(cudaStreamBeginCapture(capture_stream_, cudaStreamCaptureModeThreadLocal), "GpuSampler: capture");
        cudaGraph_t graph = nullptr;
        try {
            enqueue_pass(logits, pass, need_mass, capture_stream_);
        } catch (...) {
            cudaStreamEndCapture(capture_stream_, &graph);
            if (graph != nullptr) cudaGraphDestroy(graph);
            throw;
        }
        cuda_check(cudaStreamEndCapture(capture_stream_, &graph), "GpuSampler: end capture");
        const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
        cudaGraphDestroy(graph);
        cuda_check(status, "GpuSampler: instantiate graph");
        graphs_.push_back(CachedGraph{logits, pass, need_mass, exec});
    }
    cuda_check(cudaGraphLaunch(exec, stream), "GpuSampler: launch graph");
    ++stats_.graph_launches;
}

int32_t GpuSampler::sample(const float* device_logits, Sampler& sampler, const TokenHistory& history,
                           cudaStream_t stream) {
    const SamplingParams& p = sampler.params();

    // Stages 1–2 as a short list (the host knows the history; the logits stay on the device).
    const std::vector<LogitAdjustment> list = logit_adjustments(history, p, size_t(n_vocab_));
    reserve_call(list.size());
    auto* params = static_cast<ChainParams*>(host_call_);
    auto* staged = reinterpret_cast<Adjustment*>(params + 1);
    for (size_t j = 0; j < list.size(); ++j) {
        const LogitAdjustment& a = list[j];
        staged[j] = Adjustment{a.token, (a.penalised ? 1u : 0u) | (a.dried ? 2u : 0u), a.penalty, a.dry};
    }

    // The draw's number comes from a copy; the sampler's own RNG advances only if the device used it.
    SamplerRng rng_after = sampler.rng();
    const bool greedy = p.temperature <= 0.0f;
    const bool truncates = p.top_k > 0 || p.top_p < 1.0f || p.min_p > 0.0f;
    *params = ChainParams{};
    params->temperature = p.temperature;
    params->repeat_penalty = p.repeat_penalty;
    params->top_k = p.top_k;
    params->top_p = p.top_p;
    params->min_p = p.min_p;
    params->log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : 0.0f;  // the CPU's float log
    params->unit = rng_after.next_unit();
    params->force_sequential = force_sequential_ ? 1 : 0;
    params->histogram_draw = !truncates && histogram_draw_ && !force_sequential_ ? 1 : 0;
    params->n_adjustments = int32_t(list.size());
    cuda_check(cudaMemcpyAsync(call_.get(), host_call_, sizeof(ChainParams) + list.size() * sizeof(Adjustment),
                               cudaMemcpyHostToDevice, stream),
               "GpuSampler: upload parameters");

    auto* head = static_cast<const SamplerState*>(host_result_);
    auto wait = [&] { cuda_check(cudaStreamSynchronize(stream), "GpuSampler: sample"); };
    // Checked at every read-back, before its result is used: the RNG stays untouched.
    auto non_finite = [&] { return head->first_non_finite != kNoIndex; };
    auto report = [&] {
        ++stats_.non_finite;
        return non_finite_choice(int64_t(head->first_non_finite));
    };

    if (greedy) {
        run_pass(device_logits, Pass::kGreedy, false, stream);
        wait();
        ++stats_.greedy;
        if (non_finite()) return report();
        if (head->first_is_nan != 0 || head->best == 0) return 0;
        return int32_t(0xFFFFFFFFu - uint32_t(head->best & 0xFFFFFFFFu));
    }

    // Without a truncating stage the bound is the whole set: draw through the histogram, or (forced
    // CPU-order sums) sort it outright when it is large.
    bool need_full = !truncates && !params->histogram_draw && n_vocab_ > kShortlistCapacity;
    if (need_full) {
        run_pass(device_logits, Pass::kPrepareOnly, false, stream);
    } else {
        const bool need_mass = (p.top_k <= 0 && p.top_p < 1.0f) || params->histogram_draw;
        run_pass(device_logits, Pass::kShortlist, need_mass, stream);
        wait();
        if (non_finite()) return report();
        need_full = head->result.status == kNeedFullSort;
        if (!need_full) ++(params->histogram_draw ? stats_.histogram_draw : stats_.shortlist);
    }
    if (need_full) {
        size_t temp_bytes = sort_temp_bytes_;
        cuda_check(cub::DeviceRadixSort::SortPairs(sort_temp_.get(), temp_bytes, keys_.get<uint32_t>(),
                                                   keys_sorted_.get<uint32_t>(), ids_.get<int32_t>(),
                                                   ids_sorted_.get<int32_t>(), int(n_vocab_), 0, 32, stream),
                   "GpuSampler: radix sort");
        finalize_full_kernel<<<1, kFinalThreads, 0, stream>>>(keys_sorted_.get<uint32_t>(), ids_sorted_.get<int32_t>(),
                                                              call_.get<ChainParams>(), state_.get<SamplerState>());
        cuda_check_launch("GpuSampler: finalize_full_kernel");
        cuda_check(cudaMemcpyAsync(host_result_, state_.get(), offsetof(SamplerState, hist_count),
                                   cudaMemcpyDeviceToHost, stream),
                   "GpuSampler: read result");
        wait();
        if (non_finite()) return report();
        ++stats_.full_sort;
    }
    if (head->result.sequential != 0) ++stats_.sequential_sums;
    if (head->result.used_rng != 0) sampler.rng() = rng_after;
    return head->result.token;
}

}  // namespace deltabit::cuda
