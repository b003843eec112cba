// Host stand-in for <cuda_runtime.h>: the CUDA thread model on CPU threads, for checking a kernel's logic
// without a GPU (tools/cuda_emulation/README.md). A launch runs its blocks one after another; the threads of
// a block are host threads, so barriers, warp collectives and shared memory behave as on the device for a
// program free of data races. Device memory is host memory.
#pragma once

#include <math.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <typeindex>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __maxnreg__(n)
#define __grid_constant__
#define __constant__
#define __align__(n) alignas(n)
// `__shared__` is rewritten by transform.py; one left over is a declaration it did not understand.
#define __shared__ static_assert(false, "cuda emulation: a __shared__ declaration transform.py did not rewrite");

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;
using cudaStream_t = struct CUstream_st*;  // launches and copies are synchronous: streams are ignored
using cudaEvent_t = struct CUevent_st*;
inline thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

// ---- the thread model ----
namespace emu {

[[noreturn]] inline void fail(const std::string& what) {
    std::fprintf(stderr, "cuda emulation: block (%u,%u,%u) thread (%u,%u,%u): %s\n", blockIdx.x, blockIdx.y, blockIdx.z,
                 threadIdx.x, threadIdx.y, threadIdx.z, what.c_str());
    std::fflush(stderr);
    std::_Exit(3);  // other threads may be blocked at barriers: no unwinding
}

using Site = std::source_location;
inline std::string where(const Site& s) { return std::string(s.file_name()) + ":" + std::to_string(s.line()); }

// A barrier of a fixed set of threads (a block, or a warp), reporting what the device leaves undefined:
// threads of one phase at different barrier calls (`site`: the call in the kernel's source), a wait after a
// thread of the set has returned from the kernel, or a return while others wait (a __syncthreads or warp
// collective in code that not every thread reaches). A wait longer than a minute is reported as a deadlock.
class Barrier {
public:
    Barrier(int count, const char* kind) : count_(count), kind_(kind) {}
    void wait(const Site& site) {
        std::unique_lock lock(mutex_);
        if (left_ > 0)
            fail(std::string(kind_) + " reached after " + std::to_string(left_) + " of its " + std::to_string(count_) +
                 " threads had returned: a barrier in divergent code");
        const uint64_t phase = phase_;
        if (waiting_ == 0)
            site_ = site;
        else if (site.line() != site_.line() || site.column() != site_.column() ||
                 std::strcmp(site.file_name(), site_.file_name()) != 0)
            fail(std::string(kind_) + " at " + where(site) + " while other threads wait at " + where(site_) +
                 ": threads at different barriers");
        if (++waiting_ == count_) {
            waiting_ = 0;
            ++phase_;
            woken_.notify_all();
            return;
        }
        if (!woken_.wait_for(lock, std::chrono::seconds(60), [&] { return phase_ != phase; }))
            fail(std::string(kind_) +
                 ": waited a minute for the other threads: a deadlock (threads at different "
                 "barriers, or a loop waiting for another block, which runs later here)");
    }
    void leave() {
        std::lock_guard lock(mutex_);
        ++left_;
        if (waiting_ > 0)
            fail(std::string("returned while ") + std::to_string(waiting_) + " threads wait at a " + kind_ +
                 ": a barrier in divergent code");
    }

private:
    std::mutex mutex_;
    std::condition_variable woken_;
    const int count_;
    const char* kind_;
    int waiting_ = 0, left_ = 0;
    Site site_;
    uint64_t phase_ = 0;
};

constexpr unsigned char kPoison = 0xff;         // NaN as f32, f16 and bf16; −1 as integers
constexpr size_t kSharedPerBlock = 227 * 1024;  // H100/H200: shared memory a block may opt in to
constexpr size_t kSharedWithoutOptIn = 48 * 1024;

// Shared memory of a block: 128-byte aligned (what TMA and swizzled layouts ask for), poisoned, exactly the
// bytes declared (built with -fsanitize=address, an access past them is reported).
class Poisoned {
public:
    Poisoned() = default;
    explicit Poisoned(size_t bytes)
        : data_(static_cast<unsigned char*>(::operator new(std::max<size_t>(bytes, 1), std::align_val_t(128)))) {
        std::memset(data_.get(), kPoison, bytes);
    }
    void* data() const { return data_.get(); }

private:
    struct Free {
        void operator()(unsigned char* p) const { ::operator delete(p, std::align_val_t(128)); }
    };
    std::unique_ptr<unsigned char, Free> data_;
};

struct Block {
    std::unique_ptr<Barrier> all;
    std::vector<std::unique_ptr<Barrier>> warps;
    std::vector<uint64_t> exchange;  // per thread 8 words: what warp collectives pass between lanes
    Poisoned dynamic_shared;
    std::mutex static_mutex;
    std::map<std::pair<int, std::type_index>, Poisoned> static_shared;
    size_t static_bytes = 0, dynamic_bytes = 0;
};
inline thread_local Block* block = nullptr;

inline int thread_rank() { return int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }
inline int lane() { return thread_rank() % 32; }
inline uint64_t* exchange_slot(int rank) { return block->exchange.data() + size_t(rank) * 8; }
inline uint64_t* lane_slot(int lane_in_warp) { return exchange_slot(thread_rank() - lane() + lane_in_warp); }
inline void warp_barrier(const Site& site) { block->warps[size_t(thread_rank() / 32)]->wait(site); }
inline int warp_size_here() {  // the last warp of a block whose size is not a multiple of 32 is short
    const int threads = int(blockDim.x * blockDim.y * blockDim.z), first = thread_rank() - lane();
    return std::min(32, threads - first);
}

inline void* dynamic_shared() { return block->dynamic_shared.data(); }

// Declaration `id` of a static __shared__ variable of type T: one poisoned instance per block.
template <typename T>
T& static_shared(int id) {
    std::lock_guard lock(block->static_mutex);
    auto [it, fresh] = block->static_shared.try_emplace({id, std::type_index(typeid(T))});
    if (fresh) {
        it->second = Poisoned(sizeof(T));
        block->static_bytes += sizeof(T);
        if (block->static_bytes > kSharedWithoutOptIn)
            fail("static __shared__ variables take " + std::to_string(block->static_bytes) + " bytes, past 48 KB");
        if (block->static_bytes + block->dynamic_bytes > kSharedPerBlock)
            fail("static + dynamic shared memory " + std::to_string(block->static_bytes + block->dynamic_bytes) +
                 " bytes, past the 227 KB of a block");
    }
    return *reinterpret_cast<T*>(it->second.data());
}

// cp.async groups of this thread not yet waited for: a copy lands only at the cp_async_wait_group that
// covers it (the latest moment the device allows), so reading a stage too early reads poison.
struct PendingCopy {
    void* dst;
    const void* src;
    int bytes;
    bool zero;
};
inline thread_local std::vector<std::vector<PendingCopy>> copy_groups;  // committed, oldest first
inline thread_local std::vector<PendingCopy> open_copy_group;
inline void land(const std::vector<PendingCopy>& group) {
    for (const PendingCopy& c : group) {
        if (c.zero)
            std::memset(c.dst, 0, size_t(c.bytes));
        else
            std::memcpy(c.dst, c.src, size_t(c.bytes));
    }
}

inline std::string dims(dim3 d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

// kernel<<<grid, threads, shared_bytes, stream>>>(args...) as transform.py writes it, run to completion:
// `kernel` calls the kernel (a lambda, so that a template kernel's arguments are deduced as nvcc deduces
// them). The arguments are evaluated once, as the launch does, and each thread gets its own copy.
template <typename Kernel, typename... Args>
void launch(dim3 grid, dim3 threads, size_t shared_bytes, cudaStream_t, Kernel kernel, Args&&... args) {
    const std::tuple<std::decay_t<Args>...> params(std::forward<Args>(args)...);
    const unsigned n = threads.x * threads.y * threads.z;
    const auto config = [&] { return "launch grid " + dims(grid) + " block " + dims(threads) + ": "; };
    if (n == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) fail(config() + "an empty grid or block");
    if (n > 1024 || threads.z > 64) fail(config() + "more than 1024 threads, or block z past 64");
    if (grid.y > 65535 || grid.z > 65535) fail(config() + "grid y or z past 65535");
    if (shared_bytes > kSharedPerBlock)
        fail(config() + std::to_string(shared_bytes) + " bytes of dynamic shared memory, past the 227 KB of a block");
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                Block b;
                b.all = std::make_unique<Barrier>(int(n), "__syncthreads");
                for (unsigned w = 0; w < (n + 31) / 32; ++w)
                    b.warps.push_back(std::make_unique<Barrier>(int(std::min(32u, n - 32 * w)), "warp collective"));
                b.exchange.resize(size_t(n) * 8);
                b.dynamic_shared = Poisoned(shared_bytes);
                b.dynamic_bytes = shared_bytes;
                std::vector<std::thread> pool;
                pool.reserve(n);
                for (unsigned t = 0; t < n; ++t)
                    pool.emplace_back([&, t] {
                        threadIdx = dim3(t % threads.x, t / threads.x % threads.y, t / (threads.x * threads.y));
                        blockIdx = dim3(bx, by, bz);
                        blockDim = threads;
                        gridDim = grid;
                        block = &b;
                        copy_groups.clear();
                        open_copy_group.clear();
                        std::apply(kernel, params);
                        for (const auto& group : copy_groups)  // they could land in the next block's memory
                            if (!group.empty()) fail("returned with cp.async copies not waited for");
                        b.warps[t / 32]->leave();
                        b.all->leave();
                    });
                for (std::thread& th : pool) th.join();
            }
}

}  // namespace emu

