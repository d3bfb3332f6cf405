#!/usr/bin/env bash
# Halide's profiler on the covariance update: where a d x d update from n rows spends its time
# (tile-pair products, write-back, strip). Builds the generator's CPU variant with `-profile`
# into a scratch directory and runs a driver that repeats the in-place update; the report is
# printed when the driver exits. Usage: profile_covariance.sh [D [N [REPS [TILE]]]] (needs ./build);
# TILE is the generator's tile width, 32 (default) or 48 (the wide variant the dispatch uses from
# 480 columns of X).
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
gen="$root/build/generators/hkfac_gen_covariance"
[[ -x "$gen" ]] || { echo "profile_covariance: $gen missing; run scripts/build first" >&2; exit 1; }
# The kernels' own target, as cmake/HkfacHostTarget.cmake chose it.
target_file="$root/build/hkfac_host_target.txt"
if [[ ! -f "$target_file" ]]; then
  echo "profile_covariance: $target_file missing; rerun scripts/build" >&2
  exit 1
fi
target=$(<"$target_file")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$gen" -g hkfac_covariance_update -o "$work" -f cov -e static_library,h "target=$target-profile" \
  "tile=${4:-32}"
g++ -O2 -std=c++17 -I/usr/include/halide14 -I"$work" \
  "$root/apps/bench/kernels/profile_covariance_driver.cpp" "$work/cov.a" -o "$work/driver" \
  -lpthread -ldl
"$work/driver" "${1:-1001}" "${2:-128}" "${3:-300}"
