// Host code only (the kernels are in ops/): a .cpp so that fmt's compile-time checks work, compiled
// to nothing in builds without CUDA.
#include "models/sequence_state_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "models/kv_cache.h"
#include "models/sequence_state.h"

namespace deltabit {

namespace {

void check(cudaError_t status, const char* what) { cuda::cuda_check(status, what); }

std::atomic<uint64_t> next_state_id{1};

cuda::KvElement kv_element(KvFormat kv) {
    switch (kv) {
        case KvFormat::f32: return cuda::KvElement::f32;
        case KvFormat::f16: return cuda::KvElement::f16;
        case KvFormat::kivi4: return cuda::KvElement::kivi4;
    }
    return cuda::KvElement::f32;
}

// The kivi4 layout of models/kv_cache.h. The ring holds the settled residual window (at most
// kKiviResidual + kKiviGroup − 1 rows) plus the rows of one call, all live at once until the call's
// compress.
cuda::KiviLayout kivi_layout() {
    cuda::KiviLayout k;
    k.sinks = kKiviSinks;
    k.residual = kKiviResidual;
    k.block = kKiviGroup;
    k.value_group = kKiviGroup;
    k.ring_rows = kKiviResidual + kKiviGroup + kCudaMaxCallTokens;
    return k;
}

// A store of `capacity` positions of `row` elements, allocated for its format.
CudaKvSide make_kv_side(KvFormat kv, KvSide side, int64_t capacity, int64_t row) {
    CudaKvSide s;
    s.view.element = kv_element(kv);
    if (kv != KvFormat::kivi4) {
        s.data = cuda::DeviceBuffer(size_t(capacity * row) * cuda::kv_element_bytes(s.view.element));
        s.view.data = s.data.get();
        return s;
    }
    const cuda::KiviLayout k = kivi_layout();
    const int64_t middle = std::max<int64_t>(capacity - k.sinks, 0);  // positions the codes can ever hold
    const int64_t params = side == KvSide::keys ? middle / k.block * row : middle * (row / k.value_group);
    s.data = cuda::DeviceBuffer(size_t((k.sinks + k.ring_rows) * row) * sizeof(float));
    s.codes = cuda::DeviceBuffer(size_t(middle * row / 2));
    s.min = cuda::DeviceBuffer(size_t(params) * sizeof(uint16_t));
    s.scale = cuda::DeviceBuffer(size_t(params) * sizeof(uint16_t));
    s.view.data = s.data.get();
    s.view.codes = s.codes.get<uint8_t>();
    s.view.min = s.min.get<uint16_t>();
    s.view.scale = s.scale.get<uint16_t>();
    s.view.keys = side == KvSide::keys;
    s.view.kivi = k;
    return s;
}

}  // namespace

CudaSequenceState::CudaSequenceState(const ModelConfig& c, int64_t max_positions, KvFormat kv)
    : config_(c), max_positions_(max_positions), kv_format_(kv), kv_row_(c.n_head_kv * c.head_dim),
      id_(next_state_id.fetch_add(1)), layers_(size_t(c.n_layer())) {
    if (max_positions < 0) fail("cuda sequence state: max_positions {} is negative", max_positions);
    if (kv == KvFormat::kivi4 && c.head_dim % kKiviGroup != 0)
        fail("cuda sequence state: kivi4 quantises values in groups of {} channels within a head, but head_dim is {}",
             kKiviGroup, c.head_dim);
    for (int64_t i = 0; i < c.n_layer(); ++i) {
        CudaLayerState& s = layers_[size_t(i)];
        if (c.layers[size_t(i)] == LayerKind::linear_attention) {
            const size_t conv = size_t((c.ssm_conv_kernel - 1) * c.ssm_conv_channels()) * sizeof(float);
            const size_t recurrent = size_t(c.ssm_n_value_heads * c.ssm_key_dim * c.ssm_value_dim) * sizeof(float);
            for (int copy = 0; copy < 2; ++copy) {
                s.conv[copy] = cuda::DeviceBuffer(conv);
                s.recurrent[copy] = cuda::DeviceBuffer(recurrent);
                if (conv != 0) check(cudaMemset(s.conv[copy].get(), 0, conv), "zero conv state");
                check(cudaMemset(s.recurrent[copy].get(), 0, recurrent), "zero recurrent state");
            }
        } else {
            const KvFormat layer_kv = layer_kv_format(c, kv, i);  // kivi4 keeps an attending layer 0 in f16
            s.k = make_kv_side(layer_kv, KvSide::keys, max_positions, kv_row_);
            s.v = make_kv_side(layer_kv, KvSide::values, max_positions, kv_row_);
        }
    }
}

void CudaSequenceState::kv_side_chunks(const CudaKvSide& side, const std::string& prefix, int64_t position,
                                       bool checkpoint_only, std::vector<DeviceChunk>& out) const {
    const int64_t row = kv_row_;
    if (side.view.element != cuda::KvElement::kivi4) {
        if (checkpoint_only) return;  // a plain cache is cut back, never restored
        const size_t bytes = size_t(position * row) * cuda::kv_element_bytes(side.view.element);
        out.push_back({prefix, bytes, {{&side.data, 0, bytes}}});
        return;
    }
    const cuda::KiviLayout& k = side.view.kivi;
    const KiviSplit split = kivi_split(position);
    const size_t row_bytes = size_t(row) * sizeof(float);
    // The residual positions [sinks + quantised, position) in the ring, in order: one or two runs.
    DeviceChunk residual{prefix + ".residual", size_t(split.residual) * row_bytes, {}};
    for (int64_t p = split.sinks + split.quantised; p < position;) {
        const int64_t slot = cuda::kv_data_row(side.view, p);
        const int64_t run = std::min(position - p, k.sinks + k.ring_rows - slot);
        residual.pieces.push_back({&side.data, size_t(slot) * row_bytes, size_t(run) * row_bytes});
        p += run;
    }
    if (checkpoint_only) {
        out.push_back(std::move(residual));
        return;
    }
    const int64_t params = side.view.keys ? split.quantised / k.block * row : split.quantised * (row / k.value_group);
    const size_t sink_bytes = size_t(split.sinks) * row_bytes, code_bytes = size_t(split.quantised * row / 2),
                 param_bytes = size_t(params) * sizeof(uint16_t);
    out.push_back({prefix + ".sink", sink_bytes, {{&side.data, 0, sink_bytes}}});
    out.push_back({prefix + ".codes", code_bytes, {{&side.codes, 0, code_bytes}}});
    out.push_back({prefix + ".min", param_bytes, {{&side.min, 0, param_bytes}}});
    out.push_back({prefix + ".scale", param_bytes, {{&side.scale, 0, param_bytes}}});
    out.push_back(std::move(residual));
}

std::vector<CudaSequenceState::DeviceChunk> CudaSequenceState::device_chunks(int64_t position,
                                                                             bool checkpoint_only) const {
    std::vector<DeviceChunk> out;
    for (size_t l = 0; l < layers_.size(); ++l) {
        const CudaLayerState& s = layers_[l];
        const std::string blk = "blk." + std::to_string(l) + ".";
        if (config_.layers[l] == LayerKind::linear_attention) {
            const cuda::DeviceBuffer& conv = s.conv[parity_];
            const cuda::DeviceBuffer& recurrent = s.recurrent[parity_];
            out.push_back({blk + "gdn.conv", conv.bytes(), {{&conv, 0, conv.bytes()}}});
            out.push_back({blk + "gdn.recurrent", recurrent.bytes(), {{&recurrent, 0, recurrent.bytes()}}});
        } else {
            kv_side_chunks(s.k, blk + "attn.k", position, checkpoint_only, out);
            kv_side_chunks(s.v, blk + "attn.v", position, checkpoint_only, out);
        }
    }
    // The CPU state defines the layout; a difference is a bug here, not bad input.
    const std::vector<StateChunkSpec> layout = checkpoint_only ? state_checkpoint_layout(config_, kv_format_, position)
                                                               : state_image_layout(config_, kv_format_, position);
    bool same = layout.size() == out.size();
    for (size_t i = 0; same && i < out.size(); ++i) same = layout[i].name == out[i].name && layout[i].bytes == out[i].bytes;
    if (!same)
        throw std::logic_error("cuda sequence state: device chunks differ from the CPU state layout at position " +
                               std::to_string(position));
    return out;
}

// Plain cudaMemcpy on the legacy stream: it waits for the model's stream (a blocking stream), so nothing
// still queued for this state can run during or after the copy.
void CudaSequenceState::download(const DeviceChunk& chunk, StateChunk& into) {
    into.name = chunk.name;
    into.bytes.resize(chunk.bytes);
    size_t at = 0;
    for (const DevicePiece& piece : chunk.pieces) {
        if (piece.bytes != 0) piece.buffer->download(into.bytes.data() + at, piece.bytes, piece.offset);
        at += piece.bytes;
    }
}

void CudaSequenceState::upload(const DeviceChunk& chunk, const StateChunk& from) {
    size_t at = 0;
    for (const DevicePiece& piece : chunk.pieces) {
        if (piece.bytes != 0)
            const_cast<cuda::DeviceBuffer*>(piece.buffer)->upload(from.bytes.data() + at, piece.bytes, piece.offset);
        at += piece.bytes;
    }
}

StateImage CudaSequenceState::save() const {
    StateImage image;
    image.position = position_;
    image.kv_format = kv_format_;
    for (const DeviceChunk& chunk : device_chunks(position_, false)) download(chunk, image.chunks.emplace_back());
    return image;
}

namespace {
const StateChunk& chunk_named(const std::vector<StateChunk>& chunks, const std::string& name) {
    return *std::find_if(chunks.begin(), chunks.end(), [&](const StateChunk& c) { return c.name == name; });
}
}  // namespace

void CudaSequenceState::load(const StateImage& image) {
    if (image.kv_format == kv_format_ && image.position > max_positions_)
        fail("cuda sequence state: load: the image is at position {}, this sequence holds at most {}", image.position,
             max_positions_);
    validate_state_image(config_, kv_format_, image);
    for (const DeviceChunk& chunk : device_chunks(image.position, false)) upload(chunk, chunk_named(image.chunks, chunk.name));
    position_ = image.position;
    undoable_ = false;
}

void CudaSequenceState::undo_step() {
    if (!undoable_) throw std::logic_error("cuda sequence state: undo_step with no decode step to undo");
    --position_;
    parity_ ^= 1;
    undoable_ = false;
}

StateCheckpoint CudaSequenceState::checkpoint() const {
    StateCheckpoint cp;
    cp.position = position_;
    for (const DeviceChunk& chunk : device_chunks(position_, true)) download(chunk, cp.chunks.emplace_back());
    return cp;
}

void CudaSequenceState::restore(const StateCheckpoint& cp) {
    validate_state_checkpoint(config_, kv_format_, cp);
    if (cp.position > position_)
        fail("cuda sequence state: restore: the checkpoint is at position {}, past this sequence's position {} "
             "(its KV cache does not hold those tokens)", cp.position, position_);
    const std::vector<DeviceChunk> expected = device_chunks(cp.position, true);
    for (const DeviceChunk& chunk : expected) upload(chunk, chunk_named(cp.chunks, chunk.name));
    position_ = cp.position;
    undoable_ = false;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
