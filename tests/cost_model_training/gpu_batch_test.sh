#!/bin/sh
# GPU samples timed on another machine (apps/tools/gpu_batch.py), end to end on this one: two
# small random pipelines searched by Hkfac for host-opencl and compiled without timing
# (generate_data.py --compile-only), packed, timed by the packed runner on OpenCL (pocl standing
# in for the device machine), ingested into .sample files of S = 73 features, and trained on with
# K-FAC into GPU weights that the plugin then loads for a GPU target. Every pending schedule must
# become exactly one complete sample; a second compile-only run makes nothing new (resume).
# Usage: gpu_batch_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -eu
src=$1 build=$2 work=$3
command -v python3 >/dev/null || { echo "python3 missing"; exit 77; }
command -v c++ >/dev/null || { echo "no C++ compiler to link benchmarks"; exit 77; }
opencl=$(ldconfig -p | awk '/libOpenCL\.so\.1 /{print $NF; exit}')
if [ -z "$opencl" ] || [ -z "$(ls /etc/OpenCL/vendors 2>/dev/null)" ]; then
  echo "no OpenCL platform (scripts/setup installs pocl-opencl-icd)"; exit 77
fi
rm -rf "$work"
mkdir -p "$work"
compile() {
  python3 "$src/apps/tools/generate_data.py" --out "$work/out" --scheduler Hkfac \
    --plugin "$build/autoscheduler_plugin/libautoschedule_hkfac.so" \
    --random-generator "$build/apps/random_pipeline/hkfac_random_pipeline" \
    --random 1:2 --stages 3:4 --random-params width=96 height=64 --schedules 3 --full-beam 0 \
    --randomize-weights --compile-only --target host-opencl --jobs 2
}
compile > "$work/compile.txt" 2>&1 || { cat "$work/compile.txt"; exit 1; }
pending=$(find "$work/out" -name PENDING | wc -l)
test "$pending" -ge 2 || { echo "only $pending schedules pending"; cat "$work/compile.txt"; exit 1; }
test "$(find "$work/out" -name '*.sample' | wc -l)" -eq 0 || { echo "compile-only timed"; exit 1; }
python3 "$src/apps/tools/gpu_batch.py" pack "$work/out" "$work/batch.tar.xz"
# The runner as the device machine runs it: from the batch, away from the source tree.
mkdir -p "$work/there"
tar -C "$work/there" -xJf "$work/batch.tar.xz" batch/gpu_batch.py
LD_PRELOAD=$opencl python3 "$work/there/batch/gpu_batch.py" run "$work/batch.tar.xz" \
  "$work/timings.txt" --seconds 240 --min-time 0.01 --work "$work/there/run" > "$work/run.txt" 2>&1 ||
  { cat "$work/run.txt" "$work/timings.txt"; exit 1; }
test "$(grep -c ' [0-9.e+-]*$' "$work/timings.txt")" -eq "$pending" ||
  { echo "not every benchmark was timed"; cat "$work/timings.txt"; exit 1; }
python3 "$src/apps/tools/gpu_batch.py" ingest "$work/out" "$work/timings.txt"
test "$(find "$work/out" -name PENDING | wc -l)" -eq 0 || { echo "schedules still pending"; exit 1; }
test "$(find "$work/out" -name '*.sample' | wc -l)" -eq "$pending" || { echo "samples missing"; exit 1; }
for f in $(find "$work/out" -name '*.sample'); do
  feat=${f%.sample}.featurization
  size=$(stat -c %s "$feat")
  test "$(stat -c %s "$f")" -eq $((size + 12)) || { echo "$f incomplete"; exit 1; }
  # Whole stages of 73 schedule features and 287 algorithm features, float32.
  test $((size % ((73 + 287) * 4))) -eq 0 || { echo "$feat is not S = 73"; exit 1; }
done
compile > "$work/again.txt" 2>&1 || { cat "$work/again.txt"; exit 1; }
grep -q "compiled and pending a device: 0" "$work/again.txt" || { cat "$work/again.txt"; exit 1; }
find "$work/out" -name '*.sample' | "$build/apps/tools/retrain_cost_model" --schedule_features=73 \
  --epochs=3 --randomize_weights --weights_out="$work/gpu.weights" > "$work/train.txt" 2>&1 ||
  { cat "$work/train.txt"; exit 1; }
mkdir -p "$work/gen"
HL_WEIGHTS_DIR="$work/gpu.weights" HL_BEAM_SIZE=1 HL_DEBUG_AUTOSCHEDULE=1 \
  "$build/apps/random_pipeline/hkfac_random_pipeline" -g random_pipeline -o "$work/gen" \
  -e schedule -p "$build/autoscheduler_plugin/libautoschedule_hkfac.so" -s Hkfac \
  target=host-opencl auto_schedule=true seed=3 stages=4 width=96 height=64 > "$work/gen.txt" 2>&1 ||
  { cat "$work/gen.txt"; exit 1; }
grep -q "weights: $work/gpu.weights" "$work/gen.txt" || { cat "$work/gen.txt"; exit 1; }
grep -q gpu_blocks "$work/gen/random_pipeline.schedule.h" || exit 1
echo "gpu_batch: $pending schedules compiled here, timed by the packed runner, ingested and trained on"
