#!/bin/sh
# apps/tools/generate_data.py on a busy host: with two CPU burners beside it, a benchmark must not
# become a sample (its timing would be slowed by the burners, unevenly): the schedule is built,
# left untimed with exit status 3 and a message that says so, and the same command run again once
# the host may be used (--max-foreign-load inf, since ctest runs other tests beside this one)
# times it into a complete sample whose bench.txt records the load beside it and the allocator it
# ran under (that run keeps freed memory) and its search.txt the rollout search the first run asked
# for. Bad thresholds are refused by name, and so is a second
# driver of the same shard on the same directory.
# Usage: generate_data_busy_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
command -v c++ >/dev/null || { echo "no C++ compiler to link benchmarks"; exit 77; }
test -r /proc/stat || { echo "no /proc/stat: the host load cannot be measured here"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
gen() {
  python3 "$src/apps/tools/generate_data.py" --out "$work/out" --scheduler Hkfac \
    --plugin "$build/autoscheduler_plugin/libautoschedule_hkfac.so" \
    --random-generator "$build/apps/random_pipeline/hkfac_random_pipeline" \
    --random 2:1 --stages 3:3 --schedules 1 --randomize-weights --full-beam 0 --threads 1 \
    --jobs 1 --bench-min-time 0.2 "$@"
}
burners=""
for i in 1 2; do
  python3 -c 'while True: pass' &
  burners="$burners $!"
done
trap 'kill $burners 2>/dev/null || true' EXIT
rc=0
gen --max-foreign-load 0.5 --busy-retries 1 --busy-wait 0 --rollout > "$work/busy.txt" 2>&1 || rc=$?
kill $burners 2>/dev/null || true
trap - EXIT
test "$rc" -eq 3 || { echo "exit $rc on a busy host, expected 3"; cat "$work/busy.txt"; exit 1; }
grep -q "not timed, the host was busy beside it" "$work/busy.txt" || { cat "$work/busy.txt"; exit 1; }
grep -q "not timed on a busy host (run again): 1" "$work/busy.txt" || { cat "$work/busy.txt"; exit 1; }
test "$(find "$work/out" -name '*.sample' | wc -l)" -eq 0 || { echo "a busy timing became a sample"; exit 1; }
test "$(find "$work/out" -name bench -type f | wc -l)" -eq 1 || { echo "the build was not kept"; exit 1; }
test "$(find "$work/out" -name FAILED | wc -l)" -eq 0 || { echo "a busy host marked FAILED"; exit 1; }
gen --max-foreign-load inf --retain-freed-memory > "$work/again.txt" 2>&1 ||
  { cat "$work/again.txt"; exit 1; }
sample=$(find "$work/out" -name '*.sample')
test -n "$sample" || { echo "the second run made no sample"; cat "$work/again.txt"; exit 1; }
test "$(stat -c %s "$sample")" -eq $(( $(stat -c %s "${sample%.sample}.featurization") + 12 )) ||
  { echo "$sample incomplete"; exit 1; }
grep -Eq "^host load beside the benchmark: [0-9]+\.[0-9]{2} cores" "$(dirname "$sample")/bench.txt" ||
  { cat "$(dirname "$sample")/bench.txt"; exit 1; }
# The search says which plugin build made it, by content.
grep -q "^plugin_sha256=$(sha256sum "$build/autoscheduler_plugin/libautoschedule_hkfac.so" | cut -d' ' -f1)\$" \
  "$(dirname "$sample")/search.txt" || { cat "$(dirname "$sample")/search.txt"; exit 1; }
# The search that built it (the first run) ended with the rollout search, and says so.
grep -q "^HL_SEED=[0-9]* HL_BEAM_SIZE=1 HL_RANDOM_DROPOUT=[0-9]* HKFAC_ROLLOUT=1\$" \
  "$(dirname "$sample")/search.txt" || { cat "$(dirname "$sample")/search.txt"; exit 1; }
# The timing says which allocator it had (the second run kept freed memory).
grep -q "^allocator: freed memory kept (MALLOC_MMAP_THRESHOLD_=268435456, MALLOC_TRIM_THRESHOLD_=536870912)" \
  "$(dirname "$sample")/bench.txt" || { cat "$(dirname "$sample")/bench.txt"; exit 1; }
for bad in "--max-foreign-load -1" "--max-foreign-load nan" "--busy-retries -1"; do
  # shellcheck disable=SC2086 # the flag and its value are two words
  if gen $bad > "$work/bad.txt" 2>&1; then echo "$bad was accepted"; exit 1; fi
  grep -q -- "${bad%% *}" "$work/bad.txt" || { cat "$work/bad.txt"; exit 1; }
done
# A second driver of the same shard on the same directory is refused before it builds anything.
python3 -c 'import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)' "$work/out/.generate_data.shard0of1.lock" > "$work/holder.txt" &
holder=$!
trap 'kill $holder 2>/dev/null || true' EXIT
for _ in $(seq 50); do grep -q held "$work/holder.txt" && break; sleep 0.1; done
rm -rf "$work/out/random_pipeline_g3_seed2_stages3"
if gen --max-foreign-load inf > "$work/twice.txt" 2>&1; then
  echo "a second run of one shard on one directory was accepted"; exit 1
fi
grep -q "another run is writing shard 0/1 of $work/out" "$work/twice.txt" || { cat "$work/twice.txt"; exit 1; }
test ! -e "$work/out/random_pipeline_g3_seed2_stages3" || { echo "the refused run built something"; exit 1; }
kill $holder 2>/dev/null || true
trap - EXIT
echo "generate_data_busy: ok"