// ---- barriers and warp collectives (every lane of the warp takes part; masks are not emulated) ----
// Each collective takes its caller's source location (a defaulted last argument) to tell barriers apart.
inline void __syncthreads(emu::Site site = emu::Site::current()) { emu::block->all->wait(site); }
inline void __syncwarp(unsigned = 0xffffffffu, emu::Site site = emu::Site::current()) { emu::warp_barrier(site); }
inline unsigned __activemask() { return emu::warp_size_here() == 32 ? 0xffffffffu : (1u << emu::warp_size_here()) - 1; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

namespace emu {
// Every lane publishes `value`, then reads the one of lane `source(lane)`.
template <typename T, typename Source>
T exchange(T value, Source source, const Site& site) {
    static_assert(sizeof(T) <= 8, "warp shuffles of at most 8 bytes");
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    lane_slot(lane())[0] = bits;
    warp_barrier(site);
    const int from = source(lane());
    const uint64_t got = from < warp_size_here() ? lane_slot(from)[0] : bits;
    warp_barrier(site);
    T out;
    std::memcpy(&out, &got, sizeof(T));
    return out;
}
}  // namespace emu

// `width` splits the warp into segments; a source outside the caller's segment gives the caller's own value.
template <typename T>
T __shfl_sync(unsigned, T v, int src, int width = 32, emu::Site site = emu::Site::current()) {
    return emu::exchange(
        v, [&](int l) { return l - l % width + ((src % width) + width) % width; }, site);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = 32, emu::Site site = emu::Site::current()) {
    return emu::exchange(
        v, [&](int l) { return (l ^ mask) / width > l / width ? l : l ^ mask; }, site);
}
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32, emu::Site site = emu::Site::current()) {
    return emu::exchange(
        v, [&](int l) { return l % width + int(delta) < width ? l + int(delta) : l; }, site);
}
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32, emu::Site site = emu::Site::current()) {
    return emu::exchange(
        v, [&](int l) { return l % width >= int(delta) ? l - int(delta) : l; }, site);
}
inline unsigned __ballot_sync(unsigned, int predicate, emu::Site site = emu::Site::current()) {
    emu::lane_slot(emu::lane())[1] = predicate != 0;
    emu::warp_barrier(site);
    unsigned bits = 0;
    for (int l = 0; l < emu::warp_size_here(); ++l) bits |= unsigned(emu::lane_slot(l)[1]) << l;
    emu::warp_barrier(site);
    return bits;
}
inline int __any_sync(unsigned mask, int predicate, emu::Site site = emu::Site::current()) {
    return __ballot_sync(mask, predicate, site) != 0;
}
inline int __all_sync(unsigned mask, int predicate, emu::Site site = emu::Site::current()) {
    return __ballot_sync(mask, predicate, site) == __activemask();
}

