// Value types shared by the K-FAC library: matrices, parameter lists, batches.
#pragma once

#include <Eigen/Core>

#include <string>
#include <vector>

#include "hkfac/buffer.h"

namespace hkfac::kfac {

// Every tensor in the library is a row-major float matrix, the layout of the generated kernels
// (hkfac/buffer.h), so a kernel call wraps it without copying. One example per row; a vector
// parameter (bias, scale, shift) is a 1 x n row.
using Matrix = RowMajorMatrix<float>;

// The model's parameters, in the order the model's param_shapes() lists them. The optimizer
// updates them in place.
using Params = std::vector<Matrix>;

// One mini-batch: inputs (one example per row) and, when the loss needs them, targets.
struct Batch {
  Matrix inputs;
  Matrix targets;
};

struct ParamShape {
  int rows = 0;
  int cols = 0;
  std::string name;
};

// Arithmetic on parameter lists (all lists must have matching shapes; checked, naming `what`).
void check_same_shapes(const Params &a, const Params &b, const char *what);
Params zeros_like(const Params &p);
double dot(const Params &a, const Params &b);
// Σ a_ij b_ij of two same-shape matrices, summed in double.
double dot(const Matrix &a, const Matrix &b);
double squared_norm(const Params &p);
// alpha * x + beta * y, in one pass (no zero-filled list to accumulate into).
Params combine(float alpha, const Params &x, float beta, const Params &y);
// y <- y + alpha * x
void axpy(float alpha, const Params &x, Params &y);
void scale(float alpha, Params &p);
bool all_finite(const Params &p);

} // namespace hkfac::kfac
