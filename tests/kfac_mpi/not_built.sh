#!/bin/sh
# A build without HKFAC_MPI: the autoencoder must refuse --multi_device by name (rather than train
# on one process as if data-parallel), then the test exits 77 so that ctest shows the
# data-parallel suite as skipped, not passed.
# Usage: not_built.sh AUTOENCODER WORK_DIR
set -u
autoencoder=$1 work=$2
out=$("$autoencoder" --multi_device --data=random --training_steps=1 --csv="$work/not_built.csv" \
  --png="$work/not_built.png" 2>&1)
rc=$?
case "$out" in
*"--multi_device=true: must be false: this build has no MPI"*) ;;
*)
  echo "--multi_device was not refused as a build without MPI must (status $rc):"
  echo "$out"
  exit 1
  ;;
esac
if [ "$rc" -ne 1 ]; then
  echo "--multi_device was refused with status $rc, expected 1: $out"
  exit 1
fi
echo "built without HKFAC_MPI: the data-parallel tests did not run (configure with -DHKFAC_MPI=ON" \
  "and libopenmpi-dev installed); --multi_device is refused as it must be"
exit 77
