// cuBLAS, the anchor of the GPU run: device copies of the cases' matrices and row-major calls.
//
// Built into kernel_bench only when CMake found the CUDA toolkit (HKFAC_BENCH_CUBLAS=1); cases
// add a "cublas" contender when enabled() says the run is on CUDA and cuBLAS is here. cuBLAS runs
// in the CUDA runtime's primary context, Halide's kernels in a context of their own: each side
// gets its own copies of the inputs, and contenders pass synchronize() as their sync.
#pragma once

#include <cstddef>
#include <memory>

namespace hkfac::bench::cublas {

// True when kernel_bench was built with cuBLAS and this run's device is CUDA.
bool enabled();

// A float array on the device, uploaded once from host memory (or zeroed).
class DeviceArray {
public:
  DeviceArray(const float *host, std::size_t count);
  explicit DeviceArray(std::size_t count);
  ~DeviceArray();
  DeviceArray(const DeviceArray &) = delete;
  DeviceArray &operator=(const DeviceArray &) = delete;
  float *get() const { return ptr_; }

private:
  float *ptr_ = nullptr;
};

// Row-major C (m x n) = alpha op(A) op(B) + beta C; lda, ldb, ldc are the stored row lengths.
void sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float *A,
           int lda, const float *B, int ldb, float beta, float *C, int ldc);

// One triangle of the row-major d x d C <- a C + b XᵀX for row-major X (n x d): ssyrk.
void ssyrk(int d, int n, float b, const float *X, float a, float *C);

// Waits for all cuBLAS work issued so far.
void synchronize();

} // namespace hkfac::bench::cublas
