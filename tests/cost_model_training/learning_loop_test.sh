#!/bin/sh
# apps/tools/learning_loop.py end to end at a toy size: two rounds over three new small random
# pipelines and one schedule of unsharp each. Round 0 must search with random models, round 1
# with round 0's weights (a plugin that could not load them would make no sample; unsharp by its
# hold-out file, every search ending with the rollout search) and train from them
# (--warm-start), each round must add samples and write its weights and records, and running the
# same command again must change nothing (resume).
# Usage: learning_loop_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
command -v c++ >/dev/null || { echo "no C++ compiler to link benchmarks"; exit 77; }
rm -rf "$work"
loop() {
  rounds=$1
  shift
  python3 "$src/apps/tools/learning_loop.py" --work "$work" --build "$build" --rounds "$rounds" \
    --random-per-round 3 --stages 3:4 --schedules 2 --apps unsharp --app-schedules 1 --epochs 2 --jobs 2 \
    --train-seeds 2 --max-foreign-load inf "$@"
}
field() { # field ROUND KEY: a value of loop.json
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['rounds'][int(sys.argv[2])][sys.argv[3]])" \
    "$work/loop.json" "$1" "$2"
}
loop 1
test "$(field 0 search_weights)" = random || { echo "round 0 did not use random models"; exit 1; }
test "$(field 0 new_samples)" -gt 0 || { echo "round 0 made no sample"; exit 1; }
test -s "$work/round0/baseline.weights" || { echo "no round 0 weights"; exit 1; }
# Round 0's one unsharp schedule leaves its hold-out file no pick to judge: no top regret.
test "$(field 0 heldout_app_top_regret)" = None || { echo "round 0 app top regret $(field 0 heldout_app_top_regret)"; exit 1; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
searched() { # searched SAMPLE_DIR WEIGHTS: the sample's search.txt names these weights, with the rollout search
  grep -q "weights_sha256=$(sha "$2")" "$1/search.txt" && grep -q "HKFAC_ROLLOUT=1" "$1/search.txt" ||
    { echo "$1 was not searched by $2 with the rollout search:"; cat "$1/search.txt"; exit 1; }
}
! grep -rq "HKFAC_ROLLOUT" "$work/samples" || { echo "round 0 searched with the rollout search"; exit 1; }
test -s "$work/round0/unsharp.weights" || { echo "no round 0 hold-out file for unsharp"; exit 1; }
round1="--warm-start 0.02 --app-weights holdout --rollout"
loop 2 $round1
searched "$work/samples/unsharp/unsharp_s1" "$work/round0/unsharp.weights"
first=$(field 1 random_seeds | cut -d: -f1)
searched "$(ls -d "$work"/samples/random_pipeline_*seed"$first"_*/*/ | head -1)" "$work/round0/baseline.weights"
test "$(field 1 app_weights)" = holdout || { echo "round 1 app weights: $(field 1 app_weights)"; exit 1; }
# Top regret, where a held-out set has one: a pick can be no faster than the fastest.
for key in heldout_app_top_regret heldout_pipelines_top_regret; do
  v=$(field 1 $key)
  test "$v" = None || python3 -c "import sys; sys.exit(float(sys.argv[1]) < 1.0)" "$v" ||
    { echo "$key $v below 1"; exit 1; }
done
grep -q "held-out pipelines top regret" "$work/loop.md" || { cat "$work/loop.md"; exit 1; }
test "$(field 1 search_weights)" = "$work/round0/baseline.weights" ||
  { echo "round 1 searched with $(field 1 search_weights)"; exit 1; }
test "$(field 1 new_samples)" -gt 0 || { echo "round 1 made no sample"; cat "$work/round1/steps.log"; exit 1; }
test "$(field 1 samples)" -gt "$(field 0 samples)" || { echo "samples did not grow"; exit 1; }
test -s "$work/round1/baseline.weights" || { echo "no round 1 weights"; exit 1; }
test "$(grep -c '^| [01] |' "$work/loop.md")" = 2 || { cat "$work/loop.md"; exit 1; }
# Warm start: round 1 trained from round 0's files (the split's too) at the given rate.
test "$work/round1/start/baseline.weights" -ef "$work/round0/baseline.weights" ||
  { echo "round 1 did not start from round 0's baseline"; exit 1; }
test "$work/round1/start/pipelines_split.weights" -ef "$work/round0/training/pipelines_split.weights" ||
  { echo "round 1 did not start from round 0's pipelines_split"; exit 1; }
grep -q -- "--initial-weights $work/round1/start -- .*--kfac_rate=0.02\`" \
  "$work/round1/training/records.md" || { cat "$work/round1/training/records.md"; exit 1; }
before=$(find "$work/samples" -name '*.sample' | wc -l)
cp "$work/loop.json" "$work/loop.before"
loop 2 $round1
test "$(find "$work/samples" -name '*.sample' | wc -l)" = "$before" || { echo "resume made samples"; exit 1; }
cmp -s "$work/loop.json" "$work/loop.before" || { echo "resume changed loop.json"; exit 1; }
# --app-weights holdout where the previous round has no hold-out file of an app (round 0 made
# no app sample): a clear error before any search.
work=$work.nofile
rm -rf "$work"
loop 1 --app-schedules 0
before=$(find "$work/samples" -name '*.sample' | wc -l)
if loop 2 --app-weights holdout > "$work.log" 2>&1; then echo "a missing hold-out file was accepted"; exit 1; fi
grep -q "round0/unsharp.weights is missing" "$work.log" || { cat "$work.log"; exit 1; }
test "$(find "$work/samples" -name '*.sample' | wc -l)" = "$before" || { echo "searched before the error"; exit 1; }
echo "learning_loop: ok"
