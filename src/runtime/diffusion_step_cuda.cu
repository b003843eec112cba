// DiffusionStepCuda (runtime/diffusion_step_cuda.h). One denoising step, after the model's logits:
//
//   draw     1 thread      the step's 2L uniforms from the device SamplerRng state
//   measure  L blocks      per row: x ÷ T (kept as the self-conditioning input), argmax, log Σ exp,
//                          entropy, Σ float p and the last p > 0 — three passes over the row, as the CPU
//   sample   L blocks      per row: the CPU's running-sum rule over tiles of the row, a block prefix
//                          sum per tile, stopping at the tile that holds the pick
//   settle   1 block       stable bitonic sort of (entropy, position), the acceptance sum and the mean
//                          in the CPU's order by one thread, noise tokens, next canvas, stability
//                          compare against the ring, the stop flag, the ring's update
//
// Every kernel first reads the finished flag and returns when it is set; only settle writes it, last.
// The probabilities are never stored: both row kernels compute p from (max, log Σ exp) with the same
// device function, so the sample sees the very floats whose sum measure took.
#include "runtime/diffusion_step_cuda.h"

#include "core/error.h"
#include "runtime/diffusion_step.h"

#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

namespace deltabit::cuda {

namespace {

constexpr int kRowThreads = 256;
constexpr int kSampleChunk = 16;  // consecutive elements per thread in a sample tile (4096 a tile)
constexpr int kSettleMaxThreads = int(kDiffusionMaxCanvas);
constexpr int32_t kNoPick = INT32_MAX;

__device__ __forceinline__ bool halted(const int32_t* halt) { return halt != nullptr && *halt != 0; }

// log p of one scaled logit, in the CPU's order of operations: (x − max) − log Σ.
__device__ __forceinline__ double log_probability(float x, float max, double log_denom) {
    return __dsub_rn(__dsub_rn(double(x), double(max)), log_denom);
}

// The float probability both row kernels use (the CPU rounds exp(log p) to float the same way).
__device__ __forceinline__ float probability(float x, const DiffusionRowStats& row) {
    return float(exp(log_probability(x, row.max, row.log_denom)));
}

// Block reductions over kRowThreads values in shared scratch; a fixed tree, so the result is the same
// run after run. Each ends with a barrier, so the scratch can be reused at once.
__device__ double block_sum(double v, double* scratch) {
    const int t = int(threadIdx.x);
    scratch[t] = v;
    __syncthreads();
    for (int stride = kRowThreads / 2; stride > 0; stride >>= 1) {
        if (t < stride) scratch[t] = __dadd_rn(scratch[t], scratch[t + stride]);
        __syncthreads();
    }
    const double sum = scratch[0];
    __syncthreads();
    return sum;
}

__device__ int32_t block_max(int32_t v, int32_t* scratch) {
    const int t = int(threadIdx.x);
    scratch[t] = v;
    __syncthreads();
    for (int stride = kRowThreads / 2; stride > 0; stride >>= 1) {
        if (t < stride) scratch[t] = max(scratch[t], scratch[t + stride]);
        __syncthreads();
    }
    const int32_t out = scratch[0];
    __syncthreads();
    return out;
}

__device__ int32_t block_min(int32_t v, int32_t* scratch) {
    const int t = int(threadIdx.x);
    scratch[t] = v;
    __syncthreads();
    for (int stride = kRowThreads / 2; stride > 0; stride >>= 1) {
        if (t < stride) scratch[t] = min(scratch[t], scratch[t + stride]);
        __syncthreads();
    }
    const int32_t out = scratch[0];
    __syncthreads();
    return out;
}

// The larger value wins; equal values go to the lower index (torch.argmax's first of equal maxima);
// index −1 is "nothing seen".
__device__ __forceinline__ bool argmax_better(float a, int32_t ia, float b, int32_t ib) {
    if (ib < 0) return true;
    if (ia < 0) return false;
    if (a != b) return a > b;
    return ia < ib;
}

__global__ void draw_units_kernel(uint64_t* rng_state, int64_t n, double* units, const int32_t* halt) {
    if (halted(halt)) return;
    SamplerRng::State state;
    for (int w = 0; w < 4; ++w) state.words[w] = rng_state[w];
    SamplerRng rng = SamplerRng::from_state(state);
    for (int64_t i = 0; i < n; ++i) units[i] = rng.next_unit();
    state = rng.state();
    for (int w = 0; w < 4; ++w) rng_state[w] = state.words[w];
}

__global__ void uniform_tokens_kernel(const double* units, int64_t n, int64_t V, const int32_t* first, int32_t* out,
                                      const int32_t* halt) {
    if (halted(halt)) return;
    const int64_t i = int64_t(threadIdx.x);
    if (i < n) out[i] = first != nullptr ? first[i] : uniform_token(units[i], V);
}

__global__ void __launch_bounds__(kRowThreads)
measure_kernel(const float* logits, int64_t V, float temperature, float* scaled, double* entropy, int32_t* argmax,
               DiffusionRowStats* stats, const int32_t* halt) {
    if (halted(halt)) return;
    __shared__ double sum_scratch[kRowThreads];
    __shared__ float max_scratch[kRowThreads];
    __shared__ int32_t index_scratch[kRowThreads];
    const int t = int(threadIdx.x);
    const int64_t row = int64_t(blockIdx.x);
    const float* x = logits + row * V;
    float* s = scaled + row * V;

    // Pass 1: x ÷ T (torch's fp32 division; __fdiv_rn so no fast-math flag can change it) and the argmax.
    float best = 0.0f;
    int32_t best_index = -1;
    for (int64_t v = t; v < V; v += kRowThreads) {
        const float y = __fdiv_rn(x[v], temperature);
        s[v] = y;
        if (argmax_better(y, int32_t(v), best, best_index)) {
            best = y;
            best_index = int32_t(v);
        }
    }
    max_scratch[t] = best;
    index_scratch[t] = best_index;
    __syncthreads();
    for (int stride = kRowThreads / 2; stride > 0; stride >>= 1) {
        if (t < stride && argmax_better(max_scratch[t + stride], index_scratch[t + stride], max_scratch[t], index_scratch[t])) {
            max_scratch[t] = max_scratch[t + stride];
            index_scratch[t] = index_scratch[t + stride];
        }
        __syncthreads();
    }
    DiffusionRowStats r;
    r.max = max_scratch[0];
    const int32_t row_argmax = index_scratch[0];

    // Pass 2: Σ exp(x − max) in double (each thread reads back only what it wrote in pass 1).
    double denom = 0.0;
    for (int64_t v = t; v < V; v += kRowThreads) denom = __dadd_rn(denom, exp(__dsub_rn(double(s[v]), double(r.max))));
    denom = block_sum(denom, sum_scratch);
    r.log_denom = log(denom);

    // Pass 3: −Σ p log p over p > 0 (double p, as the CPU), Σ float p and the last float p > 0.
    double h = 0.0, total = 0.0;
    int32_t last_positive = -1;
    for (int64_t v = t; v < V; v += kRowThreads) {
        const double log_p = log_probability(s[v], r.max, r.log_denom);
        const double p = exp(log_p);
        if (p > 0.0) h = __dsub_rn(h, __dmul_rn(p, log_p));
        const float pf = float(p);
        total = __dadd_rn(total, double(pf));
        if (pf > 0.0f) last_positive = int32_t(v);
    }
    h = block_sum(h, sum_scratch);
    r.total = block_sum(total, sum_scratch);
    r.last_positive = block_max(last_positive, index_scratch);
    if (t == 0) {
        entropy[row] = h;
        argmax[row] = row_argmax;
        stats[row] = r;
    }
}

__global__ void __launch_bounds__(kRowThreads)
sample_kernel(const float* scaled, const DiffusionRowStats* stats, int64_t V, const double* units, int32_t* sampled,
              const int32_t* halt) {
    if (halted(halt)) return;
    __shared__ double scan[kRowThreads];
    __shared__ int32_t pick_scratch[kRowThreads];
    const int t = int(threadIdx.x);
    const int64_t row = int64_t(blockIdx.x);
    const float* s = scaled + row * V;
    const DiffusionRowStats r = stats[row];
    const double u = __dmul_rn(units[row], r.total);
    constexpr int64_t kTile = int64_t(kRowThreads) * kSampleChunk;

    double carry = 0.0;  // Σ p over the tiles before this one
    int32_t pick = kNoPick;
    for (int64_t base = 0; base < V; base += kTile) {
        const int64_t begin = base + int64_t(t) * kSampleChunk;
        float p[kSampleChunk];
        double local = 0.0;
        for (int j = 0; j < kSampleChunk; ++j) {
            p[j] = begin + j < V ? probability(s[begin + j], r) : 0.0f;
            local = __dadd_rn(local, double(p[j]));
        }
        // Inclusive prefix of the threads' sums (Hillis–Steele), then this thread's exclusive part.
        scan[t] = local;
        __syncthreads();
        for (int offset = 1; offset < kRowThreads; offset <<= 1) {
            const double add = t >= offset ? scan[t - offset] : 0.0;
            __syncthreads();
            if (t >= offset) scan[t] = __dadd_rn(scan[t], add);
            __syncthreads();
        }
        double acc = __dadd_rn(carry, t > 0 ? scan[t - 1] : 0.0);
        const double tile_sum = scan[kRowThreads - 1];
        int32_t mine = kNoPick;
        for (int j = 0; j < kSampleChunk; ++j) {
            acc = __dadd_rn(acc, double(p[j]));
            if (u < acc && p[j] > 0.0f) {
                mine = int32_t(begin + j);
                break;
            }
        }
        pick = block_min(mine, pick_scratch);  // its barriers also end the reads of `scan`
        if (pick != kNoPick) break;             // the same value in every thread: the loop exits together
        carry = __dadd_rn(carry, tile_sum);
    }
    // No running sum passed u (rounding at the end): the last p > 0, as the CPU backs off from V − 1.
    if (t == 0) sampled[row] = pick != kNoPick ? pick : max(r.last_positive, 0);
}

// Entropy then position: a strict total order, so the sort is the CPU's stable sort by entropy.
__device__ __forceinline__ bool ranks_before(double a, int32_t ia, double b, int32_t ib) {
    return a < b || (a == b && ia < ib);
}

__global__ void __launch_bounds__(kSettleMaxThreads) settle_kernel(DiffusionSettleArgs a) {
    if (halted(&a.flags->finished)) return;
    __shared__ double key[kSettleMaxThreads];
    __shared__ int32_t position[kSettleMaxThreads];
    __shared__ uint8_t accepted[kSettleMaxThreads];
    __shared__ int32_t all_stable;
    __shared__ double mean_entropy;
    const int t = int(threadIdx.x);
    const int n = int(blockDim.x);  // a power of two ≥ L
    const int L = int(a.L);
    const int32_t head = a.stability_threshold > 0 ? a.flags->history_head : 0;

    key[t] = t < L ? a.entropy[t] : INFINITY;  // padding ranks after every position (by index if +inf)
    position[t] = t;
    if (t == 0) all_stable = 1;
    __syncthreads();
    for (int k = 2; k <= n; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            const int partner = t ^ j;
            if (partner > t) {
                const bool ascending = (t & k) == 0;
                const bool out_of_order = ranks_before(key[partner], position[partner], key[t], position[t]);
                if (out_of_order == ascending) {
                    const double k_t = key[t];
                    const int32_t p_t = position[t];
                    key[t] = key[partner];
                    position[t] = position[partner];
                    key[partner] = k_t;
                    position[partner] = p_t;
                }
            }
            __syncthreads();
        }
    }
    if (t == 0) {
        // accepted_positions and mean_entropy, in the CPU's order of additions.
        double before = 0.0;
        for (int j = 0; j < L; ++j) {
            accepted[position[j]] = uint8_t(before <= a.entropy_bound);
            before += key[j];
        }
        double sum = 0.0;
        for (int i = 0; i < L; ++i) sum += a.entropy[i];
        mean_entropy = sum / double(L);
    }
    __syncthreads();
    int32_t argmax = 0;
    if (t < L) {
        const int32_t noise = uniform_token(a.noise_units[t], a.V);
        a.accepted[t] = accepted[t];
        a.noise[t] = noise;
        a.canvas[t] = accepted[t] ? a.sampled[t] : noise;
        argmax = a.argmax[t];
        bool stable = true;
        for (int64_t e = 0; e < a.stability_threshold; ++e) stable = stable && a.history[e * a.L + t] == argmax;
        if (!stable) all_stable = 0;  // every writer writes the same value
    }
    __syncthreads();
    // Each thread overwrites only the column it compared, so the ring's update needs no further barrier.
    if (t < L && a.stability_threshold > 0) a.history[int64_t(head) * a.L + t] = argmax;
    if (t == 0) {
        DiffusionStepFlags* f = a.flags;
        f->steps += 1;
        f->mean_entropy = mean_entropy;
        if (a.stability_threshold > 0) f->history_head = int32_t((head + 1) % a.stability_threshold);
        if (all_stable != 0 && mean_entropy < a.confidence_threshold) f->finished = 1;  // halts what follows
    }
}

__global__ void begin_block_kernel(int32_t* history, int64_t n_history, DiffusionStepFlags* flags) {
    for (int64_t i = threadIdx.x; i < n_history; i += blockDim.x) history[i] = -1;
    if (threadIdx.x == 0) *flags = DiffusionStepFlags{0, 0, 0, 0, 0.0};
}

// apply_eos_and_pad on the committed argmax, one thread (L ≤ 1024 compares against a short list).
__global__ void commit_kernel(const int32_t* argmax, int64_t L, const int64_t* eos_ids, int64_t n_eos, int64_t pad_id,
                              int32_t* committed, DiffusionStepFlags* flags) {
    bool has_eos = false;
    for (int64_t i = 0; i < L; ++i) {
        int32_t token = argmax[i];
        bool eos = false;
        for (int64_t e = 0; e < n_eos; ++e) eos = eos || eos_ids[e] == int64_t(token);
        if (has_eos && pad_id >= 0) token = int32_t(pad_id);
        committed[i] = token;
        has_eos = has_eos || eos;
    }
    flags->has_eos = has_eos ? 1 : 0;
}

int settle_threads(int64_t L) {
    int n = 32;
    while (n < L) n <<= 1;
    return n;
}

}  // namespace

