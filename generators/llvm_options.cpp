// LLVM options for the generators whose kernels are built on sched::Matmul (gemm, dense,
// precondition): LLVM's SLP vectorizer is turned off.
//
// Why: a Matmul tile broadcasts one element of each of its 8 rows per k step. The SLP vectorizer
// packs the 8 row addresses into a vector register and extracts them again every iteration
// (vpaddq, vpextrq, vextracti128, vmovq): about 10 vector-integer uops per 24 FMAs. On Intel's
// AVX-512 cores these issue on the same two ports as the FMAs, and the kernels ran at 0.63-0.78x
// OpenBLAS; with scalar address arithmetic they ran at 0.81-1.05x, side by side on the same
// machine (docs/RESULTS.md). Halide's own vectorization is explicit and unaffected.
//
// Halide 14 parses HL_LLVM_ARGS when it first initialises LLVM, i.e. when the generator compiles
// its pipeline, after static initialisation; a value already set by the user wins.
#include <cstdlib>

namespace {

struct DisableSlpVectorizer {
  DisableSlpVectorizer() { setenv("HL_LLVM_ARGS", "-vectorize-slp=false", /*overwrite=*/0); }
} const disable_slp_vectorizer;

} // namespace
