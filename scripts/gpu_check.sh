#!/usr/bin/env bash
# One GPU-machine pass over what a change to the CUDA paths must keep: build (Release, -j16), run
# test_cuda (all of it), test_models and test_runtime, then `deltabit bench` on the three Bonsai geometries
# at the figures the history compares (tg128 and pp512 at depth 0, KV f16). Each phase has its own time
# limit (together under 10 minutes on a 16-core H200 machine, the build from a cold cache included), so that a hang
# cannot eat the rest; a phase cut short prints rc=124.
# Logs go to $OUT (the device tool's output folder) or /tmp/gpu-check; the last lines printed are a
# summary (rc of each phase, failed tests, the bench figures).
# Usage, from the repository root:  bash scripts/gpu_check.sh
# The GPU machines lack libxxhash-dev: put a copy of xxhash.h in .carry/include/ and carry `.carry`
# (CMakeLists.txt says how); without it the snapshot tests skip.
set -uo pipefail
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
build=build-gpu
jobs=${JOBS:-16}

start=$(date +%s)
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DDELTABIT_CUDA=ON >"$out/configure.log" 2>&1 ||
    { tail -20 "$out/configure.log"; exit 1; }
timeout 240 cmake --build $build --target deltabit test_cuda test_models test_runtime -j"$jobs" \
    >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; tail -5 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader

run() {  # run NAME SECONDS COMMAND...: the command's output into $out/NAME.log, its rc and time printed
    local name=$1 limit=$2 t0
    shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" >"$out/$name.log" 2>&1
    echo "$name rc=$? ($(( $(date +%s) - t0 )) s; 124 = cut at $limit s)"
}
run test_cuda 150 ./$build/test_cuda
run test_models 30 ./$build/test_models
run test_runtime 30 ./$build/test_runtime
for g in bonsai-27b:55 bonsai-8b:40 bonsai-4b:40; do
    run "bench_${g%:*}" "${g#*:}" ./$build/deltabit bench --geometry "${g%:*}" --kv f16 --depths 0 --prompts 512 \
        --no-history --commit gpu-check
done

echo "== failures =="
grep -hE "^\[  FAILED  \]|Failure$" "$out"/test_*.log | sort -u | head -40
for t in test_cuda test_models test_runtime; do
    echo "$t: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|^\[  SKIPPED \] [0-9]+ test' "$out/$t.log" | tr '\n' ' ')"
done
echo "== bench (tg128 tok/s, pp512 tok/s; reference 27B 314.5 / 6591, 8B 753.9 / 21842, 4B 852.4 / 26796) =="
for g in bonsai-27b bonsai-8b bonsai-4b; do
    echo "-- $g"
    grep -E "tg128|pp512|decode path" "$out/bench_$g.log" | head -6
done