void diffusion_draw_units(uint64_t* rng_state, int64_t n, double* units, const int32_t* halt, cudaStream_t stream) {
    draw_units_kernel<<<1, 1, 0, stream>>>(rng_state, n, units, halt);
    cuda_check_launch("diffusion draw_units_kernel");
}

void diffusion_uniform_tokens(const double* units, int64_t n, int64_t V, const int32_t* first, int32_t* out,
                              const int32_t* halt, cudaStream_t stream) {
    uniform_tokens_kernel<<<1, settle_threads(n), 0, stream>>>(units, n, V, first, out, halt);
    cuda_check_launch("diffusion uniform_tokens_kernel");
}

void diffusion_measure_rows(const float* logits, int64_t L, int64_t V, float temperature, float* scaled,
                            double* entropy, int32_t* argmax, DiffusionRowStats* stats, const int32_t* halt,
                            cudaStream_t stream) {
    measure_kernel<<<unsigned(L), kRowThreads, 0, stream>>>(logits, V, temperature, scaled, entropy, argmax, stats, halt);
    cuda_check_launch("diffusion measure_kernel");
}

void diffusion_sample_rows(const float* scaled, const DiffusionRowStats* stats, int64_t L, int64_t V,
                           const double* units, int32_t* sampled, const int32_t* halt, cudaStream_t stream) {
    sample_kernel<<<unsigned(L), kRowThreads, 0, stream>>>(scaled, stats, V, units, sampled, halt);
    cuda_check_launch("diffusion sample_kernel");
}

