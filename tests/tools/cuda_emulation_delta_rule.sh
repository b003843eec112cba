#!/bin/bash
# The trainer's delta-rule tests (tests/train/test_cuda_delta_rule.cpp) on the host under
# tools/cuda_emulation: both kernel files (delta_rule_chunked_kernels.cu, fp32 on CUDA cores, and
# delta_rule_chunked_mma_kernels.cu, the bf16 tensor-core kernels) rewritten into plain C++ and run
# against the double reference, with nothing else of the trainer linked (the products' switch and the
# kernel marks come from the glue below). It checks the kernels' indexing, fragments and barriers before
# a GPU runs them, and does not replace that run: the emulated mma sums in double and rounds once, where
# the tensor cores truncate (tools/cuda_emulation/README.md says what else it cannot see).
#
# usage: tests/tools/cuda_emulation_delta_rule.sh [gtest args...]     (needs no build dir)
#   e.g. tests/tools/cuda_emulation_delta_rule.sh --gtest_filter='CudaTrainOps.DeltaRuleBf16*'
#   KERNEL_SOURCE=FILE builds FILE in place of the tensor-core kernel file (a planted-bug copy).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d /tmp/deltabit_emu_delta.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

mkdir -p "$OUT/kernel"
cp "${KERNEL_SOURCE:-$ROOT/src/train/cuda/delta_rule_chunked_mma_kernels.cu}" "$OUT/kernel/delta_rule_chunked_mma_kernels.cu"
python3 "$ROOT/tools/cuda_emulation/transform.py" "$ROOT/src/train/cuda/delta_rule_chunked_kernels.cu" "$OUT" > /dev/null
python3 "$ROOT/tools/cuda_emulation/transform.py" "$OUT/kernel/delta_rule_chunked_mma_kernels.cu" "$OUT" \
    --src "$ROOT/src" > /dev/null

cat > "$OUT/glue.cpp" <<'GLUE'
#include "backend/cuda_probe.h"
#include "train/cuda/gemm.h"
#include "train/cuda/kernel_marks.h"
namespace deltabit::cuda {
int device_count() { return 1; }
std::string device_summary() { return "cuda emulation on the host"; }
}  // namespace deltabit::cuda
namespace deltabit::train::cuda {
KernelMarks g_kernel_marks;
namespace {
GemmMath g_math = GemmMath::bf16;
}
void set_gemm_math(GemmMath math) { g_math = math; }
GemmMath gemm_math() { return g_math; }
}  // namespace deltabit::train::cuda
GLUE

FLAGS=(-std=c++20 -O2 -pthread -Wno-unknown-pragmas -DFMT_SHARED -DDELTABIT_HAVE_CUDA=1 -DDELTABIT_HAVE_TRAIN=1
       -I"$OUT/include" -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src" -I"$ROOT/tests" -I"$ROOT/tests/train")
OBJECTS=()
for s in "$OUT"/*.cpp "$ROOT/src/train/reference_ops.cpp" "$ROOT/tests/train/test_cuda_delta_rule.cpp"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
g++ -pthread "${OBJECTS[@]}" -lgtest -lgtest_main -lfmt -o "$OUT/test_delta_rule_emulated"
"$OUT/test_delta_rule_emulated" "$@"
