#!/bin/sh
# The autoencoder and the classifier under `mpirun -np 2 ... --multi_device` print the losses of
# the same training in one process (to float rounding), once (rank 0 logs), and rank 0 writes
# the outputs. The classifier part needs the Fashion-MNIST files: without them the test ends
# with 77 (skipped, naming what did not run) after the autoencoder part, never with a pass.
# Usage: apps_test.sh AUTOENCODER CLASSIFIER WORK_DIR
set -eu
autoencoder=$1 classifier=$2 work=$3
command -v mpirun >/dev/null || { echo "mpirun missing (scripts/setup installs openmpi-bin)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export HL_NUM_THREADS=1
rm -rf "$work"
mkdir -p "$work"
# The "step N loss X" lines of two logs: the same steps, losses within 1e-4 relative.
same_losses() {
  grep '^step ' "$1" | awk '{print $2, $4}' > "$1.losses"
  grep '^step ' "$2" | awk '{print $2, $4}' > "$2.losses"
  test "$(wc -l < "$1.losses")" -eq "$3" || { echo "$1: expected $3 step lines"; cat "$1"; exit 1; }
  paste "$1.losses" "$2.losses" | awk '
    $1 != $3 { print "step " $1 " against " $3; bad = 1 }
    { d = $2 - $4; if (d < 0) d = -d; m = $2 < 0 ? -$2 : $2; if (m < 1) m = 1;
      if (d > 1e-4 * m) { print "step " $1 ": loss " $2 " alone, " $4 " on two ranks"; bad = 1 } }
    END { exit bad }' || { cat "$1" "$2"; exit 1; }
}

ae="--data=random --optimizer=kfac --training_steps=8 --batch_size=64 --log_every=1
    --estimation_mode=fisher_gradients --use_adaptive_damping --inverse_update_period=2"
# shellcheck disable=SC2086
"$autoencoder" $ae --csv="$work/one.csv" --png="$work/one.png" > "$work/one.txt" 2>&1 ||
  { cat "$work/one.txt"; exit 1; }
# shellcheck disable=SC2086
mpirun -np 2 "$autoencoder" $ae --multi_device --distributed_inverses --csv="$work/two.csv" \
  --png="$work/two.png" > "$work/two.txt" 2>&1 || { cat "$work/two.txt"; exit 1; }
same_losses "$work/one.txt" "$work/two.txt" 8
grep -q "multi_device: 2 ranks" "$work/two.txt" || { cat "$work/two.txt"; exit 1; }
test -s "$work/two.csv" && test -s "$work/two.png" || { echo "rank 0 wrote no outputs"; exit 1; }

data=/usr/share/datasets/fashion-mnist
if [ -r "$data/train-images-idx3-ubyte.gz" ] && [ -r "$data/t10k-labels-idx1-ubyte.gz" ]; then
  cl="--training_steps=6 --batch_size=32 --log_every=1 --eval_examples=100
      --train_examples=1000 --max_seconds=0 --eval_every_seconds=1000 --inverse_update_period=2"
  # shellcheck disable=SC2086
  "$classifier" $cl --csv="$work/one_classifier.csv" > "$work/one_classifier.txt" 2>&1 ||
    { cat "$work/one_classifier.txt"; exit 1; }
  # shellcheck disable=SC2086
  mpirun -np 2 "$classifier" $cl --multi_device --csv="$work/two_classifier.csv" \
    > "$work/two_classifier.txt" 2>&1 || { cat "$work/two_classifier.txt"; exit 1; }
  same_losses "$work/one_classifier.txt" "$work/two_classifier.txt" 6
else
  echo "the autoencoder agrees on one and two ranks; the classifier part did not run: no" \
    "Fashion-MNIST in $data"
  exit 77
fi
echo "apps agree on one and two ranks"
