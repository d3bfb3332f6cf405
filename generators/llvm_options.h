// LLVM options for every generator whose kernels are built on sched::Matmul (included by
// matmul_schedule.h, so gemm, dense and precondition today): LLVM's SLP vectorizer is turned off.
//
// Why: a Matmul tile broadcasts one element of each of its 8 rows per k step. The SLP vectorizer
// packs the 8 row addresses into a vector register and extracts them again every iteration
// (vpaddq, vpextrq, vextracti128, vmovq): about 10 vector-integer uops per 24 FMAs. On Intel's
// AVX-512 cores these issue on the same two ports as the FMAs. Side by side on one such machine
// (docs/RESULTS.md#slp-vectorizer), the NN/NT GEMMs went from 0.56-0.78x OpenBLAS to 0.78-1.17x and the
// precondition from 0.72-0.74x to 0.85-1.01x with scalar address arithmetic. The TN products,
// which read 8 adjacent floats per k step, had no such code. Halide's own vectorization is
// explicit and unaffected.
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
