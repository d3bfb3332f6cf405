// cuSOLVER route for factor inverses: dlopen'ed libraries, one handle, device buffers reused.
#include "hkfac/cusolver.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <type_traits>

#include "hkfac/device.h"
#include "hkfac/error.h"

#if HKFAC_HAVE_CUSOLVER
#include <cuda_runtime_api.h>
#include <cusolverDn.h>
#endif

namespace hkfac::cusolver {

#if HKFAC_HAVE_CUSOLVER
namespace {

// The entry points used, typed from the toolkit's own declarations.
struct Api {
  decltype(&cudaMalloc) malloc = nullptr;
  decltype(&cudaFree) free = nullptr;
  decltype(&cudaMemcpy) memcpy = nullptr;
  decltype(&cudaGetErrorString) error_string = nullptr;
  decltype(&cusolverDnCreate) create = nullptr;
  decltype(&cusolverDnDpotrf_bufferSize) potrf_size = nullptr;
  decltype(&cusolverDnDpotrf) potrf = nullptr;
  decltype(&cusolverDnDpotri_bufferSize) potri_size = nullptr;
  decltype(&cusolverDnDpotri) potri = nullptr;
  decltype(&cusolverDnDsyevd_bufferSize) syevd_size = nullptr;
  decltype(&cusolverDnDsyevd) syevd = nullptr;
};

// A device allocation that only grows: factor sizes repeat, so after the first inverse of each
// size no call allocates.
struct DeviceBuffer {
  void *ptr = nullptr;
  std::size_t bytes = 0;
};

class Solver {
public:
  Solver() { status_ = probe(); }
  const Status &status() const { return status_; }

  bool spd_inverse(double *a, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    require(n);
    double *d_a = upload(a, n);
    int lwork_f = 0, lwork_i = 0;
    check(api_.potrf_size(handle_, CUBLAS_FILL_MODE_LOWER, n, d_a, n, &lwork_f),
          "cusolverDnDpotrf_bufferSize");
    check(api_.potri_size(handle_, CUBLAS_FILL_MODE_LOWER, n, d_a, n, &lwork_i),
          "cusolverDnDpotri_bufferSize");
    const int lwork = std::max(lwork_f, lwork_i);
    double *work = static_cast<double *>(reserve(work_, std::size_t(lwork) * sizeof(double)));
    check(api_.potrf(handle_, CUBLAS_FILL_MODE_LOWER, n, d_a, n, work, lwork, info()),
          "cusolverDnDpotrf");
    if (read_info("cusolverDnDpotrf") > 0)
      return false; // a leading minor is not positive definite
    check(api_.potri(handle_, CUBLAS_FILL_MODE_LOWER, n, d_a, n, work, lwork, info()),
          "cusolverDnDpotri");
    if (read_info("cusolverDnDpotri") > 0)
      return false;
    download(a, d_a, std::size_t(n) * n);
    // potri fills the lower triangle; the inverse is symmetric, so mirror it.
    for (int j = 0; j < n; j++) {
      for (int i = j + 1; i < n; i++)
        a[j + std::size_t(i) * n] = a[i + std::size_t(j) * n];
    }
    return true;
  }

