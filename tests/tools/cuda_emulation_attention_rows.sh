#!/bin/bash
# The rows forms of the decode attention (tests/cuda/test_attention_rows_cuda.cpp), built and run on the host
# under tools/cuda_emulation: the prologue, the split kernels (staged f32, staged f16 on tensor cores,
# keys_across_lanes over f32, f16 and kivi4), the combine and kivi_compress, single calls and rows forms, are
# rewritten into plain C++ and run on CPU threads, so the rows' indexing — the block's row, its table entry,
# its q, gate, output and scratch region, early exits past its splits — is checked before a GPU runs it. The
# register kernels' L2 prefetches (inline PTX, which the emulation does not take) are dropped from the
# rewritten header: a prefetch is only a hint. Needs no build dir: the test links only header code, env_switch
# and two stubs.
#
# usage: tests/tools/cuda_emulation_attention_rows.sh [gtest args...]
#   Default filter: the small-heads case and the refusals (the Bonsai-sized cases take hours emulated).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d /tmp/deltabit_emu_attention_rows.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

for k in attention_decode_cuda attention_split_f32_cuda attention_split_f16_cuda attention_split_kivi4_cuda \
         attention_split_staged_cuda kivi_cuda; do
    python3 "$ROOT/tools/cuda_emulation/transform.py" "$ROOT/src/ops/attention/$k.cu" "$OUT" > /dev/null
done
sed -i -E 's/asm volatile\("prefetch\.global\.L2 \[%0\];" ::"l"\((.*)\)\);/(void)(\1);/' \
    "$OUT/include/ops/attention/attention_split_register.cuh"
if grep -q 'asm volatile' "$OUT/include/ops/attention/attention_split_register.cuh"; then
    echo "cuda_emulation_attention_rows: inline PTX left in attention_split_register.cuh" >&2
    exit 1
fi

cat > "$OUT/glue.cpp" <<'GLUE'
namespace deltabit::cuda {
int device_count() { return 1; }                     // the tests' GPU check
bool programmatic_launch_enabled() { return true; }  // launches are sequential here either way
}  // namespace deltabit::cuda
GLUE

FLAGS=(-std=c++20 -O1 -pthread -Wno-unknown-pragmas -DFMT_HEADER_ONLY -DDELTABIT_HAVE_CUDA=1 -I"$OUT/include"
       -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src" -I"$ROOT/tests")
OBJECTS=()
for s in "$OUT"/*.cpp "$ROOT/src/core/env_switch.cpp" "$ROOT/tests/cuda/test_attention_rows_cuda.cpp"; do
    o="$OUT/$(basename "$s").o"
    g++ "${FLAGS[@]}" -c "$s" -o "$o"
    OBJECTS+=("$o")
done
g++ -pthread "${OBJECTS[@]}" -lgtest -lgtest_main -o "$OUT/test_attention_rows_emulated"
if [ $# -eq 0 ]; then set -- --gtest_filter='AttentionRows.SmallHeadsMixedFormats:AttentionRows.BadCalls*'; fi
"$OUT/test_attention_rows_emulated" "$@"