void diffusion_settle_step(const DiffusionSettleArgs& args, cudaStream_t stream) {
    settle_kernel<<<1, settle_threads(args.L), 0, stream>>>(args);
    cuda_check_launch("diffusion settle_kernel");
}

DiffusionStepCuda::DiffusionStepCuda(int64_t canvas_length, int64_t n_vocab, DiffusionStepSettings settings, uint64_t seed)
    : L_(canvas_length), V_(n_vocab), settings_(std::move(settings)) {
    if (L_ < 1 || L_ > kDiffusionMaxCanvas)
        fail_message("diffusion step (CUDA): canvas length " + std::to_string(L_) + " is outside [1, " +
                     std::to_string(kDiffusionMaxCanvas) + "] (the acceptance sort runs in one block)");
    if (V_ < 1 || V_ > INT32_MAX)
        fail_message("diffusion step (CUDA): vocabulary " + std::to_string(V_) + " is outside [1, 2^31 - 1]");
    if (settings_.stability_threshold < 0)
        fail_message("diffusion step (CUDA): stability_threshold must not be negative (found " +
                     std::to_string(settings_.stability_threshold) + ")");
    const size_t L = size_t(L_);
    rng_state_ = DeviceBuffer(4 * sizeof(uint64_t));
    units_ = DeviceBuffer(2 * L * sizeof(double));
    scaled_ = DeviceBuffer(L * size_t(V_) * sizeof(float));
    stats_ = DeviceBuffer(L * sizeof(DiffusionRowStats));
    entropy_ = DeviceBuffer(L * sizeof(double));
    argmax_ = DeviceBuffer(L * sizeof(int32_t));
    sampled_ = DeviceBuffer(L * sizeof(int32_t));
    accepted_ = DeviceBuffer(L * sizeof(uint8_t));
    noise_ = DeviceBuffer(L * sizeof(int32_t));
    history_ = DeviceBuffer(size_t(settings_.stability_threshold) * L * sizeof(int32_t));
    flags_ = DeviceBuffer(sizeof(DiffusionStepFlags));
    eos_ids_ = DeviceBuffer(settings_.eos_ids.size() * sizeof(int64_t));
    const SamplerRng::State state = SamplerRng(seed).state();
    rng_state_.upload(state.words, sizeof(state.words));
    if (!settings_.eos_ids.empty())
        eos_ids_.upload(settings_.eos_ids.data(), settings_.eos_ids.size() * sizeof(int64_t));
    const DiffusionStepFlags clear{0, 0, 0, 0, 0.0};
    flags_.upload(&clear, sizeof(clear));
}

