#!/bin/bash
# The grouped MoE experts' GPU tests (tests/cuda/test_moe_experts_cuda.cpp), built and run on the host under
# tools/cuda_emulation: the sort, both paths' expert products (CUDA cores and tensor cores:
# ops/moe/moe_experts_cuda.cu, moe_experts_mma_cuda.cu) and the combine rewritten into plain C++ and run on CPU
# threads against the CPU reference. Quantised matrices are uploaded by the host repack (the code of
# cuda::upload_gemv_weights; the GEMV kernels are not built). The integer mma is exact here as on the device;
# the emulated bf16 mma sums in double and rounds once (README), so the bf16 bound is not tested at its edge.
# Slow: the DiffusionGemma shapes (*_dg_*, *_of_128) would take hours; pick with --gtest_filter.
#
# usage: tests/tools/cuda_emulation_moe_experts.sh BUILD_CPU [gtest args...]
#   BUILD_CPU  a build dir configured with -DDELTABIT_CUDA=OFF, with deltabit_ops and deltabit_core built
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
shift
OUT=$(mktemp -d /tmp/deltabit_emu_moe_experts.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

for k in ops/moe/moe_experts_cuda.cu ops/moe/moe_experts_mma_cuda.cu; do
    python3 "$ROOT/tools/cuda_emulation/transform.py" "$ROOT/src/$k" "$OUT" > /dev/null
done

cat > "$OUT/glue.cpp" <<'GLUE'
#include "backend/cuda_probe.h"
#include "core/error.h"
#include "ops/matmul/matmul_cuda.h"
#include "ops/matmul/weight_repack.h"
namespace deltabit::cuda {
int device_count() { return 1; }
// cuda::upload_gemv_weights (ops/matmul/matmul_cuda.cu) without the GEMV kernels it shares a file with.
GemvWeights upload_gemv_weights(const WeightView& host_weights, const char* name) {
    const GemvRepacked packed = repack_for_gemv(host_weights, name);
    verify_gemv_repack(host_weights, packed, name);
    GemvWeights out;
    out.dtype = packed.dtype;
    out.rows = packed.rows;
    out.cols = packed.cols;
    out.codes = DeviceBuffer(packed.codes.size());
    out.codes.upload(packed.codes.data(), packed.codes.size());
    const size_t scale_bytes = packed.scales.size() * sizeof(uint16_t);
    out.scales = DeviceBuffer((scale_bytes + 15) / 16 * 16);
    out.scales.upload(packed.scales.data(), scale_bytes);
    return out;
}
}  // namespace deltabit::cuda
GLUE

FLAGS=(-std=c++20 -O2 -pthread -Wno-unknown-pragmas -DFMT_SHARED -DDELTABIT_HAVE_CUDA=1
       -I"$OUT/include" -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src" -I"$ROOT/tests")
OBJECTS=()
for s in "$OUT"/*.cpp "$ROOT/tests/cuda/test_moe_experts_cuda.cpp"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
g++ -pthread "${OBJECTS[@]}" -Wl,--start-group "$BUILD/libdeltabit_ops.a" "$BUILD/libdeltabit_core.a" -Wl,--end-group \
    -lgtest -lgtest_main -lfmt -o "$OUT/test_moe_experts_emulated"
"$OUT/test_moe_experts_emulated" "$@"
