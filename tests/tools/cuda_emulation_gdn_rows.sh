#!/bin/bash
# The gated DeltaNet decode step's rows forms (ops/delta_rule/gdn_decode_cuda.cu: gdn_decode_prepare_rows,
# gdn_decode_recurrent_rows) on the host under tools/cuda_emulation, against single calls bit for bit and the
# single call against the CPU reference chain (driver: tests/tools/cuda_emulation_gdn_rows.cpp). It checks
# the rows' indexing before a GPU runs tests/cuda/test_gdn_decode_rows_cuda.cpp, and does not replace it.
# Two things the emulation lacks are bridged here, for this kernel file only:
#   - its L2 prefetches (inline PTX) are dropped: a prefetch is a hint, the loads after it are what count;
#   - thread-block clusters: a stand-in <cooperative_groups.h> serves clusters of ONE block (rank 0 of 1, the
#     cluster barrier the block's), which the recurrent kernel uses for value_dim <= 32. Larger value heads
#     take clusters of several blocks, which the emulation refuses: those shapes run the prepare kernel only.
#
# usage: tests/tools/cuda_emulation_gdn_rows.sh
# The same driver then runs a copy of the kernel file whose launches hold 2 rows (kMaxGridRows lowered), so
# that the split of many rows over several launches (first_row) is checked too.
#
#   KERNEL_SOURCE=FILE in the environment builds FILE in place of src/ops/delta_rule/gdn_decode_cuda.cu (a
#   copy with a planted bug, to see the driver catch it). Exit status 0 when every case agrees.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d /tmp/deltabit_emu_gdn_rows.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

mkdir -p "$OUT/kernel" "$OUT/split" "$OUT/include"
sed 's/asm volatile("prefetch\.global\.L2 \[%0\];" ::"l"(\([^;]*\)));/(void)(\1);/' \
    "${KERNEL_SOURCE:-$ROOT/src/ops/delta_rule/gdn_decode_cuda.cu}" > "$OUT/kernel/gdn_decode_cuda.cu"
if grep -q 'asm' "$OUT/kernel/gdn_decode_cuda.cu"; then
    echo "cuda_emulation_gdn_rows.sh: inline PTX other than an L2 prefetch in the kernel file" >&2
    exit 2
fi
# And a copy whose launches hold 2 rows, so that 5 rows take three launches of each kernel.
sed 's/^constexpr int64_t kMaxGridRows = .*;$/constexpr int64_t kMaxGridRows = 2;/' "$OUT/kernel/gdn_decode_cuda.cu" \
    > "$OUT/split/gdn_decode_cuda.cu"
if ! grep -q '^constexpr int64_t kMaxGridRows = 2;$' "$OUT/split/gdn_decode_cuda.cu"; then
    echo "cuda_emulation_gdn_rows.sh: no kMaxGridRows to lower in the kernel file" >&2
    exit 2
fi
python3 "$ROOT/tools/cuda_emulation/transform.py" "$OUT/kernel/gdn_decode_cuda.cu" "$OUT" --src "$ROOT/src" > /dev/null
python3 "$ROOT/tools/cuda_emulation/transform.py" "$OUT/split/gdn_decode_cuda.cu" "$OUT/split" --src "$ROOT/src" \
    > /dev/null

cat > "$OUT/include/cooperative_groups.h" <<'HEADER'
// Stand-in for a thread-block cluster of one block (cuda_emulation_gdn_rows.sh).
#pragma once
#include <cuda_runtime.h>
namespace cooperative_groups {
struct cluster_group {
    unsigned num_blocks() const { return 1; }
    unsigned block_rank() const { return 0; }
    void sync() const { __syncthreads(); }
    void barrier_arrive() const {}
    void barrier_wait() const { __syncthreads(); }
    template <typename T>
    T* map_shared_rank(T* p, int rank) const {
        if (rank != 0) emu::fail("map_shared_rank past a one-block cluster");
        return p;
    }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
HEADER

REFERENCES=()
for r in conv1d delta_rule gated_rms_norm gdn_gates l2_norm; do
    REFERENCES+=("$ROOT/src/ops/reference/${r}_cpu.cpp")
done
for build in "$OUT" "$OUT/split"; do
    g++ -std=c++20 -O1 -pthread -Wno-unknown-pragmas -DFMT_HEADER_ONLY -I"$OUT/include" \
        -I"$ROOT/tools/cuda_emulation/include" -I"$ROOT/src" "$ROOT/tests/tools/cuda_emulation_gdn_rows.cpp" \
        "$build/gdn_decode_cuda.cpp" "${REFERENCES[@]}" -o "$build/run"
done
"$OUT/run"
echo "-- launches of 2 rows:"
"$OUT/split/run" --split