void DiffusionStepCuda::begin_block(int32_t* canvas, const int32_t* first_canvas, cudaStream_t stream) {
    begin_block_kernel<<<1, 256, 0, stream>>>(history_.get<int32_t>(), settings_.stability_threshold * L_,
                                              flags_.get<DiffusionStepFlags>());
    cuda_check_launch("diffusion begin_block_kernel");
    diffusion_draw_units(rng_state_.get<uint64_t>(), L_, units_.get<double>(), nullptr, stream);
    diffusion_uniform_tokens(units_.get<double>(), L_, V_, first_canvas, canvas, nullptr, stream);
    // The CPU's argmax_canvas starts as the canvas: what a block with no step would commit.
    cuda_check(cudaMemcpyAsync(argmax_.get<int32_t>(), canvas, size_t(L_) * sizeof(int32_t), cudaMemcpyDeviceToDevice,
                               stream),
               "diffusion begin_block argmax");
}

void DiffusionStepCuda::run_step(const float* logits, float temperature, int32_t* canvas, cudaStream_t stream) {
    const int32_t* halt = finished_flag();
    double* units = units_.get<double>();
    diffusion_draw_units(rng_state_.get<uint64_t>(), 2 * L_, units, halt, stream);
    diffusion_measure_rows(logits, L_, V_, temperature, scaled_.get<float>(), entropy_.get<double>(), argmax_.get<int32_t>(),
                           stats_.get<DiffusionRowStats>(), halt, stream);
    diffusion_sample_rows(scaled_.get<float>(), stats_.get<DiffusionRowStats>(), L_, V_, units, sampled_.get<int32_t>(), halt,
                          stream);
    DiffusionSettleArgs a;
    a.entropy = entropy_.get<double>();
    a.sampled = sampled_.get<int32_t>();
    a.argmax = argmax_.get<int32_t>();
    a.noise_units = units + L_;
    a.accepted = accepted_.get<uint8_t>();
    a.noise = noise_.get<int32_t>();
    a.canvas = canvas;
    a.history = history_.get<int32_t>();
    a.flags = flags_.get<DiffusionStepFlags>();
    a.L = L_;
    a.V = V_;
    a.entropy_bound = settings_.entropy_bound;
    a.stability_threshold = settings_.stability_threshold;
    a.confidence_threshold = settings_.confidence_threshold;
    diffusion_settle_step(a, stream);
}

