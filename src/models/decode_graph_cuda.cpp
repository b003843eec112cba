// The CUDA model's decode step: its CUDA graph, captured once per sequence state and replayed, and greedy
// run-ahead (models/model_cuda.h). Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled
// to nothing in builds without CUDA.
#include "models/model_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <vector>

#include "core/error.h"
#include "ops/elementwise/elementwise_cuda.h"

namespace deltabit {

namespace {

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

// Kernel nodes of a captured graph (its memcpy/memset nodes, if any, not counted); 0 when it cannot be read.
int64_t kernel_nodes(cudaGraph_t graph) {
    size_t count = 0;
    if (cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return 0;
    std::vector<cudaGraphNode_t> nodes(count);
    if (cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return 0;
    int64_t kernels = 0;
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType type{};
        if (cudaGraphNodeGetType(node, &type) == cudaSuccess && type == cudaGraphNodeTypeKernel) ++kernels;
    }
    return kernels;
}

}  // namespace

const float* CudaModel::enqueue_decode_step(CudaSequenceState& state) {
    const int32_t* d_token = step_.get<int32_t>();
    float* logits = temp(config_.n_vocab);
    // The step's fused seams where their kernel holds the hidden size, else the prompt path's seams.
    run_layers(state, d_token, d_token + 1, 1, 0, logits, config_.n_embd <= cuda::kResidualNormMaxDim);
    return logits;
}

bool CudaModel::capture_decode_graph(CudaSequenceState& state) {
    if (graph_state_id_ != state.id()) release_graph();
    DecodeGraph& slot = graphs_[state.parity()];
    const float* logits = nullptr;
    cudaGraph_t graph = record_graph([&] { logits = enqueue_decode_step(state); }, "decode graph");
    if (arena_->overflowed()) {
        // The step needs more scratch than the eager step that sized the arena (not expected: its size
        // does not depend on the sequence). Run this step eagerly; the next call grows the arena and
        // captures again.
        cudaGraphDestroy(graph);
        arena_->rewind(0);
        return false;
    }
    stats_.step_kernels = kernel_nodes(graph);
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    check(status, "instantiate decode graph");
    slot.exec = exec;
    slot.logits = logits;
    graph_state_id_ = state.id();
    ++stats_.graph_captures;
    return true;
}

cudaGraph_t CudaModel::record_graph(const std::function<void()>& enqueue, const char* what) {
    cudaGraph_t graph = nullptr;
    // Relaxed: the GEMV launcher queries the device (attributes, occupancy) while it is being recorded.
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), what);
    try {
        enqueue();
    } catch (...) {
        cudaStreamEndCapture(stream_, &graph);
        if (graph != nullptr) cudaGraphDestroy(graph);
        throw;
    }
    check(cudaStreamEndCapture(stream_, &graph), what);
    return graph;
}

void CudaModel::release_graph() {
    for (DecodeGraph& g : graphs_) {
        if (g.exec != nullptr) cudaGraphExecDestroy(g.exec);
        g = DecodeGraph{};
    }
    graph_state_id_ = 0;
}

const float* CudaModel::decode_step(CudaSequenceState& state, int32_t id, bool may_capture) {
    begin_call(decode_arena_);
    // The pinned inputs may be rewritten once the previous step's upload has read them.
    check(cudaEventSynchronize(step_uploaded_), "wait for the previous decode inputs");
    step_host_[0] = id;
    step_host_[1] = int32_t(state.position());
    check(cudaMemcpyAsync(step_.get(), step_host_, 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload decode inputs");
    check(cudaEventRecord(step_uploaded_, stream_), "record decode inputs");

    const float* logits = nullptr;
    bool graph = graphs_enabled_ && decode_sized_;
    if (graph && (graph_state_id_ != state.id() || graphs_[state.parity()].exec == nullptr))
        graph = may_capture && capture_decode_graph(state);
    if (graph) {
        const DecodeGraph& g = graphs_[state.parity()];
        check(cudaGraphLaunch(g.exec, stream_), "replay decode graph");
        ++stats_.graph_replays;
        logits = g.logits;
    } else {
        logits = enqueue_decode_step(state);
        ++stats_.eager_steps;
        decode_sized_ = true;  // the arena grows to this step's needs at the next call
    }
    state.advance_step();
    return logits;
}

std::optional<int32_t> CudaModel::argmax_and_step(CudaSequenceState& state, const float* device_logits,
                                                  const float** step_logits) {
    // Only a captured graph: it proves the decode arena is sized (no call below can reallocate it while
    // the argmax still reads logits that live there).
    if (!(graphs_enabled_ && decode_sized_) || graph_state_id_ != state.id() ||
        graphs_[state.parity()].exec == nullptr || state.position() >= state.max_positions())
        return std::nullopt;
    check(cudaEventSynchronize(step_uploaded_), "wait for the previous decode inputs");
    step_host_[1] = int32_t(state.position());
    check(cudaMemcpyAsync(step_.get<int32_t>() + 1, step_host_ + 1, sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
          "upload decode position");
    check(cudaEventRecord(step_uploaded_, stream_), "record decode inputs");
    // The argmax writes the step's token id in place; a copy of it comes back while the step runs. A
    // non-finite report lands there too: the step then embeds a NaN row, and the caller undoes it.
    cuda::argmax(device_logits, config_.n_vocab, argmax_scratch_.get(), step_.get<int32_t>(), stream_);
    check(cudaMemcpyAsync(token_host_, step_.get<int32_t>(), sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
          "download run-ahead token");
    check(cudaEventRecord(token_ready_, stream_), "record run-ahead token");
    begin_call(decode_arena_);
    const DecodeGraph& g = graphs_[state.parity()];
    check(cudaGraphLaunch(g.exec, stream_), "replay decode graph");
    ++stats_.graph_replays;
    ++stats_.run_ahead_steps;
    state.advance_step();
    *step_logits = g.logits;
    check(cudaEventSynchronize(token_ready_), "wait for the run-ahead token");
    return *token_host_;
}

void CudaModel::set_decode_graphs(bool enabled) { graphs_enabled_ = enabled; }

void CudaModel::set_seam_folding(bool enabled) {
    // The captured steps have the other seams; a replay in flight must end before its graph goes.
    check(cudaStreamSynchronize(stream_), "drain before changing the decode step");
    release_graph();
    seam_folding_ = enabled;
}

void CudaModel::set_rope_table(bool enabled) {
    // As set_seam_folding: the captured steps read (or do not read) the table.
    check(cudaStreamSynchronize(stream_), "drain before changing the decode step");
    release_graph();
    rope_table_ = enabled;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
