// Value types shared by the K-FAC library: matrices, parameter lists, batches.
#pragma once

#include <Eigen/Core>

#include <cstdint>
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

// Integers per example (token ids, indices of examples held elsewhere), row-major like Matrix.
using IndexMatrix = Eigen::Matrix<int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One mini-batch: inputs (one example per row) and, when the loss needs them, targets. A model
// whose examples are integers (an embedding's tokens, a dataset's indices) reads them from
// `indices`, exactly, instead of through floats; the optimizer slices its rows with the inputs'.
struct Batch {
  Matrix inputs;
  Matrix targets;
  IndexMatrix indices;
  // The number of examples: the rows of the inputs, or of the indices where there are no inputs.
  Eigen::Index size() const { return inputs.rows() > 0 ? inputs.rows() : indices.rows(); }
};

struct ParamShape {
  int rows = 0;
  int cols = 0;
  std::string name;
};

// Arithmetic on parameter lists (all lists must have matching shapes; checked, naming `what`).
// Passes over lists of 64K elements or more run on the Halide runtime's thread pool; sums are
// the same bit for bit whatever the thread count.
void check_same_shapes(const Params &a, const Params &b, const char *what);
Params zeros_like(const Params &p);
double dot(const Params &a, const Params &b);
// Σ a_ij b_ij of two same-shape matrices, summed in double.
double dot(const Matrix &a, const Matrix &b);
double squared_norm(const Params &p);
// All pairwise dots of k same-shape lists (the k x k Gram matrix), in one pass that reads each
// list once, where k(k+1)/2 calls of dot would read each list k times.
Eigen::MatrixXd gram(const std::vector<const Params *> &lists);
// alpha * x + beta * y, in one pass (no zero-filled list to accumulate into).
Params combine(float alpha, const Params &x, float beta, const Params &y);
// An optimizer update in one pass: delta = alpha x + beta y and next = base + delta (the same
// float expressions as combine), with the sums the step needs of them. delta and next are
// resized to x's shapes, reusing their storage when it fits.
struct StepSums {
  double delta_squared_norm = 0; // Σ delta², finite exactly when delta is
  double g_dot_delta = 0;        // Σ g · delta
  double next_squared_norm = 0;  // Σ next², finite exactly when next is
};
StepSums form_step(float alpha, const Params &x, float beta, const Params &y, const Params &base,
                   const Params &g, Params &delta, Params &next);
// y <- y + alpha * x
void axpy(float alpha, const Params &x, Params &y);
void scale(float alpha, Params &p);
bool all_finite(const Params &p);

} // namespace hkfac::kfac
