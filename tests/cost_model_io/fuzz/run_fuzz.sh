#!/bin/sh
# Builds one libFuzzer target with clang (ASan + UBSan) and runs it for a bounded time; any
# crash, leak, sanitizer report, OOM or slow input fails. Exits 77 (ctest: skipped) without a
# clang that has libFuzzer.
# Usage: run_fuzz.sh CLANGXX TARGET.cpp OUT_DIR INCLUDE_DIRS(colon-separated) SOURCES...
# Environment: HKFAC_FUZZ_SECONDS (default 20), HKFAC_FUZZ_JOBS (parallel jobs, default 1).
set -eu
cxx=$1 target=$2 out=$3 includes=$4
shift 4
name=$(basename "$target" .cpp)
if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "$name: skipped: $cxx not found"
  exit 77
fi
mkdir -p "$out"
probe="$out/$name.probe.cpp"
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t *, size_t) { return 0; }\n' >"$probe"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$out/$name.probe" >/dev/null 2>&1; then
  echo "$name: skipped: $cxx cannot link -fsanitize=fuzzer (libclang_rt.fuzzer missing?)"
  exit 77
fi
flags="" local_dirs=""
old_ifs=$IFS
IFS=:
for dir in $includes; do
  flags="$flags -I$dir"
  case "$dir" in /usr/*) ;; *) local_dirs="$local_dirs $dir" ;; esac
done
IFS=$old_ifs
# Rebuild only when the target, the reader sources or a project header is newer than the binary.
# shellcheck disable=SC2086
if [ ! -x "$out/$name" ] || [ -n "$(find "$target" "$@" $local_dirs -type f -newer "$out/$name" | head -n 1)" ]; then
  # -fno-sanitize-recover makes every UBSan report fatal.
  # shellcheck disable=SC2086
  "$cxx" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    $flags "$target" "$@" -o "$out/$name" -lpthread
fi
seeds="$out/$name.seeds" corpus="$out/$name.corpus"
mkdir -p "$seeds" "$corpus"
HKFAC_FUZZ_WRITE_SEEDS="$seeds" "$out/$name"
# Parallel jobs log to fuzz-<n>.log in the current directory, so run from the output directory.
jobs=""
if [ "${HKFAC_FUZZ_JOBS:-1}" -gt 1 ]; then jobs="-jobs=$HKFAC_FUZZ_JOBS -workers=$HKFAC_FUZZ_JOBS"; fi
cd "$out"
# shellcheck disable=SC2086
exec "./$name" "$corpus" "$seeds" -max_total_time="${HKFAC_FUZZ_SECONDS:-20}" \
  -rss_limit_mb=512 -malloc_limit_mb=64 -timeout=10 -print_final_stats=1 $jobs \
  -artifact_prefix="$out/$name-"
