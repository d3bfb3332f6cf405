#!/bin/sh
# apps/tools/generate_data_mpi.py under `mpirun -np 2` on this host: four small random pipelines
# split between two ranks. Each rank must make the samples of its own share only (shards 0/2 and
# 1/2, disjoint pipelines), the samples must be complete, the same command again must make
# nothing (resume), and --merge must gather them into another directory once.
# Usage: generate_data_mpi_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
command -v mpirun >/dev/null || { echo "mpirun missing (scripts/setup installs openmpi-bin)"; exit 77; }
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
command -v c++ >/dev/null || { echo "no C++ compiler to link benchmarks"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
# Open MPI refuses to start as root unless told it may (CI containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
run() {
  mpirun -np 2 python3 "$src/apps/tools/generate_data_mpi.py" --out "$work/out" \
    --scheduler Hkfac --plugin "$build/autoscheduler_plugin/libautoschedule_hkfac.so" \
    --random-generator "$build/apps/random_pipeline/hkfac_random_pipeline" \
    --random 0:4 --stages 3:4 --schedules 1 --randomize-weights --full-beam 0 --threads 1 \
    --bench-min-time 0.01 --max-foreign-load inf
}
run > "$work/first.txt" 2>&1 || { cat "$work/first.txt"; exit 1; }
samples() { find "$1" -name '*.sample' | wc -l; }
test "$(samples "$work/out")" -eq 4 || { cat "$work/first.txt" "$work"/out/mpi_logs/*; exit 1; }
for r in 0 1; do
  grep -q "shard $r/2" "$work/out/mpi_logs/rank$r.log" || { cat "$work/out/mpi_logs/rank$r.log"; exit 1; }
  grep -q "samples made: 2," "$work/out/mpi_logs/rank$r.log" || { cat "$work/out/mpi_logs/rank$r.log"; exit 1; }
done
# The shards' pipelines: two per rank, four in all, so none was made by both.
names() { grep -ho 'random_pipeline_g3_seed[0-9]*' "$@" | sort -u | wc -l; }
for r in 0 1; do
  test "$(names "$work/out/mpi_logs/rank$r.log")" -eq 2 || { cat "$work/out/mpi_logs/rank$r.log"; exit 1; }
done
test "$(names "$work"/out/mpi_logs/rank*.log)" -eq 4 || { cat "$work"/out/mpi_logs/*; exit 1; }
for f in $(find "$work/out" -name '*.sample'); do
  feat=${f%.sample}.featurization
  test "$(stat -c %s "$f")" -eq $(( $(stat -c %s "$feat") + 12 )) || { echo "$f incomplete"; exit 1; }
done
run > "$work/again.txt" 2>&1 || { cat "$work/again.txt"; exit 1; }
for r in 0 1; do
  grep "samples made:" "$work/out/mpi_logs/rank$r.log" | tail -1 | grep -q "samples made: 0," ||
    { echo "resume made samples"; cat "$work/out/mpi_logs/rank$r.log"; exit 1; }
done
test "$(samples "$work/out")" -eq 4 || exit 1
python3 "$src/apps/tools/generate_data_mpi.py" --merge "$work/out" --into "$work/merged" |
  grep -q "merged 4 samples" || { echo "merge did not copy 4 samples"; exit 1; }
python3 "$src/apps/tools/generate_data_mpi.py" --merge "$work/out" --into "$work/merged" |
  grep -q "merged 0 samples into .* (4 were there already)" || { echo "merge copied twice"; exit 1; }
test "$(samples "$work/merged")" -eq 4 || exit 1
echo "generate_data_mpi: ok"
