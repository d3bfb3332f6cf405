#!/bin/sh
# apps/tools/retime_samples.py on archived app schedules of round 9: hist's; bgu's, printed before
# every Func had a name of its own (two `Func repeat_edge`), replayed with the later one renamed;
# and a copy of hist's whose header no longer compiles. The first two are timed again: each new
# .sample holds the archived featurization and ids bit for bit and a new positive runtime, and
# bgu's says it was renamed. The broken one is FAILED with the compiler's message and the run
# exits 1 for it. The same command again skips all three.
# Usage: retime_samples_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
command -v c++ >/dev/null || { echo "no C++ compiler for the Replay plugin"; exit 77; }
rm -rf "$work"
mkdir -p "$work/in"
tar -xJf "$src/weights/samples/hkfac_cpu_v2_round9_retained.tar.xz" -C "$work/in" \
  bgu/bgu_s72 hist/hist_s72
# hist_s99: hist_s72 under another name, with a statement that is not C++.
mkdir "$work/in/hist/hist_s99"
for f in "$work/in/hist/hist_s72/"*; do
  b=$(basename "$f" | sed 's/hist_s72/hist_s99/')
  sed 's/hist_s72/hist_s99/g' "$f" > "$work/in/hist/hist_s99/$b"
done
sed -i 's/^\(.*\.compute_root();\)$/\1 not_cxx;/' "$work/in/hist/hist_s99/hist_s99.schedule.h"
retime() {
  python3 "$src/apps/tools/retime_samples.py" --samples "$work/in" --out "$work/out" \
    --build "$build" --retain-freed-memory --jobs 2 --threads 2 --bench-min-time 0.01 \
    --max-foreign-load inf
}
rc=0
retime > "$work/first.txt" 2>&1 || rc=$?
test "$rc" -eq 1 || { echo "exit $rc, expected 1 (one header fails)"; cat "$work/first.txt"; exit 1; }
grep -q "2 retimed, 0 skipped (done or failed before), 1 failed" "$work/first.txt" ||
  { cat "$work/first.txt"; exit 1; }
grep -q "hist_s99.schedule.h.*not_cxx" "$work/out/hist/hist_s99/FAILED" ||
  { cat "$work/out/hist/hist_s99/FAILED"; exit 1; }
grep -q "named apart" "$work/out/bgu/bgu_s72/retimed_from.txt" || { echo "bgu not renamed"; exit 1; }
for s in bgu/bgu_s72 hist/hist_s72; do
  n=$(basename "$s")
  python3 - "$work/in/$s/$n.sample" "$work/out/$s/$n.sample" <<'PY'
import math, struct, sys
old, new = (open(p, "rb").read() for p in sys.argv[1:3])
assert len(old) == len(new) and old[:-12] == new[:-12], "features differ"
assert old[-8:] == new[-8:], "pipeline or schedule id differs"
ms = struct.unpack("<f", new[-12:-8])[0]
assert math.isfinite(ms) and ms > 0, ms
print(sys.argv[2], "retimed:", struct.unpack("<f", old[-12:-8])[0], "->", ms, "ms")
PY
  grep -q "^allocator: freed memory kept" "$work/out/$s/bench.txt" || { cat "$work/out/$s/bench.txt"; exit 1; }
done
retime > "$work/again.txt" 2>&1 || rc=$?
grep -q "0 retimed, 3 skipped" "$work/again.txt" || { cat "$work/again.txt"; exit 1; }
echo "retime_samples: ok"
