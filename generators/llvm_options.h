// LLVM options for every generator whose kernels are built on sched::Matmul (included by
// matmul_schedule.h, so gemm, dense and precondition today): LLVM's SLP vectorizer is turned off.
//
// Why: a Matmul tile broadcasts one element of each of its 8 rows per k step, and the SLP
// vectorizer packs the 8 row addresses into a vector register and extracts them again every
// iteration, vector-integer uops that Intel's AVX-512 cores issue on the FMA ports
// (docs/RESULTS.md#slp-vectorizer). Halide's own vectorization is explicit and unaffected.
//
// Halide 14 parses HL_LLVM_ARGS when it first initialises LLVM, i.e. when the generator compiles
// its pipeline, after static initialisation; a value already set by the user wins.
#pragma once

#include <cstdlib>

namespace hkfac::sched {

struct DisableSlpVectorizer {
  DisableSlpVectorizer() { setenv("HL_LLVM_ARGS", "-vectorize-slp=false", /*overwrite=*/0); }
};
// One per generator program, constructed during static initialisation.
inline const DisableSlpVectorizer disable_slp_vectorizer;

} // namespace hkfac::sched
