// cuBLAS anchor: one handle per process, errors as hkfac::Error naming the failed call.
#include "cublas_anchor.h"

#include "harness.h"
#include "hkfac/error.h"

#if HKFAC_BENCH_CUBLAS
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

#include <cstdio>
#include <string>

namespace hkfac::bench::cublas {

#if HKFAC_BENCH_CUBLAS
namespace {

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    throw hkfac::Error(std::string("cuBLAS anchor: ") + what + " failed: " + cudaGetErrorString(e));
  }
}

void check(cublasStatus_t s, const char *what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw hkfac::Error(std::string("cuBLAS anchor: ") + what + " failed with cuBLAS status " +
                       std::to_string(static_cast<int>(s)));
  }
}

// The handle, or null when cuBLAS cannot start here (e.g. a driver older than the toolkit): the
// GPU rows then run without an anchor instead of stopping the benchmark. Says why, once.
cublasHandle_t handle_or_null() {
  static cublasHandle_t h = []() -> cublasHandle_t {
    cublasHandle_t created = nullptr;
    if (cublasStatus_t s = cublasCreate(&created); s != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "kernel_bench: no cuBLAS anchor: cublasCreate failed: %s\n",
                   cublasGetStatusString(s));
      return nullptr;
    }
    return created;
  }();
  return h;
}

cublasHandle_t handle() {
  cublasHandle_t h = handle_or_null();
  if (!h)
    throw hkfac::Error("cuBLAS anchor: cuBLAS did not start (see above)");
  return h;
}

} // namespace

bool enabled() { return device() == hkfac::Device::cuda && handle_or_null(); }

DeviceArray::DeviceArray(const float *host, std::size_t count) {
  check(cudaMalloc(reinterpret_cast<void **>(&ptr_), count * sizeof(float)), "cudaMalloc");
  check(cudaMemcpy(ptr_, host, count * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
}

DeviceArray::DeviceArray(std::size_t count) {
  check(cudaMalloc(reinterpret_cast<void **>(&ptr_), count * sizeof(float)), "cudaMalloc");
  check(cudaMemset(ptr_, 0, count * sizeof(float)), "cudaMemset");
}

DeviceArray::~DeviceArray() { cudaFree(ptr_); }

// cuBLAS is column-major, where a stored row-major matrix reads as its transpose: row-major
// C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ, i.e. the same call with A and B swapped.
void sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, float alpha, const float *A,
           int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  check(cublasSgemm(handle(), transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                    transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, ldb, A, lda, &beta,
                    C, ldc),
        "cublasSgemm");
}

// Row-major X (n x d) reads column-major as Xᵀ (d x n), so XᵀX is the non-transposed syrk of it.
void ssyrk(int d, int n, float b, const float *X, float a, float *C) {
  check(cublasSsyrk(handle(), CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, d, n, &b, X, d, &a, C, d),
        "cublasSsyrk");
}

void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

#else // built without the CUDA toolkit: never enabled, so the calls below are unreachable

namespace {
[[noreturn]] void unavailable() {
  throw hkfac::Error("cuBLAS anchor: kernel_bench was built without the CUDA toolkit");
}
} // namespace

bool enabled() { return false; }
DeviceArray::DeviceArray(const float *, std::size_t) { unavailable(); }
DeviceArray::DeviceArray(std::size_t) { unavailable(); }
DeviceArray::~DeviceArray() = default;
void sgemm(bool, bool, int, int, int, float, const float *, int, const float *, int, float, float *,
           int) {
  unavailable();
}
void ssyrk(int, int, float, const float *, float, float *) { unavailable(); }
void synchronize() {}

#endif

} // namespace hkfac::bench::cublas
