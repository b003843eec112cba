#!/bin/bash
# The GPU DiffusionGemma's own tests (tests/cuda/test_diffusion_gemma_cuda.cpp), built and run on the host
# under tools/cuda_emulation: every kernel the model launches is rewritten into plain C++ and run on CPU
# threads, the model's host code (models/diffusion_gemma_cuda.cpp, weights_cuda.cpp, device_arena.cpp) is
# compiled against the emulated runtime, and the CPU libraries come from a CPU-only build. So the whole
# forward — the order of the ops, every pointer and offset, the cache's room and its sliding moves — is
# checked against the CPU reference before a GPU runs it. It does not replace the GPU run (README of the
# emulation: what it cannot catch); quantised matrices are not emulated (their products are stubs that
# fail, and the tests use plain-float weights).
#
# usage: tests/tools/cuda_emulation_diffusion_gemma.sh BUILD_CPU [gtest args...]
#   BUILD_CPU  a build dir configured with -DDELTABIT_CUDA=OFF, with deltabit_models built
#   MODEL_SOURCE=FILE in the environment builds FILE in place of src/models/diffusion_gemma_cuda.cpp (a copy
#   with a planted bug, to see the tests catch it).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
shift
OUT=$(mktemp -d /tmp/deltabit_emu_diffusion_gemma.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

KERNELS=(ops/matmul/dense_cuda.cu ops/elementwise/rms_norm_cuda.cu ops/elementwise/gelu_glu_cuda.cu
         ops/elementwise/add_scale_cuda.cu ops/elementwise/scale_columns_cuda.cu ops/elementwise/softcap_cuda.cu
         ops/elementwise/rope_cuda.cu ops/elementwise/embedding_cuda.cu ops/elementwise/soft_embedding_cuda.cu
         ops/elementwise/moe_router_cuda.cu ops/moe/moe_experts_cuda.cu ops/moe/moe_experts_mma_cuda.cu
         ops/attention/attention_spans_cuda.cu
         ops/attention/diffusion_key_spans_cuda.cu)
for k in "${KERNELS[@]}"; do python3 "$ROOT/tools/cuda_emulation/transform.py" "$ROOT/src/$k" "$OUT" > /dev/null; done

# What the model links but the plain-float tests never run, and the probe the tests' GPU check calls.
cat > "$OUT/glue.cpp" <<'EOF'
#include "backend/cuda_probe.h"
#include "core/error.h"
#include "ops/matmul/gemm_cuda.h"
#include "ops/matmul/matmul_cuda.h"
namespace deltabit::cuda {
int device_count() { return 1; }
GemvWeights upload_gemv_weights(const WeightView&, const char* name) {
    fail("cuda emulation: {}: quantised matrices are not emulated", name);
}
size_t prompt_scratch_bytes(const GemvWeightView&, int64_t) { fail("cuda emulation: quantised products are not emulated"); }
PromptMatmulPath matmul_prompt(const float*, const GemvWeightView&, int64_t, float*, void*, cudaStream_t) {
    fail("cuda emulation: quantised products are not emulated");
}
}  // namespace deltabit::cuda
EOF

FLAGS=(-std=c++20 -O2 -pthread -Wno-unknown-pragmas -DFMT_SHARED -DDELTABIT_HAVE_CUDA=1 -DDELTABIT_HAVE_XXHASH=1
       "-DDELTABIT_SOURCE_DIR=\"$ROOT\"" -I"$OUT/include" -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src"
       -I"$ROOT/tests")
SOURCES=("$OUT"/*.cpp "${MODEL_SOURCE:-$ROOT/src/models/diffusion_gemma_cuda.cpp}" "$ROOT/src/models/weights_cuda.cpp"
         "$ROOT/src/models/device_arena.cpp" "$ROOT/tests/cuda/test_diffusion_gemma_cuda.cpp")
OBJECTS=()
for s in "${SOURCES[@]}"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
LIBS=()
for lib in models backend formats ops core; do LIBS+=("$BUILD/libdeltabit_$lib.a"); done
g++ -pthread "${OBJECTS[@]}" -Wl,--start-group "${LIBS[@]}" -Wl,--end-group -lgtest -lgtest_main -lfmt -lxxhash \
    -o "$OUT/test_diffusion_gemma_emulated"
"$OUT/test_diffusion_gemma_emulated" "$@"
