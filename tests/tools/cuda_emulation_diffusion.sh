#!/bin/bash
# The GPU block-diffusion code's tests, built and run on the host under tools/cuda_emulation: every kernel
# they launch is rewritten into plain C++ and run on CPU threads, the host code is compiled against the
# emulated runtime, and the CPU libraries come from a CPU-only build. It checks the op order, every pointer
# and offset, the cache's room and sliding moves, the loop's syncs and copies, before a GPU runs them; it
# does not replace the GPU run (the emulation's README says what it cannot catch). Quantised matrices and
# cuBLAS are not emulated: the tests use plain-float weights, whose products all take the naive fp32 kernel.
#
# usage: tests/tools/cuda_emulation_diffusion.sh BUILD_CPU model|loop [gtest args...]
#   BUILD_CPU  a build dir configured with -DDELTABIT_CUDA=OFF, with deltabit_runtime built
#   model      the GPU DiffusionGemma's own tests (tests/cuda/test_diffusion_gemma_cuda.cpp)
#   loop       the block loop on the device and DiffusionRunner on CUDA (test_diffusion_generate_cuda.cpp,
#              test_diffusion_runner_cuda.cpp: CPU–GPU parity, stop, record and replay)
#   MODEL_SOURCE=FILE in the environment builds FILE in place of src/models/diffusion_gemma_cuda.cpp (a copy
#   with a planted bug, to see the tests catch it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
MODE=${2:-}
[ "$MODE" = model ] || [ "$MODE" = loop ] || { echo "usage: $0 BUILD_CPU model|loop [gtest args...]" >&2; exit 2; }
shift 2
OUT=$(mktemp -d /tmp/deltabit_emu_diffusion.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

KERNELS=(ops/matmul/dense_cuda.cu ops/elementwise/rms_norm_cuda.cu ops/elementwise/gelu_glu_cuda.cu
         ops/elementwise/add_scale_cuda.cu ops/elementwise/scale_columns_cuda.cu ops/elementwise/softcap_cuda.cu
         ops/elementwise/rope_cuda.cu ops/elementwise/embedding_cuda.cu ops/elementwise/soft_embedding_cuda.cu
         ops/elementwise/moe_router_cuda.cu ops/moe/moe_experts_cuda.cu ops/moe/moe_experts_mma_cuda.cu
         ops/attention/attention_spans_cuda.cu ops/attention/diffusion_key_spans_cuda.cu)
if [ "$MODE" = loop ]; then KERNELS+=(runtime/diffusion_step_cuda.cu); fi
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
SOURCES=("$OUT"/*.cpp "${MODEL_SOURCE:-$ROOT/src/models/diffusion_gemma_cuda.cpp}" "$ROOT/src/models/weights_cuda.cpp"
         "$ROOT/src/models/device_arena.cpp")
if [ "$MODE" = model ]; then
    SOURCES+=("$ROOT/tests/cuda/test_diffusion_gemma_cuda.cpp")
else
    SOURCES+=("$ROOT/src/runtime/diffusion_generate_cuda.cpp" "$ROOT/src/runtime/diffusion_gemma_denoiser_cuda.cpp"
              "$ROOT/src/runtime/diffusion_runner.cpp" "$ROOT/src/runtime/diffusion_replay_cuda.cpp"
              "$ROOT/tests/cuda/test_diffusion_generate_cuda.cpp" "$ROOT/tests/cuda/test_diffusion_runner_cuda.cpp")
fi
OBJECTS=()
for s in "${SOURCES[@]}"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
LIBS=()
for lib in runtime sampling models backend formats ops core; do LIBS+=("$BUILD/libdeltabit_$lib.a"); done
g++ -pthread "${OBJECTS[@]}" -Wl,--start-group "${LIBS[@]}" -Wl,--end-group -lgtest -lgtest_main -lfmt -lxxhash \
    -o "$OUT/test_diffusion_${MODE}_emulated"
"$OUT/test_diffusion_${MODE}_emulated" "$@"
