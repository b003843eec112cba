#!/usr/bin/env bash
# One GPU-machine pass of the CUDA op work: build test_cuda and test_ops, run both, time the ops
# (perf mode), then compute-sanitizer memcheck over the parity tests and racecheck over the kernels
# that use shared memory, both on the reduced shape set.
# Logs go to $OUT (the device tool's output folder) or /tmp/op-parity; the last lines printed are a
# summary. Usage, from the repository root:  bash tests/cuda/op_parity_gpu.sh [memcheck-seconds]
set -uo pipefail
out=${OUT:-/tmp/op-parity}
mkdir -p "$out"
memcheck_s=${1:-150}
build=build-gpu

cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTABIT_CUDA=ON >"$out/configure.log" 2>&1 ||
    { tail -20 "$out/configure.log"; exit 1; }
start=$(date +%s)
cmake --build $build --target test_cuda test_ops -j"$(nproc)" >"$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

start=$(date +%s)
./$build/test_cuda >"$out/test_cuda.log" 2>&1; cuda_rc=$?
echo "test_cuda rc=$cuda_rc ($(( $(date +%s) - start )) s)"
./$build/test_ops >"$out/test_ops.log" 2>&1; ops_rc=$?
echo "test_ops rc=$ops_rc"

DELTABIT_OPS_PERF=1 ./$build/test_cuda --gtest_filter='OpPerf*' >"$out/perf.log" 2>&1
echo "perf rc=$?"

start=$(date +%s)
DELTABIT_OPS_QUICK=1 timeout "$memcheck_s" compute-sanitizer --tool memcheck --leak-check no \
    ./$build/test_cuda --gtest_filter='OpParity*:BackendCuda*' >"$out/memcheck.log" 2>&1
echo "memcheck rc=$? ($(( $(date +%s) - start )) s; 124 = cut at ${memcheck_s} s)"

# Shared-memory races: the kernels that stage data in shared memory (delta rule, attention and attention
# over spans, rope and proportional rope, the soft embedding, the block-per-row norms).
start=$(date +%s)
DELTABIT_OPS_QUICK=1 timeout "$memcheck_s" compute-sanitizer --tool racecheck \
    ./$build/test_cuda --gtest_filter='OpParityDeltaRule*:OpParityAttention*:OpParityElementwise.Rope*:OpParityNorms*:OpParityDiffusion.Rope*:OpParityDiffusion.SoftEmbedding*' \
    >"$out/racecheck.log" 2>&1
echo "racecheck rc=$? ($(( $(date +%s) - start )) s)"

echo "== failures =="
grep -E "FAILED|Failure|error" "$out/test_cuda.log" "$out/test_ops.log" | head -30
echo "== parity ratios (worst first) =="
grep -h "^\[parity\]" "$out/test_cuda.log" | sort -t' ' -k2,2 | awk '{print}' >"$out/parity_lines.txt"
grep -h "ratio" "$out/test_cuda.log" | awk '{r=$NF; op=$2; if (!(op in m) || r+0 > m[op]+0) {m[op]=r; l[op]=$0}} END {for (o in l) print l[o]}' | sort
grep -h "ulp (allowed" "$out/test_cuda.log" | awk '{op=$2; n=$(NF-3); if (!(op in m) || n+0 > m[op]+0) {m[op]=n; l[op]=$0}} END {for (o in l) print l[o]}' | sort
echo "== memcheck =="
grep -E "ERROR SUMMARY|PASSED|FAILED|Invalid" "$out/memcheck.log" | head -10
echo "== racecheck =="
grep -E "RACECHECK SUMMARY|ERROR SUMMARY|PASSED|FAILED|Race|hazard" "$out/racecheck.log" | head -10
echo "== perf =="
grep "^\[perf\]" "$out/perf.log"
tail -3 "$out/test_cuda.log"
