// Host code only: a .cpp so that fmt's compile-time checks work, compiled to nothing without CUDA.
#include "models/weights_cuda.h"

#if DELTABIT_HAVE_CUDA

#include <algorithm>

#include "core/error.h"
#include "ops/weight_repack.h"

namespace deltabit {

const float* CudaUploads::vector(const float* host, int64_t n) {
    cuda::DeviceBuffer& b = vectors.emplace_back(size_t(n) * sizeof(float));
    b.upload(host, size_t(n) * sizeof(float));
    return static_cast<const float*>(b.get<float>());
}

CudaMatrix CudaUploads::matrix(const WeightView& w, const std::string& name) {
    CudaMatrix m;
    m.rows = w.rows;
    m.cols = w.cols;
    max_cols = std::max(max_cols, w.cols);
    if (gemv_layout_supports(w.dtype)) {
        m.quantized = true;
        m.gemv = cuda::upload_gemv_weights(w, name.c_str());
        return m;
    }
    if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
        fail("cuda model: {}: no CUDA matmul for dtype {}", name, dtype_name(w.dtype));
    const size_t bytes = size_t(w.rows) * w.row_bytes();
    m.plain = cuda::DeviceBuffer(bytes);
    m.plain.upload(w.data, bytes);
    m.plain_view = {m.plain.get(), w.dtype, w.rows, w.cols};
    return m;
}

CudaLayer upload_layer(const LayerWeights& src, const ModelConfig& c, size_t index, CudaUploads& uploads) {
    CudaLayer L;
    const std::string blk = "blk." + std::to_string(index) + ".";
    L.kind = src.kind;
    L.moe = src.moe;
    L.attn_norm = uploads.vector(src.attn_norm, c.n_embd);
    L.ffn_norm = uploads.vector(src.ffn_norm, c.n_embd);
    if (src.kind == LayerKind::full_attention) {
        const AttentionWeights& a = src.attention;
        L.q = uploads.matrix(a.q, blk + "attn_q.weight");
        L.k = uploads.matrix(a.k, blk + "attn_k.weight");
        L.v = uploads.matrix(a.v, blk + "attn_v.weight");
        L.attn_output = uploads.matrix(a.output, blk + "attn_output.weight");
        L.q_norm = uploads.vector(a.q_norm, c.head_dim);
        L.k_norm = uploads.vector(a.k_norm, c.head_dim);
    } else {
        const DeltaNetWeights& d = src.deltanet;
        L.qkv = uploads.matrix(d.qkv, blk + "attn_qkv.weight");
        L.z_gate = uploads.matrix(d.gate, blk + "attn_gate.weight");
        L.beta = uploads.matrix(d.beta, blk + "ssm_beta.weight");
        L.alpha = uploads.matrix(d.alpha, blk + "ssm_alpha.weight");
        L.ssm_output = uploads.matrix(d.output, blk + "ssm_out.weight");
        L.conv = uploads.vector(d.conv, c.ssm_conv_channels() * c.ssm_conv_kernel);
        L.ssm_a = uploads.vector(d.ssm_a, c.ssm_n_value_heads);
        L.dt_bias = uploads.vector(d.dt_bias, c.ssm_n_value_heads);
        L.ssm_norm = uploads.vector(d.norm, c.ssm_value_dim);
    }
    const FfnWeights* ffn = src.moe ? (src.experts.has_shared ? &src.experts.shared : nullptr) : &src.ffn;
    if (ffn != nullptr) {
        L.ffn_gate = uploads.matrix(ffn->gate, blk + (src.moe ? "ffn_gate_shexp.weight" : "ffn_gate.weight"));
        L.ffn_up = uploads.matrix(ffn->up, blk + (src.moe ? "ffn_up_shexp.weight" : "ffn_up.weight"));
        L.ffn_down = uploads.matrix(ffn->down, blk + (src.moe ? "ffn_down_shexp.weight" : "ffn_down.weight"));
    }
    if (src.moe) {
        const MoeWeights& e = src.experts;
        L.router = uploads.matrix(e.router, blk + "ffn_gate_inp.weight");
        L.experts_gate = uploads.matrix(e.gate, blk + "ffn_gate_exps.weight");
        L.experts_up = uploads.matrix(e.up, blk + "ffn_up_exps.weight");
        L.experts_down = uploads.matrix(e.down, blk + "ffn_down_exps.weight");
        L.has_shared = e.has_shared;
        if (e.has_shared) L.shared_gate = uploads.matrix(e.shared_gate, blk + "ffn_gate_inp_shexp.weight");
    }
    return L;
}

}  // namespace deltabit

#endif  // DELTABIT_HAVE_CUDA