  bool symmetric_eigen(double *a, double *w, int n) {
    std::lock_guard<std::mutex> lock(mu_);
    require(n);
    double *d_a = upload(a, n);
    double *d_w = static_cast<double *>(reserve(w_, std::size_t(n) * sizeof(double)));
    int lwork = 0;
    check(api_.syevd_size(handle_, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, d_a, n, d_w,
                          &lwork),
          "cusolverDnDsyevd_bufferSize");
    double *work = static_cast<double *>(reserve(work_, std::size_t(lwork) * sizeof(double)));
    check(api_.syevd(handle_, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n, d_a, n, d_w,
                     work, lwork, info()),
          "cusolverDnDsyevd");
    if (read_info("cusolverDnDsyevd") > 0)
      return false;
    download(a, d_a, std::size_t(n) * n);
    download(w, d_w, std::size_t(n));
    return true;
  }

private:
  Status probe() {
    Status s;
    const CudaStatus &cuda = cuda_status();
    if (!cuda.usable) {
      s.reason = "CUDA is not usable: " + cuda.reason;
      return s;
    }
    // The sonames of the toolkit this build saw; its lib directory is in the loader's path on
    // these machines (ldconfig), and LD_LIBRARY_PATH serves others.
    const std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
    const std::string solver = "libcusolver.so." + std::to_string(CUSOLVER_VER_MAJOR);
    void *rt = dlopen(cudart.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (!rt) {
      s.reason = "could not load " + cudart + ": " + dlerror();
      return s;
    }
    void *sv = dlopen(solver.c_str(), RTLD_LAZY | RTLD_LOCAL);
    if (!sv) {
      s.reason = "could not load " + solver + ": " + dlerror();
      return s;
    }
    std::string missing;
    auto load = [&](void *lib, const char *name, auto &fn) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn && missing.empty())
        missing = name;
    };
    load(rt, "cudaMalloc", api_.malloc);
    load(rt, "cudaFree", api_.free);
    load(rt, "cudaMemcpy", api_.memcpy);
    load(rt, "cudaGetErrorString", api_.error_string);
    load(sv, "cusolverDnCreate", api_.create);
    load(sv, "cusolverDnDpotrf_bufferSize", api_.potrf_size);
    load(sv, "cusolverDnDpotrf", api_.potrf);
    load(sv, "cusolverDnDpotri_bufferSize", api_.potri_size);
    load(sv, "cusolverDnDpotri", api_.potri);
    load(sv, "cusolverDnDsyevd_bufferSize", api_.syevd_size);
    load(sv, "cusolverDnDsyevd", api_.syevd);
    if (!missing.empty()) {
      s.reason = "the CUDA libraries lack " + missing;
      return s;
    }
    // The first runtime call initialises the runtime: a driver older than the toolkit fails here.
    if (cudaError_t e = api_.malloc(&info_.ptr, sizeof(int)); e != cudaSuccess) {
      s.reason = std::string("the CUDA runtime could not start: ") + api_.error_string(e);
      return s;
    }
    info_.bytes = sizeof(int);
    if (cusolverStatus_t e = api_.create(&handle_); e != CUSOLVER_STATUS_SUCCESS) {
      s.reason = "cusolverDnCreate failed with status " + std::to_string(static_cast<int>(e));
      return s;
    }
    s.usable = true;
    return s; // the libraries stay loaded for the process
  }

  void require(int n) const {
    if (!status_.usable)
      throw Error("cuSOLVER is not usable: " + status_.reason);
    if (n < 1)
      throw Error("cuSOLVER: matrix size must be >= 1, got " + std::to_string(n));
  }

  void check(cudaError_t e, const char *what) const {
    if (e != cudaSuccess)
      throw Error(std::string("cuSOLVER route: ") + what + " failed: " + api_.error_string(e));
  }

  static void check(cusolverStatus_t e, const char *what) {
    if (e != CUSOLVER_STATUS_SUCCESS) {
      throw Error(std::string("cuSOLVER route: ") + what + " failed with status " +
                  std::to_string(static_cast<int>(e)));
    }
  }

  void *reserve(DeviceBuffer &b, std::size_t bytes) {
    bytes = std::max<std::size_t>(bytes, 1);
    if (b.bytes < bytes) {
      if (b.ptr)
        api_.free(b.ptr);
      b = {};
      check(api_.malloc(&b.ptr, bytes), "cudaMalloc");
      b.bytes = bytes;
    }
    return b.ptr;
  }

  int *info() const { return static_cast<int *>(info_.ptr); }

  // LAPACK's convention: < 0 names a bad argument (our bug), > 0 is the numerical outcome.
  int read_info(const char *what) {
    int value = 0;
    check(api_.memcpy(&value, info_.ptr, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy");
    if (value < 0) {
      throw Error(std::string("cuSOLVER route: ") + what + " rejected argument " +
                  std::to_string(-value));
    }
    return value;
  }

  double *upload(const double *a, int n) {
    const std::size_t bytes = std::size_t(n) * n * sizeof(double);
    double *d_a = static_cast<double *>(reserve(a_, bytes));
    check(api_.memcpy(d_a, a, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    return d_a;
  }

  void download(double *host, const double *device, std::size_t count) {
    check(api_.memcpy(host, device, count * sizeof(double), cudaMemcpyDeviceToHost), "cudaMemcpy");
  }

  Status status_;
  Api api_;
  cusolverDnHandle_t handle_ = nullptr;
  std::mutex mu_;
  DeviceBuffer a_, w_, work_, info_;
};

Solver &solver() {
  static Solver s;
  return s;
}

} // namespace

const Status &status() { return solver().status(); }
bool spd_inverse(double *a, int n) { return solver().spd_inverse(a, n); }
bool symmetric_eigen(double *a, double *w, int n) { return solver().symmetric_eigen(a, w, n); }

#else // built without the CUDA toolkit

const Status &status() {
  static const Status s{false, "this build did not find the CUDA toolkit (cuSOLVER)"};
  return s;
}

bool spd_inverse(double *, int) { throw Error("cuSOLVER is not usable: " + status().reason); }
bool symmetric_eigen(double *, double *, int) {
  throw Error("cuSOLVER is not usable: " + status().reason);
}

#endif

} // namespace hkfac::cusolver