// ---- atomics: one lock for all of them (correct, not fast) ----
namespace emu {
inline std::mutex& atomic_mutex() {
    static std::mutex m;
    return m;
}
template <typename T, typename F>
T atomic_update(T* address, F update) {
    std::lock_guard lock(atomic_mutex());
    const T old = *address;
    *address = update(old);
    return old;
}
}  // namespace emu
template <typename T>
T atomicAdd(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return T(o + v); });
}
template <typename T>
T atomicSub(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return T(o - v); });
}
template <typename T>
T atomicMax(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return o < v ? v : o; });
}
template <typename T>
T atomicMin(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return v < o ? v : o; });
}
template <typename T>
T atomicExch(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T) { return v; });
}
template <typename T>
T atomicAnd(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return T(o & v); });
}
template <typename T>
T atomicOr(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return T(o | v); });
}
template <typename T>
T atomicXor(T* p, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return T(o ^ v); });
}
template <typename T>
T atomicCAS(T* p, std::type_identity_t<T> compare, std::type_identity_t<T> v) {
    return emu::atomic_update(p, [&](T o) { return o == compare ? v : o; });
}

// ---- integer and bit intrinsics ----
inline int __popc(unsigned v) { return std::popcount(v); }
inline int __popcll(unsigned long long v) { return std::popcount(v); }
inline int __clz(int v) { return std::countl_zero(unsigned(v)); }
inline int __ffs(int v) { return v == 0 ? 0 : std::countr_zero(unsigned(v)) + 1; }
inline unsigned __brev(unsigned v) {
    unsigned r = 0;
    for (int i = 0; i < 32; ++i) r |= ((v >> i) & 1u) << (31 - i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
    return unsigned(((uint64_t(hi) << 32 | lo) << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return unsigned((uint64_t(hi) << 32 | lo) >> (shift & 31));
}
inline int __dp4a(int a, int b, int c) {  // four signed byte products added to c
    for (int i = 0; i < 4; ++i) c += int(int8_t(a >> (8 * i))) * int(int8_t(b >> (8 * i)));
    return c;
}
inline unsigned __dp4a(unsigned a, unsigned b, unsigned c) {
    for (int i = 0; i < 4; ++i) c += unsigned(uint8_t(a >> (8 * i))) * unsigned(uint8_t(b >> (8 * i)));
    return c;
}

// ---- float intrinsics: IEEE round-to-nearest, as the _rn names say; host libm for the rest ----
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }
inline int __float2int_rz(float x) { return int(x); }
inline unsigned __float2uint_rn(float x) { return unsigned(nearbyintf(x)); }
inline float __int2float_rn(int x) { return float(x); }
template <typename A, typename B>
auto min(A a, B b) {
    return b < a ? b : a;
}
template <typename A, typename B>
auto max(A a, B b) {
    return a < b ? b : a;
}

// ---- loads and stores with cache hints: plain accesses here ----
template <typename T>
T __ldg(const T* p) {
    return *p;
}
template <typename T>
T __ldcg(const T* p) {
    return *p;
}
template <typename T>
T __ldcs(const T* p) {
    return *p;
}
template <typename T>
void __stcg(T* p, T v) {
    *p = v;
}
template <typename T>
void __stcs(T* p, T v) {
    *p = v;
}
inline size_t __cvta_generic_to_shared(const void* p) { return reinterpret_cast<size_t>(p); }

// ---- vector types ----
struct alignas(8) int2 {
    int x, y;
};
struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
struct alignas(16) double2 {
    double x, y;
};
struct alignas(4) char4 {
    signed char x, y, z, w;
};
struct alignas(4) uchar4 {
    unsigned char x, y, z, w;
};
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }
inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { return {x, y, z, w}; }
inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return {x, y, z, w}; }

