#!/bin/bash
# The CUDA trainer's op and whole-step tests (tests/train/test_cuda_ops.cpp, test_cuda_step.cpp) built
# and run on the host under tools/cuda_emulation, as cuda_emulation_diffusion.sh does for the block
# loop: every kernel file of src/train/cuda rewritten into plain C++, the device model, the profiler
# and the Trainer compiled against the emulated runtime, the CPU libraries from a CPU-only build. cuBLAS is not emulated: the
# three products of gemm.h are naive loops here (sums in double, in a fixed order), and atomics take one
# lock with blocks run one after another, so an emulated run repeats itself bit for bit. It checks the
# step's plumbing (the op order, the profile's spans and kernel marks) before a GPU runs it; it does
# not replace the GPU run (the emulation's README says what it cannot catch), and its times are host
# times of emulated threads, not a GPU's.
#
# usage: tests/tools/cuda_emulation_train.sh BUILD_CPU [gtest args...]
#   BUILD_CPU  a build dir configured with -DDELTABIT_CUDA=OFF, with test_train built (its libraries)
#   e.g. tests/tools/cuda_emulation_train.sh build-cpu --gtest_filter='CudaTrainer.Profiled*'
#        tests/tools/cuda_emulation_train.sh build-cpu --gtest_filter='CudaTrainOps.*'   (the op tests)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
shift
OUT=$(mktemp -d /tmp/deltabit_emu_train.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

for k in "$ROOT"/src/train/cuda/*.cu; do
    [ "$(basename "$k")" = gemm.cu ] && continue  # cuBLAS: the glue below
    python3 "$ROOT/tools/cuda_emulation/transform.py" "$k" "$OUT" > /dev/null
done

cat > "$OUT/glue.cpp" <<'GLUE'
#include "backend/cuda_probe.h"
#include "train/cuda/gemm.h"
namespace deltabit::cuda {
int device_count() { return 1; }
std::string device_summary() { return "cuda emulation on the host"; }
}  // namespace deltabit::cuda
namespace deltabit::train::cuda {
namespace {
GemmMath g_math = GemmMath::bf16;
}
void set_gemm_math(GemmMath math) { g_math = math; }
GemmMath gemm_math() { return g_math; }
// gemm.h's contracts as loops (every product in double, whatever the math: bf16 rounding is not emulated).
void linear_forward(const float* x, const float* w, int64_t n, int64_t in, int64_t out, float* y, bool accumulate) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t o = 0; o < out; ++o) {
            double sum = accumulate ? double(y[r * out + o]) : 0.0;
            for (int64_t i = 0; i < in; ++i) sum += double(x[r * in + i]) * double(w[o * in + i]);
            y[r * out + o] = float(sum);
        }
}
void linear_backward_input(const float* dy, const float* w, int64_t n, int64_t in, int64_t out, float* dx,
                           bool accumulate) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t i = 0; i < in; ++i) {
            double sum = accumulate ? double(dx[r * in + i]) : 0.0;
            for (int64_t o = 0; o < out; ++o) sum += double(dy[r * out + o]) * double(w[o * in + i]);
            dx[r * in + i] = float(sum);
        }
}
void linear_backward_weight(const float* dy, const float* x, int64_t n, int64_t in, int64_t out, float* dw) {
    for (int64_t o = 0; o < out; ++o)
        for (int64_t i = 0; i < in; ++i) {
            double sum = dw[o * in + i];
            for (int64_t r = 0; r < n; ++r) sum += double(dy[r * out + o]) * double(x[r * in + i]);
            dw[o * in + i] = float(sum);
        }
}
}  // namespace deltabit::train::cuda
GLUE

FLAGS=(-std=c++20 -O2 -pthread -Wno-unknown-pragmas -DFMT_SHARED -DDELTABIT_HAVE_CUDA=1 -DDELTABIT_HAVE_TRAIN=1
       -DDELTABIT_HAVE_XXHASH=1 "-DDELTABIT_SOURCE_DIR=\"$ROOT\"" -I"$OUT/include"
       -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src" -I"$ROOT/tests" -I"$ROOT/tests/train")
SOURCES=("$OUT"/*.cpp "$ROOT"/src/train/cuda/*.cpp "$ROOT/src/train/trainer.cpp" "$ROOT/tests/train/test_cuda_ops.cpp"
         "$ROOT/tests/train/test_cuda_step.cpp")
OBJECTS=()
for s in "${SOURCES[@]}"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
LIBS=()
for lib in train convert runtime sampling text models backend formats ops core; do
    [ -f "$BUILD/libdeltabit_$lib.a" ] && LIBS+=("$BUILD/libdeltabit_$lib.a")
done
g++ -pthread "${OBJECTS[@]}" -Wl,--start-group "${LIBS[@]}" -Wl,--end-group -lgtest -lgtest_main -lfmt -lxxhash \
    -o "$OUT/test_train_emulated"
"$OUT/test_train_emulated" "$@"