void DiffusionStepCuda::commit_block(int32_t* committed, cudaStream_t stream) {
    commit_kernel<<<1, 1, 0, stream>>>(argmax_.get<int32_t>(), L_, eos_ids_.get<int64_t>(), int64_t(settings_.eos_ids.size()),
                                       settings_.pad_id, committed, flags_.get<DiffusionStepFlags>());
    cuda_check_launch("diffusion commit_kernel");
}

DiffusionStepFlags DiffusionStepCuda::read_flags(cudaStream_t stream) const {
    DiffusionStepFlags f;
    cuda_check(cudaMemcpyAsync(&f, flags_.get(), sizeof(f), cudaMemcpyDeviceToHost, stream), "diffusion read_flags");
    cuda_check(cudaStreamSynchronize(stream), "diffusion read_flags");
    return f;
}

SamplerRng::State DiffusionStepCuda::read_rng_state(cudaStream_t stream) const {
    SamplerRng::State s;
    cuda_check(cudaMemcpyAsync(s.words, rng_state_.get(), sizeof(s.words), cudaMemcpyDeviceToHost, stream),
               "diffusion read_rng_state");
    cuda_check(cudaStreamSynchronize(stream), "diffusion read_rng_state");
    return s;
}

}  // namespace deltabit::cuda