// ---- the runtime API: host memory, synchronous launches, an H200's attributes ----
enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
enum cudaDeviceAttr {
    cudaDevAttrMaxGridDimX,
    cudaDevAttrMultiProcessorCount,
    cudaDevAttrComputeCapabilityMajor,
    cudaDevAttrComputeCapabilityMinor,
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrL2CacheSize,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributePreferredSharedMemoryCarveout };
// The carve-out preference's values (a percentage of the SM's shared-memory capacity); accepted, not modelled.
enum cudaSharedCarveout {
    cudaSharedmemCarveoutDefault = -1,
    cudaSharedmemCarveoutMaxL1 = 0,
    cudaSharedmemCarveoutMaxShared = 100
};

inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
inline cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int) {
    switch (attribute) {
        case cudaDevAttrMaxGridDimX:
            *value = 2147483647;
            break;
        case cudaDevAttrMultiProcessorCount:
            *value = 132;
            break;
        case cudaDevAttrComputeCapabilityMajor:
            *value = 9;
            break;
        case cudaDevAttrComputeCapabilityMinor:
            *value = 0;
            break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin:
            *value = int(emu::kSharedPerBlock);
            break;
        case cudaDevAttrL2CacheSize:
            *value = 60 * 1024 * 1024;
            break;
    }
    return cudaSuccess;
}
// The opt-in to more than 48 KB of dynamic shared memory is not tracked per kernel: a launch fails only past
// the 227 KB a block can have (a kernel that forgets the opt-in fails at once on the device).
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel*, cudaFuncAttribute attribute, int value) {
    const bool valid = attribute != cudaFuncAttributeMaxDynamicSharedMemorySize ||
                       (value >= 0 && size_t(value) <= emu::kSharedPerBlock);
    return valid ? cudaSuccess : cudaErrorInvalidValue;
}
// An estimate (2048 threads an SM); a kernel's results must not depend on it.
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel*, int threads, size_t) {
    *blocks = std::max(1, 2048 / std::max(threads, 1));
    return cudaSuccess;
}

