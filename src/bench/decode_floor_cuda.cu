// The decode floors (decode_floor_cuda.h).
#include "bench/decode_floor_cuda.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_buffer.h"
#include "ops/cuda/programmatic_launch.cuh"

namespace deltabit::cuda {

namespace {

constexpr int kStreamThreads = 256;
constexpr int kStreamBlocksPerSm = 4;  // 32 warps per SM
constexpr int kLoadsInFlight = 8;

// span[0] = earliest block start, span[1] = latest block end (%globaltimer, ns); checksum = XOR of all words.
struct StreamOut {
    unsigned long long span[2];
    unsigned checksum;
};

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__global__ void __launch_bounds__(kStreamThreads) stream_kernel(const uint4* src, size_t n16, StreamOut* out) {
    if (threadIdx.x == 0) atomicMin(&out->span[0], global_ns());
    // Each pass requests kLoadsInFlight vectors before using any (past the end: predicated off), so a
    // buffer smaller than the grid's reach is requested all at once.
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    unsigned acc = 0;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n16; i += kLoadsInFlight * stride) {
        uint4 v[kLoadsInFlight];
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u)
            v[u] = i + u * stride < n16 ? load_streaming(src + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (int offset = 16; offset > 0; offset /= 2) acc ^= __shfl_xor_sync(0xffffffffu, acc, offset);
    if ((threadIdx.x & 31) == 0) atomicXor(&out->checksum, acc);
    __syncthreads();
    if (threadIdx.x == 0) atomicMax(&out->span[1], global_ns());
}

// out[b] = in[b] + 1 once the kernel before (which wrote `in`) has completed.
__global__ void chain_kernel(const float* in, float* out) {
    wait_for_predecessor();
    allow_dependents();
    if (threadIdx.x == 0) out[blockIdx.x] = in[blockIdx.x] + 1.0f;
}

int sm_count() { return device_attribute(cudaDevAttrMultiProcessorCount, "SM count"); }

double median_of(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[(v.size() - 1) / 2];
}

}  // namespace

StreamFloor measure_stream_floor(size_t bytes, int runs, cudaStream_t stream) {
    if (bytes == 0 || bytes % 16 != 0 || runs < 1)
        fail_message("decode floor: stream bytes must be a positive multiple of 16 and runs ≥ 1, got " +
                     std::to_string(bytes) + " bytes, " + std::to_string(runs) + " runs");
    // The pattern: word w = w · 2654435761 (a host twin gives the checksum).
    std::vector<uint32_t> host(bytes / 4);
    unsigned expected = 0;
    for (size_t w = 0; w < host.size(); ++w) {
        host[w] = uint32_t(w) * 2654435761u;
        expected ^= host[w];
    }
    DeviceBuffer data(bytes);
    data.upload(host.data(), bytes);
    const int l2 = device_attribute(cudaDevAttrL2CacheSize, "L2 size");
    DeviceBuffer flush(std::max<size_t>(size_t(4) * size_t(l2), size_t(64) << 20));
    DeviceBuffer out_buffer(sizeof(StreamOut));
    const int blocks = sm_count() * kStreamBlocksPerSm;

    std::vector<double> spans;
    for (int run = 0; run <= runs; ++run) {  // run 0 is a warm-up (module load)
        cuda_check(cudaMemsetAsync(flush.get(), run & 0xff, flush.bytes(), stream), "L2 flush");
        const StreamOut init{{~0ull, 0ull}, 0u};
        cuda_check(cudaMemcpyAsync(out_buffer.get(), &init, sizeof(init), cudaMemcpyHostToDevice, stream), "reset");
        stream_kernel<<<blocks, kStreamThreads, 0, stream>>>(data.get<uint4>(), bytes / 16, out_buffer.get<StreamOut>());
        cuda_check_launch("stream_kernel");
        StreamOut result{};
        cuda_check(cudaMemcpyAsync(&result, out_buffer.get(), sizeof(result), cudaMemcpyDeviceToHost, stream), "result");
        cuda_check(cudaStreamSynchronize(stream), "stream floor");
        if (result.checksum != expected)
            fail_message("decode floor: the stream kernel's checksum " + std::to_string(result.checksum) +
                         " is not the host's " + std::to_string(expected) + ": it did not read every byte");
        if (run > 0) spans.push_back(double(result.span[1] - result.span[0]) * 1e-3);
    }
    return {bytes, median_of(spans)};
}

double measure_dependent_launch_us(int launches, int replays, cudaStream_t stream) {
    if (launches < 2 || launches % 2 != 0 || replays < 1)  // even: each replay starts from the same buffer
        fail_message("decode floor: a chain needs an even number ≥ 2 of launches and ≥ 1 replay, got " +
                     std::to_string(launches) + " and " + std::to_string(replays));
    const int blocks = sm_count();
    DeviceBuffer ping(size_t(blocks) * sizeof(float)), pong(size_t(blocks) * sizeof(float));
    cuda_check(cudaMemsetAsync(ping.get(), 0, ping.bytes(), stream), "chain zero");
    cuda_check(cudaStreamSynchronize(stream), "chain zero");

    cudaGraph_t graph = nullptr;
    cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin chain capture");
    try {
        for (int i = 0; i < launches; ++i) {
            const float* in = (i % 2 == 0 ? ping : pong).get<float>();
            float* out = (i % 2 == 0 ? pong : ping).get<float>();
            launch_programmatic(chain_kernel, dim3(unsigned(blocks)), dim3(128), 0, stream, "chain_kernel", in, out);
        }
    } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        throw;
    }
    cuda_check(cudaStreamEndCapture(stream, &graph), "end chain capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t instantiated = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    cuda_check(instantiated, "instantiate chain graph");

    cudaEvent_t start = nullptr, stop = nullptr;
    cuda_check(cudaEventCreate(&start), "event");
    cuda_check(cudaEventCreate(&stop), "event");
    std::vector<double> per_launch;
    for (int replay = 0; replay <= replays; ++replay) {  // replay 0 is a warm-up
        cuda_check(cudaEventRecord(start, stream), "record");
        cuda_check(cudaGraphLaunch(exec, stream), "replay chain");
        cuda_check(cudaEventRecord(stop, stream), "record");
        cuda_check(cudaEventSynchronize(stop), "chain");
        float ms = 0;
        cuda_check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
        if (replay > 0) per_launch.push_back(double(ms) * 1e3 / launches);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaGraphExecDestroy(exec);

    // Each replay adds `launches` to every block's value and, the count being even, ends in `ping`.
    std::vector<float> result(static_cast<size_t>(blocks));
    ping.download(result.data(), result.size() * sizeof(float));
    const float expected = float(launches) * float(replays + 1);
    for (int b = 0; b < blocks; ++b) {
        if (result[size_t(b)] != expected)
            fail_message("decode floor: block " + std::to_string(b) + " of the launch chain counted " +
                         std::to_string(result[size_t(b)]) + ", expected " + std::to_string(expected) +
                         ": a launch ran before the one it depends on had finished");
    }
    return median_of(per_launch);
}

}  // namespace deltabit::cuda
