// Random-bit models of real geometries, built in memory: what `deltabit bench --geometry NAME`
// measures, so speed is read on the shapes that ship without downloading them.
//
// A synthetic model is an ordinary ModelWeights in the engine's GGUF conventions (models/weights.h):
// the same tensor names and shapes a converted checkpoint of that geometry has, so Model binds it
// and CudaModel uploads it exactly as it would a file. Only the numbers are made up:
//   - matrices (token_embd and output included) in a quantised type whose blocks start with an fp16
//     scale (Q1_0 by default; Q2_0, Q4_0, Q8_0): random codes, and a finite positive scale of about
//     1 / (√cols · rms level) so that a product with a unit-RMS input has about unit RMS; or in a plain
//     float type (F32, F16, BF16): uniform values in ±√3/√cols, the same unit RMS;
//   - norm weights 1 + U(−0.1, 0.1) (stored as the engine stores them, the hybrids' 1 + w added),
//     so activations stay O(1) however deep the model is;
//   - DeltaNet ssm_a = −U(1, 16) (= −exp(A_log) with transformers' A ~ U(0, 16) kept away from 0),
//     ssm_dt.bias = softplus⁻¹(dt) for dt log-uniform in [1e-3, 1e-1] (transformers' init), conv
//     taps U(−0.5, 0.5) (PyTorch's default bound 1/√fan_in with fan_in = K = 4).
// Every value comes from a counter-based hash of (seed, tensor, index), so the bytes are the same
// whatever the number of threads filling them.
#pragma once

#include "core/dtype.h"
#include "models/model_config.h"
#include "models/weights.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deltabit {

// A named geometry: a real model's published shape.
struct Geometry {
    std::string name;         // "bonsai-27b"
    std::string description;  // "Bonsai-27B (Qwen3.5-27B shape): qwen35, 64 layers, ..."
    ModelConfig config;
    DType default_type = DType::Q1_0;  // what `--type` is when not given (the released model's)
};

// The geometries `deltabit bench --geometry` knows, in the order `--help` lists them: bonsai-27b,
// bonsai-8b, bonsai-4b, qwen35-0.8b, diffusiongemma-26b-a4b, and three tiny ones for smoke tests
// (tiny-qwen35, tiny-qwen3, tiny-diffusiongemma).
const std::vector<Geometry>& known_geometries();
// By name; Error listing the known names when there is none.
const Geometry& find_geometry(std::string_view name);

// What a tensor of a model holds, which decides how it is filled.
enum class TensorRole { matrix, norm, conv, ssm_a, dt_bias };

struct TensorSpec {
    std::string name;            // GGUF name
    std::vector<int64_t> shape;  // ggml order: shape[0] is the row length
    DType dtype = DType::F32;
    TensorRole role = TensorRole::matrix;
};

// Every tensor a model of `config` holds, with the names and shapes the binders (models/bind.cpp)
// require: matrices in `matrix_dtype`, everything else F32. No output.weight when the config is tied.
// diffusion_gemma: `matrix_dtype` is the expert stacks' type; the other matrices are BF16 (the released
// checkpoint's storage) and the router F32 (as `deltabit convert` keeps it).
// Error naming the tensor when a matrix row is not a whole number of `matrix_dtype` blocks.
std::vector<TensorSpec> geometry_tensors(const ModelConfig& config, DType matrix_dtype);

struct SyntheticOptions {
    DType matrix_dtype = DType::Q1_0;  // Q1_0, Q2_0, Q4_0, Q8_0, F32, F16 or BF16
    uint64_t seed = 1;
    int threads = 0;  // 0 = the machine's hardware threads (at most 16)
};

// Random weights of `config` as described above; Error for a matrix dtype that is not one of the
// seven. `name` goes into ModelWeights::source() and the tensors' origins.
ModelWeights synthetic_weights(const ModelConfig& config, std::string_view name, const SyntheticOptions& options = {});

}  // namespace deltabit