// cudaLaunchKernelEx (ops/cuda/programmatic_launch.cuh): launches are sequential, so programmatic
// serialisation holds by construction; thread-block clusters are not emulated.
enum cudaLaunchAttributeID { cudaLaunchAttributeClusterDimension, cudaLaunchAttributeProgrammaticStreamSerialization };
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    struct {
        dim3 clusterDim;
        int programmaticStreamSerializationAllowed;
    } val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes = 0;
    cudaStream_t stream = nullptr;
    cudaLaunchAttribute* attrs = nullptr;
    unsigned numAttrs = 0;
};
template <typename... Params, typename... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(Params...), Args&&... args) {
    for (unsigned i = 0; i < config->numAttrs; ++i) {
        const dim3 c = config->attrs[i].val.clusterDim;
        if (config->attrs[i].id == cudaLaunchAttributeClusterDimension && c.x * c.y * c.z > 1)
            emu::fail("thread-block clusters are not emulated");
    }
    emu::launch(
        config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream, [&](auto... a) { kernel(a...); },
        std::forward<Args>(args)...);
    return cudaSuccess;
}

// New allocations are poisoned, so a kernel reading memory nobody wrote sees NaN. Exactly `bytes`, 256-byte
// aligned as the device's: built with -fsanitize=address, a read past the end is reported.
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
    *p = ::operator new(std::max<size_t>(bytes, 1), std::align_val_t(256), std::nothrow);
    if (*p == nullptr) return cudaErrorMemoryAllocation;
    std::memset(*p, emu::kPoison, bytes);
    return cudaSuccess;
}
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFree(void* p) {
    ::operator delete(p, std::align_val_t(256));
    return cudaSuccess;
}
// The device leaves a copy between overlapping ranges undefined: reported here, not quietly memmoved.
inline void check_copy_ranges(void* d, const void* s, size_t n, const char* what) {
    const auto* dst = static_cast<const char*>(d);
    const auto* src = static_cast<const char*>(s);
    if (n != 0 && dst < src + n && src < dst + n)
        emu::fail(std::string(what) + " between overlapping ranges (undefined on the device)");
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
    check_copy_ranges(d, s, n, "cudaMemcpy");
    std::memcpy(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t = nullptr) {
    check_copy_ranges(d, s, n, "cudaMemcpyAsync");
    std::memcpy(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) {
    std::memset(d, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t = nullptr) {
    std::memset(d, v, n);
    return cudaSuccess;
}
template <typename T>
cudaError_t cudaMemcpyToSymbol(T& symbol, const void* s, size_t n, size_t offset = 0,
                               cudaMemcpyKind = cudaMemcpyHostToDevice) {
    std::memcpy(reinterpret_cast<char*>(&symbol) + offset, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    *stream = nullptr;  // streams are ignored
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }

// Events: a launch runs to completion before it returns, so an event's time is the host's clock when it
// is recorded, and an elapsed time is the emulated work's host time (a check that spans nest and close,
// nothing about a GPU's speed).
struct CUevent_st {
    std::chrono::steady_clock::time_point at{};
    bool recorded = false;
};
inline cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = new CUevent_st;
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t = nullptr) {
    event->at = std::chrono::steady_clock::now();
    event->recorded = true;
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    return event->recorded ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
    if (!start->recorded || !stop->recorded) return cudaErrorInvalidValue;
    *ms = std::chrono::duration<float, std::milli>(stop->at - start->at).count();
    return cudaSuccess;
}
// The device's name and memory, for code that reports them: an H200's 141 GB, all free.
struct cudaDeviceProp {
    char name[256] = "cuda emulation";
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
    *prop = cudaDeviceProp{};
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    *free_bytes = *total_bytes = size_t(141) << 30;
    return cudaSuccess;
}
