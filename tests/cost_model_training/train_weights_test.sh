#!/bin/sh
# apps/tools/train_weights.py end to end on three random pipelines of the shipped sample archive,
# one of them held out as if it were an app: the baseline and the hold-out file must be written,
# load in `predict`, and be recorded with the held-out pipeline's ordering accuracy; with three
# seeds each file must keep the start whose training loss is lower, and its weights must be that
# start's; --pipelines-split must add its file and record; --initial-weights must start every
# seed from the named file; --bag must keep a seeded fraction of the other pipelines and the
# whole app; an unknown app, a missing initial file and a bad fraction must be errors that name
# them.
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
  --out "$work/out" --log-dir "$work/log" --epochs 2 --apps "$held" --seed 2 --seeds 3 --jobs 2 \
  --pipelines-split
test -s "$work/log/pipelines_split.weights" || { echo "no pipelines_split.weights"; exit 1; }
for f in baseline "$held"; do
  test -s "$work/out/$f.weights" || { echo "no $f.weights"; exit 1; }
  grep -q "^| \`$f.weights\` |" "$work/log/records.md" || { echo "no record of $f"; exit 1; }
done
# The hold-out row names the held-out pipeline and reports an accuracy over some pairs and the
# top regret.
grep -E "^\| \`$held.weights\` \| [0-9]+ samples \| $held \| 2 \| [0-9]+ \| [234] \([^|]*\) \| [01]\.[0-9]{3} \([1-9][0-9]*\) \| [1-9][0-9]*\.[0-9]{3}x \|" \
  "$work/log/records.md" >/dev/null || { echo "bad hold-out record:"; cat "$work/log/records.md"; exit 1; }
# The kept seed is the one with the lower final training loss (the CSVs' last rows), and the
# shipped file is that seed's weights byte for byte.
for f in baseline "$held" pipelines_split; do
  kept=$(python3 - "$work/log" "$f" <<'PY'
import csv, sys
d, f = sys.argv[1:]
loss = {s: float(list(csv.DictReader(open(f"{d}/{f}.seed{s}.csv")))[-1]["train_loss"]) for s in (2, 3, 4)}
print(min(loss, key=loss.get))
PY
)
  grep -q "^| \`$f.weights\` |[^|]*|[^|]*|[^|]*|[^|]*| $kept (2: " "$work/log/records.md" ||
    { echo "$f: the record does not keep seed $kept"; cat "$work/log/records.md"; exit 1; }
  out="$work/out"; [ "$f" != pipelines_split ] || out="$work/log"
  cmp -s "$out/$f.weights" "$work/log/$f.seed$kept.weights" ||
    { echo "$f.weights is not seed $kept's"; exit 1; }
done
# --initial-weights: every start is the named file, whatever its seed (random starts differ at
# epoch 0; starts from one file do not), and a missing file is named.
cp "$work/log/pipelines_split.weights" "$work/out/"
python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
  --out "$work/warm" --log-dir "$work/warmlog" --epochs 1 --apps "$held" --seed 2 --seeds 2 \
  --jobs 2 --pipelines-split --initial-weights "$work/out"
python3 - "$work/log" "$work/warmlog" "$held" <<'PY' || exit 1
import csv, sys
cold, warm, held = sys.argv[1:]
def first(d, f, s):
    return float(list(csv.DictReader(open(f"{d}/{f}.seed{s}.csv")))[0]["train_loss"])
for f in ("baseline", held, "pipelines_split"):
    c, w = (first(cold, f, 2), first(cold, f, 3)), (first(warm, f, 2), first(warm, f, 3))
    assert c[0] != c[1], f"{f}: two random starts began at one loss {c}"
    assert w[0] == w[1], f"{f}: two starts from one file began at different losses {w}"
PY
grep -q -- "--initial-weights $work/out" "$work/warmlog/records.md" || { echo "no start in record"; exit 1; }
rm "$work/out/pipelines_split.weights"
if python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
     --out "$work/warm" --log-dir "$work/warmlog" --epochs 1 --apps "$held" --pipelines-split \
     --initial-weights "$work/out" 2> "$work/err.txt"; then
  echo "a missing initial file was accepted"; exit 1
fi
grep -q "has no pipelines_split.weights" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
find "$work/samples" -name '*.sample' > "$work/list.txt"
"$predict" --weights="$work/out/$held.weights" --samples="$work/list.txt" \
  --predictions_file="$work/pred.csv"
test "$(wc -l < "$work/pred.csv")" -gt 10 || { echo "too few predictions"; exit 1; }
if python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
     --out "$work/out" --log-dir "$work/log" --epochs 1 --apps no_such_app 2> "$work/err.txt"; then
  echo "an unknown app was accepted"; exit 1
fi
grep -q "no samples for app 'no_such_app'" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
# --bag: a seeded fraction of the pipelines that are not apps, every sample of the app kept, the
# bag in the record; a fraction outside (0, 1] is named.
python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
  --out "$work/bag" --log-dir "$work/baglog" --epochs 1 --apps "$held" --seed 5 --bag 0.5
python3 - "$work/samples" "$work/baglog" "$held" <<'PY' || exit 1
import os, sys
root, log, held = sys.argv[1:]
every = {p: sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, p))
                   for f in fs if f.endswith(".sample")) for p in os.listdir(root)}
listed = [l for l in open(os.path.join(log, "samples.txt")).read().split() if l]
by = {p: [s for s in listed if os.path.relpath(s, os.path.abspath(root)).split(os.sep)[0] == p]
      for p in every}
assert sorted(os.path.abspath(s) for s in every[held]) == sorted(by[held]), "the app lost samples"
kept = [p for p in every if p != held and by[p]]
assert len(kept) == 1, f"a bag of 0.5 of two pipelines kept {kept}"
assert sorted(os.path.abspath(s) for s in every[kept[0]]) == sorted(by[kept[0]]), "a part of a pipeline"
PY
grep -q -- "--bag 0.5" "$work/baglog/records.md" || { echo "no bag in the record"; exit 1; }
if python3 "$src/apps/tools/train_weights.py" --samples "$work/samples" --build "$build" \
     --out "$work/bag" --epochs 1 --bag 0 2> "$work/err.txt"; then
  echo "--bag 0 was accepted"; exit 1
fi
grep -q -- "--bag must be in (0, 1], got 0" "$work/err.txt" || { cat "$work/err.txt"; exit 1; }
echo "train_weights: ok"
