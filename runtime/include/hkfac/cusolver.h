// Factor inverses on the GPU: cuSOLVER's Cholesky and symmetric eigensolver, loaded at first use.
//
// The K-FAC factors live on the host between steps, so these take host matrices: each call
// uploads one n x n matrix, factorises it on the device in double precision, and downloads the
// result (the copies are O(n²) against the O(n³) factorisation). cuSOLVER and the CUDA runtime
// are opened with dlopen, like libcuda: a build that found the toolkit still runs, and reports
// why, on a machine without it or without a GPU.
#pragma once

#include <string>

namespace hkfac::cusolver {

// What the probe found. `usable` only when this build saw the toolkit's headers, CUDA is usable
// (hkfac::cuda_status()), libcudart and libcusolver load with every entry point used here, and a
// cuSOLVER handle could be created; otherwise `reason` says which of those failed.
struct Status {
  bool usable = false;
  std::string reason;
};

// Probes once (thread-safe) and caches; never crashes when a library or the device is missing.
const Status &status();

// In place: `a` (n x n, column-major, symmetric positive definite; its lower triangle is read)
// becomes a⁻¹, both triangles, by Cholesky on the device (potrf, then potri). Returns false,
// leaving `a` unspecified, when `a` is not positive definite. Throws hkfac::Error when cuSOLVER
// is not usable or a CUDA call fails.
bool spd_inverse(double *a, int n);

// In place: `a` (n x n, column-major, symmetric; lower triangle read) becomes its eigenvectors,
// one per column, and `w` (n entries) the eigenvalues in ascending order (syevd). Returns false
// when the iteration did not converge; throws like spd_inverse.
bool symmetric_eigen(double *a, double *w, int n);

} // namespace hkfac::cusolver
