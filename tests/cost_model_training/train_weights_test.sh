#!/bin/sh
# apps/tools/train_weights.py end to end on three random pipelines of the shipped sample archive,
# one of them held out as if it were an app: the baseline and the hold-out file must be written,
# load in `predict`, and be recorded with the held-out pipeline's ordering accuracy; an unknown
# app must be an error that names it.
# Usage: train_weights_test.sh SOURCE_DIR BUILD_DIR PREDICT WORK_DIR
set -eu
src=$1 build=$2 predict=$3 work=$4
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
archive="$src/weights/samples/adams2019_cpu_v2.tar.xz" # holds random_pipeline_seed<N>_*
rm -rf "$work"
mkdir -p "$work/samples" "$work/out"
tar -xJf "$archive" -C "$work/samples" --wildcards './random_pipeline_seed[012]_*'
held=$(ls "$work/samples" | grep seed1_)
python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
  --out "$work/out" --log-dir "$work/log" --epochs 2 --apps "$held"
for f in baseline "$held"; do
  test -s "$work/out/$f.weights" || { echo "no $f.weights"; exit 1; }
  grep -q "^| \`$f.weights\` |" "$work/log/records.md" || { echo "no record of $f"; exit 1; }
done
# The hold-out row names the held-out pipeline and reports an accuracy over some pairs.
grep -E "^\| \`$held.weights\` \| [0-9]+ samples \| $held \| 2 \| [0-9]+ \| [01]\.[0-9]{3} \([1-9][0-9]*\)" \
  "$work/log/records.md" >/dev/null || { echo "bad hold-out record:"; cat "$work/log/records.md"; exit 1; }
find "$work/samples" -name '*.sample' > "$work/list.txt"
"$predict" --weights="$work/out/$held.weights" --samples="$work/list.txt" \
  --predictions_file="$work/pred.csv"
test "$(wc -l < "$work/pred.csv")" -gt 10 || { echo "too few predictions"; exit 1; }
if python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
     --out "$work/out" --log-dir "$work/log" --epochs 1 --apps no_such_app 2> "$work/err.txt"; then
  echo "an unknown app was accepted"; exit 1
fi
grep -q "no samples for app 'no_such_app'" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
echo "train_weights: ok"
