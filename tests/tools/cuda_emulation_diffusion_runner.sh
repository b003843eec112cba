#!/bin/bash
# The GPU block-diffusion loop's tests — the device loop's run options on a toy denoiser
# (tests/cuda/test_diffusion_generate_cuda.cpp) and DiffusionRunner on CUDA on the DiffusionGemma fixture
# (tests/cuda/test_diffusion_runner_cuda.cpp: CPU–GPU parity, stop, record and replay) — built and run on the
# host under tools/cuda_emulation, as cuda_emulation_diffusion_gemma.sh does for the model: the step kernels
# (runtime/diffusion_step_cuda.cu) and the model's kernels are rewritten into plain C++, the loop, the runner,
# the replay and the model's host code are compiled against the emulated runtime, the CPU libraries come from
# a CPU-only build. It checks the loop's order, its syncs and copies, the cache's reset and regrowth, before
# a GPU runs them; it does not replace the GPU run (the emulation's README says what it cannot catch).
#
# usage: tests/tools/cuda_emulation_diffusion_runner.sh BUILD_CPU [gtest args...]
#   BUILD_CPU  a build dir configured with -DDELTABIT_CUDA=OFF, with deltabit_runtime built
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
shift
OUT=$(mktemp -d /tmp/deltabit_emu_diffusion_runner.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

KERNELS=(ops/matmul/dense_cuda.cu ops/elementwise/rms_norm_cuda.cu ops/elementwise/gelu_glu_cuda.cu
         ops/elementwise/add_scale_cuda.cu ops/elementwise/scale_columns_cuda.cu ops/elementwise/softcap_cuda.cu
         ops/elementwise/rope_cuda.cu ops/elementwise/embedding_cuda.cu ops/elementwise/soft_embedding_cuda.cu
         ops/elementwise/moe_router_cuda.cu ops/moe/moe_experts_cuda.cu ops/moe/moe_experts_mma_cuda.cu
         ops/attention/attention_spans_cuda.cu
         ops/attention/diffusion_key_spans_cuda.cu runtime/diffusion_step_cuda.cu)
for k in "${KERNELS[@]}"; do python3 "$ROOT/tools/cuda_emulation/transform.py" "$ROOT/src/$k" "$OUT" > /dev/null; done

# What the model links but the plain-float tests never run (quantised products; cuBLAS, below), the probe,
# and the backend choice (the CPU build's backend library was compiled without CUDA: it would refuse "cuda").
cat > "$OUT/glue.cpp" <<'GLUE'
#include "backend/backend.h"
#include "backend/cuda_probe.h"
#include "core/error.h"
#include "ops/matmul/dense_gemm_cuda.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/matmul_cuda.h"
namespace deltabit {
std::string resolve_backend(std::string_view choice) {
    if (choice != "cpu" && choice != "cuda" && choice != "auto") fail("backend: unknown backend '{}'", choice);
    return choice == "cpu" ? "cpu" : "cuda";
}
}  // namespace deltabit
namespace deltabit::cuda {
int device_count() { return 1; }
std::string device_summary() { return "cuda emulation on the host"; }
GemvWeights upload_gemv_weights(const WeightView&, const char* name) {
    fail("cuda emulation: {}: quantised matrices are not emulated", name);
}
size_t prompt_scratch_bytes(const GemvWeightView&, int64_t) { fail("cuda emulation: quantised products are not emulated"); }
PromptMatmulPath matmul_prompt(const float*, const GemvWeightView&, int64_t, float*, void*, cudaStream_t) {
    fail("cuda emulation: quantised products are not emulated");
}
// cuBLAS is not emulated: every plain-float product takes the naive fp32 kernel (matmul_plain), as the
// GPU does below 8 tokens; so the emulated logits round as that kernel does, not as the tensor cores.
bool plain_gemm_applies(DType, int64_t) { return false; }
size_t plain_gemm_scratch_bytes(DType, int64_t, int64_t) { return 0; }
void matmul_plain_gemm(const float*, const WeightView&, int64_t, float*, void*, cudaStream_t) {
    fail("cuda emulation: cuBLAS products are not emulated");
}
void matmul_plain_gemm_by_rows(const float*, const WeightView&, int64_t, float*, void*, cudaStream_t) {
    fail("cuda emulation: cuBLAS products are not emulated");
}
}  // namespace deltabit::cuda
GLUE

FLAGS=(-std=c++20 -O2 -pthread -Wno-unknown-pragmas -DFMT_SHARED -DDELTABIT_HAVE_CUDA=1 -DDELTABIT_HAVE_XXHASH=1
       "-DDELTABIT_SOURCE_DIR=\"$ROOT\"" -I"$OUT/include" -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src"
       -I"$ROOT/tests")
SOURCES=("$OUT"/*.cpp "$ROOT/src/models/diffusion_gemma_cuda.cpp" "$ROOT/src/models/weights_cuda.cpp"
         "$ROOT/src/models/device_arena.cpp" "$ROOT/src/runtime/diffusion_generate_cuda.cpp"
         "$ROOT/src/runtime/diffusion_gemma_denoiser_cuda.cpp" "$ROOT/src/runtime/diffusion_runner.cpp"
         "$ROOT/src/runtime/diffusion_replay_cuda.cpp" "$ROOT/tests/cuda/test_diffusion_generate_cuda.cpp"
         "$ROOT/tests/cuda/test_diffusion_runner_cuda.cpp")
OBJECTS=()
for s in "${SOURCES[@]}"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
LIBS=()
for lib in runtime sampling models backend formats ops core; do LIBS+=("$BUILD/libdeltabit_$lib.a"); done
g++ -pthread "${OBJECTS[@]}" -Wl,--start-group "${LIBS[@]}" -Wl,--end-group -lgtest -lgtest_main -lfmt -lxxhash \
    -o "$OUT/test_diffusion_runner_emulated"
"$OUT/test_diffusion_runner_emulated" "$@"
