// Arithmetic on parameter lists.
#include "hkfac/kfac/types.h"

#include "hkfac/error.h"

namespace hkfac::kfac {

void check_same_shapes(const Params &a, const Params &b, const char *what) {
  if (a.size() != b.size()) {
    throw Error(std::string(what) + ": parameter lists have " + std::to_string(a.size()) + " and " +
                std::to_string(b.size()) + " tensors");
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rows() != b[i].rows() || a[i].cols() != b[i].cols()) {
      throw Error(std::string(what) + ": tensor " + std::to_string(i) + " is " +
                  std::to_string(a[i].rows()) + " x " + std::to_string(a[i].cols()) + " in one " +
                  "list and " + std::to_string(b[i].rows()) + " x " + std::to_string(b[i].cols()) +
                  " in the other");
    }
  }
}

Params zeros_like(const Params &p) {
  Params z;
  z.reserve(p.size());
  for (const Matrix &m : p)
    z.push_back(Matrix::Zero(m.rows(), m.cols()));
  return z;
}

double dot(const Params &a, const Params &b) {
  check_same_shapes(a, b, "kfac::dot");
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    s += a[i].cast<double>().cwiseProduct(b[i].cast<double>()).sum();
  }
  return s;
}

double squared_norm(const Params &p) {
  double s = 0.0;
  for (const Matrix &m : p)
    s += m.cast<double>().squaredNorm();
  return s;
}

void axpy(float alpha, const Params &x, Params &y) {
  check_same_shapes(x, y, "kfac::axpy");
  for (size_t i = 0; i < x.size(); ++i)
    y[i] += alpha * x[i];
}

void scale(float alpha, Params &p) {
  for (Matrix &m : p)
    m *= alpha;
}

bool all_finite(const Params &p) {
  for (const Matrix &m : p) {
    if (!m.allFinite())
      return false;
  }
  return true;
}

} // namespace hkfac::kfac
