// A kernel timeline of any CUDA program, with no change to it: a CUPTI injection library. Loaded by the
// CUDA driver when CUDA_INJECTION64_PATH names it, it records every kernel's start and end (graph nodes
// included, so a replayed decode step shows each kernel as it really ran, overlaps and gaps included —
// what Nsight Compute, which runs kernels one at a time, cannot show) and writes the last records to a
// TSV file when the program exits.
//
//   export CUDA_INJECTION64_PATH=$PWD/build/libdeltabit_timeline.so DELTABIT_TIMELINE_OUT=step.tsv
//   ./deltabit bench --geometry bonsai-27b --depths 0 --prompts 512 --no-history
//   python3 tools/timeline_summary.py step.tsv
//
// DELTABIT_TIMELINE_OUT: the file (default deltabit_timeline.tsv); DELTABIT_TIMELINE_LAST: how many of the
// last kernels to keep (default 20000, about 30 Bonsai-27B decode steps). Columns: start_ns, end_ns (GPU
// timestamps), grid_x, block_x, graph_id (0 outside graphs), name (demangled).
// Beside it, in the same clock, the host's CUDA runtime calls (what the host did while the GPU waited: a
// synchronisation, an allocation, a stretch of launches): the file with .api.tsv for .tsv (or .api.tsv
// appended), the last 2 × DELTABIT_TIMELINE_LAST of them; columns start_ns, end_ns, thread, name.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct KernelRecord {
    uint64_t start, end;
    uint32_t grid_x, block_x, graph_id;
    const char* name;  // owned by CUPTI, shared by every record of the kernel
};

struct ApiRecord {
    uint64_t start, end;
    uint32_t thread, cbid;
};

std::mutex records_mutex;
std::vector<KernelRecord> records;
std::vector<ApiRecord> api_records;

void check(CUptiResult status, const char* what) {
    if (status == CUPTI_SUCCESS) return;
    const char* text = nullptr;
    cuptiGetResultString(status, &text);
    std::fprintf(stderr, "deltabit timeline: %s: %s\n", what, text != nullptr ? text : "unknown CUPTI error");
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    constexpr size_t kBytes = size_t(8) << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
    *size = *buffer != nullptr ? kBytes : 0;
    *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* record = nullptr;
    std::lock_guard<std::mutex> lock(records_mutex);
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
            const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
            api_records.push_back({a->start, a->end, a->threadId, uint32_t(a->cbid)});
            continue;
        }
        if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        records.push_back({k->start, k->end, uint32_t(k->gridX), uint32_t(k->blockX), k->graphId, k->name});
    }
    std::free(buffer);
}

std::string demangled(const char* name) {
    if (name == nullptr) return "?";
    int status = 0;
    char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    std::string out = status == 0 && text != nullptr ? text : name;
    std::free(text);
    for (char& c : out)
        if (c == '\t' || c == '\n') c = ' ';
    return out;
}

std::string api_path(const std::string& kernels_path) {
    const std::string suffix = ".tsv";
    if (kernels_path.size() > suffix.size() && kernels_path.ends_with(suffix))
        return kernels_path.substr(0, kernels_path.size() - suffix.size()) + ".api.tsv";
    return kernels_path + ".api.tsv";
}

// The runtime calls of the kept kernels' time and after: the last 2 × `last`, at most.
void write_api_calls(const std::string& path, size_t last) {
    std::sort(api_records.begin(), api_records.end(), [](const ApiRecord& a, const ApiRecord& b) { return a.start < b.start; });
    const size_t first = api_records.size() > 2 * last ? api_records.size() - 2 * last : 0;
    FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
        std::perror("deltabit timeline: open the runtime-call output");
        return;
    }
    std::fprintf(f, "start_ns\tend_ns\tthread\tname\n");
    for (size_t i = first; i < api_records.size(); ++i) {
        const ApiRecord& r = api_records[i];
        const char* name = nullptr;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r.cbid, &name) != CUPTI_SUCCESS || name == nullptr)
            name = "?";
        std::fprintf(f, "%llu\t%llu\t%u\t%s\n", (unsigned long long)r.start, (unsigned long long)r.end, r.thread, name);
    }
    std::fclose(f);
    std::fprintf(stderr, "deltabit timeline: %zu of %zu runtime calls written to %s\n", api_records.size() - first,
                 api_records.size(), path.c_str());
}

void write_timeline() {
    check(cuptiActivityFlushAll(1), "flush");
    const char* path = std::getenv("DELTABIT_TIMELINE_OUT");
    const char* last_text = std::getenv("DELTABIT_TIMELINE_LAST");
    const size_t last = last_text != nullptr ? std::strtoull(last_text, nullptr, 10) : 20000;
    std::lock_guard<std::mutex> lock(records_mutex);
    std::sort(records.begin(), records.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
    const size_t first = records.size() > last ? records.size() - last : 0;
    FILE* f = std::fopen(path != nullptr ? path : "deltabit_timeline.tsv", "w");
    if (f == nullptr) {
        std::perror("deltabit timeline: open output");
        return;
    }
    std::fprintf(f, "start_ns\tend_ns\tgrid_x\tblock_x\tgraph_id\tname\n");
    std::unordered_map<const char*, std::string> names;
    for (size_t i = first; i < records.size(); ++i) {
        const KernelRecord& r = records[i];
        auto it = names.find(r.name);
        if (it == names.end()) it = names.emplace(r.name, demangled(r.name)).first;
        std::fprintf(f, "%llu\t%llu\t%u\t%u\t%u\t%s\n", (unsigned long long)r.start, (unsigned long long)r.end, r.grid_x,
                     r.block_x, r.graph_id, it->second.c_str());
    }
    std::fclose(f);
    std::fprintf(stderr, "deltabit timeline: %zu of %zu kernels written to %s\n", records.size() - first, records.size(),
                 path != nullptr ? path : "deltabit_timeline.tsv");
    write_api_calls(api_path(path != nullptr ? path : "deltabit_timeline.tsv"), last);
}

}  // namespace

// Called by the CUDA driver when it loads this library (CUDA_INJECTION64_PATH).
extern "C" int InitializeInjection(void) {
    check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel activity");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime-call activity");
    std::atexit(write_timeline);
    return 1;
}
