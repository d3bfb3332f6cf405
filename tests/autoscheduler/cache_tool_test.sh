#!/usr/bin/env bash
# hkfac_cache against a cache the plugin filled: a generator run with measured selection records
# the pipeline and its candidates' timings; `show` lists them, `export` writes .sample files that
# predict (an independent reader) accepts with the measured times, a rerun applies the cached
# schedule, and `clear` empties it so the next run measures again.
# Usage: cache_tool_test.sh GENERATOR PLUGIN HKFAC_CACHE PREDICT WEIGHTS WORK_DIR
set -euo pipefail
gen=$1 plugin=$2 tool=$3 predict=$4 weights=$5 work=$6
rm -rf "$work" && mkdir -p "$work/out"
export HKFAC_CACHE_DIR="$work/cache" HKFAC_TUNE_SECONDS=20 HL_BEAM_SIZE=2
run() {
  "$gen" -g unsharp -o "$work/out" -e static_library,h -p "$plugin" -s Hkfac \
    target=x86-64-linux-avx-avx2-f16c-fma-sse41 auto_schedule=true \
    machine_params=2,16777216,40 width=192 height=128 2>&1
}
fail() { echo "FAIL: $*"; exit 1; }

"$tool" show | grep -q ": 0 pipelines, 0 samples" || fail "a new cache is not empty"
# Timings taken beside other work are not kept as samples: a busy moment costs another try.
for attempt in 1 2 3; do
  first=$(run)
  echo "$first" | grep -q "candidates in" || fail "the first run measured nothing: $first"
  shown=$("$tool" show)
  echo "$shown"
  echo "$shown" | grep -q ": 1 pipelines," || fail "show does not list the pipeline"
  samples=$(echo "$shown" | sed -n 's/.*pipelines, \([0-9]*\) samples.*/\1/p')
  [[ $samples -ge 1 ]] && break
  echo "attempt $attempt: no quiet timing (the host was busy); clearing and measuring again"
  "$tool" clear > /dev/null
  sleep 5
done
[[ $samples -ge 1 ]] || fail "no samples recorded in three tries"

"$tool" export "$work/samples" | grep -q "wrote $samples samples of 1 pipelines" ||
  fail "export did not write the $samples samples"
"$predict" --weights="$weights" --samples="$work/samples/samples.txt" \
  --predictions_file="$work/predictions.csv" > "$work/predict.log" 2>&1 ||
  fail "predict refused the exported samples: $(cat "$work/predict.log")"
[[ $(wc -l < "$work/predictions.csv") -ge $samples ]] || fail "predict read too few samples"
# The measured times travel with the samples: every one positive and finite.
awk -F, 'NR > 1 || $3 ~ /^[0-9.e+-]+$/ { if (!($3 > 0)) bad = 1 } END { exit bad }' \
  "$work/predictions.csv" || fail "an exported sample lost its time"

again=$(run)
echo "$again" | grep -q "measured fastest on this machine" || fail "the rerun did not use it: $again"

"$tool" clear | grep -q "cleared .*: 1 pipelines, $samples samples" || fail "clear"
"$tool" show | grep -q ": 0 pipelines, 0 samples" || fail "clear left something"
third=$(run)
echo "$third" | grep -q "candidates in" || fail "after clear the run did not measure: $third"
echo "PASS"
