#!/bin/sh
# Steps per second of the autoencoder's K-FAC on one host: one process with two kernel threads
# against two MPI ranks of one thread each (--multi_device), with and without
# --distributed_inverses, alternated round by round (BENCHMARKS.md: ratios from one run), plus
# the payload each rank communicates per step by phase. Rates exclude step 0 (burn-in).
# Usage: mpi_scaling.sh BUILD_DIR [ROUNDS=3] [STEPS=41] [extra autoencoder flags...]
set -eu
build=$1 rounds=${2:-3} steps=${3:-41}
shift $(( $# < 3 ? $# : 3 ))
app="$build/apps/autoencoder/autoencoder"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common="--flagfile=$here/kfac_tuned.flags --data=fashion_mnist --training_steps=$steps --log_every=1"

# Steps per second from a log: steps 1..last over the time between them.
rate() {
  awk '$1 == "step" { for (i = 1; i <= NF; ++i) if ($i == "(fwd/bwd") t[$2] = $(i - 1) + 0; last = $2 }
       END { printf "%.3f", (last - 1) / (t[last] - t[1]) }' "$1"
}
run() { # name, then the command
  name=$1
  shift
  "$@" --csv="$work/$name.csv" --png="$work/$name.png" > "$work/$name.txt" 2>&1 ||
    { cat "$work/$name.txt"; exit 1; }
}
echo "round  1x2 steps/s  2x1 steps/s  2x1+distinv steps/s  2x1/1x2  2x1+distinv/1x2"
for r in $(seq 1 "$rounds"); do
  # shellcheck disable=SC2086
  HL_NUM_THREADS=2 run one $app $common "$@"
  # shellcheck disable=SC2086
  run two mpirun -np 2 -x HL_NUM_THREADS=1 $app $common --multi_device --serial_kernels "$@"
  # shellcheck disable=SC2086
  run dist mpirun -np 2 -x HL_NUM_THREADS=1 $app $common --multi_device --serial_kernels \
    --distributed_inverses "$@"
  a=$(rate "$work/one.txt") b=$(rate "$work/two.txt") c=$(rate "$work/dist.txt")
  echo "$r  $a  $b  $c  $(echo "$b / $a" | bc -l | cut -c1-5)  $(echo "$c / $a" | bc -l | cut -c1-5)"
done
grep '^communicated' "$work/two.txt"
grep '^communicated' "$work/dist.txt"
grep '^final' "$work/one.txt" "$work/two.txt" "$work/dist.txt"
