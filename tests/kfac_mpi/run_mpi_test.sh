#!/bin/sh
# Runs a test program on two ranks of an Open MPI job; exit 77 (skipped) without mpirun.
# Usage: run_mpi_test.sh PROGRAM [ARGS...]
set -eu
command -v mpirun >/dev/null || { echo "mpirun missing (scripts/setup installs openmpi-bin)"; exit 77; }
# Open MPI refuses to start as root unless told it may (CI containers run as root); two ranks
# may share fewer cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# One kernel thread per rank, as a rank per core would run.
export HL_NUM_THREADS=1
exec mpirun -np 2 --oversubscribe "$@"
