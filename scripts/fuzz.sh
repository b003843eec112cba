#!/usr/bin/env bash
# Builds every fuzz/fuzz_<name>.cpp as a libFuzzer target (clang, ASan + UBSan) over the file-format
# code, and runs each for SECONDS starting from its seed corpus fuzz/corpus/<name>/. A crash, leak or
# sanitizer report fails the run and leaves the crashing input in build-fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out"
shopt -s nullglob
targets=(fuzz/fuzz_*.cpp)
if [ ${#targets[@]} -eq 0 ]; then echo "fuzz: no targets"; exit 0; fi

lib_sources=(src/core/*.cpp src/formats/*.cpp)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc)
# Targets beyond the model file formats name their own sources and flags (xxhash is header-only here).
declare -A target_sources=(
  [snapshot]="src/runtime/snapshot.cpp src/models/sequence_state.cpp src/models/kv_cache.cpp src/core/file_io.cpp
              src/models/config_summary.cpp"
  [server_request]="src/server/request_parse.cpp src/server/reply_parse.cpp src/sampling/sampling_params.cpp src/runtime/diffusion_settings.cpp"
)
declare -A target_flags=([snapshot]="-DDELTABIT_HAVE_XXHASH=1")
for target in "${targets[@]}"; do
  name=$(basename "$target" .cpp); name=${name#fuzz_}
  binary="$out/fuzz_$name"
  sources=("${lib_sources[@]}")
  [ -n "${target_sources[$name]:-}" ] && sources=(${target_sources[$name]})
  if [ ! -x "$binary" ] || [ -n "$(find "$target" "${sources[@]}" src -newer "$binary" -name '*.[ch]*' -print -quit)" ]; then
    echo "fuzz: building $name"
    clang++ "${flags[@]}" ${target_flags[$name]:-} "$target" "${sources[@]}" -lfmt -o "$binary"
  fi
  work="$out/corpus-$name"
  mkdir -p "$work"
  [ -d "fuzz/corpus/$name" ] && cp -n fuzz/corpus/"$name"/* "$work"/ 2>/dev/null || true
  echo "fuzz: running $name for ${seconds}s"
  (cd "$out" && ASAN_OPTIONS=detect_leaks=1 "./fuzz_$name" -max_total_time="$seconds" -rss_limit_mb=2048 \
     -malloc_limit_mb=1024 -print_final_stats=1 "corpus-$name" 2>&1 | tail -n 12)
  echo "fuzz: $name ok"
done
