// Dense layer on the generated dense forward/backward kernels.
#include <cmath>

#include "affine_jvp.h"
#include "affine_parameter_grads.h"
#include "checked_size.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"
#include "kernel_dispatch.h"

namespace hkfac::kfac {

void Layer::initialize(Matrix *, std::mt19937 &) const {}

Matrix Layer::backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) {
  std::vector<Matrix> scratch;
  for (const ParamShape &s : param_shapes())
    scratch.push_back(Matrix::Zero(s.rows, s.cols));
  return backward(params, dy, scratch.data(), record);
}

void Layer::backward_without_input_grad(const Matrix *params, const Matrix &dy, Matrix *grads,
                                        TagRecord *record) {
  backward(params, dy, grads, record);
}

void Layer::backward_records_without_input_grad(const Matrix *params, const Matrix &dy,
                                                TagRecord *record) {
  backward_records(params, dy, record);
}

const char *activation_name(Activation act) {
  switch (act) {
  case Activation::identity:
    return "identity";
  case Activation::tanh:
    return "tanh";
  case Activation::relu:
    return "relu";
  case Activation::sigmoid:
    return "sigmoid";
  }
  return "unknown";
}

Dense::Dense(int input_dim, int output_dim, Activation act, bool use_bias)
    : input_dim_(input_dim), output_dim_(output_dim), act_(act), use_bias_(use_bias) {
  if (input_dim < 1 || output_dim < 1) {
    throw Error("Dense: input_dim and output_dim must be >= 1, got " + std::to_string(input_dim) +
                " and " + std::to_string(output_dim));
  }
  detail::checked_int((static_cast<long long>(input_dim) + (use_bias ? 1 : 0)) * output_dim,
                      "Dense(" + std::to_string(input_dim) + ", " + std::to_string(output_dim) +
                          ")",
                      use_bias ? "the parameter count (w and b)" : "the parameter count");
}

std::vector<ParamShape> Dense::param_shapes() const {
  std::vector<ParamShape> s{{input_dim_, output_dim_, "w"}};
  if (use_bias_)
    s.push_back({1, output_dim_, "b"});
  return s;
}

int Dense::output_dim(int input_dim) const {
  if (input_dim != input_dim_) {
    throw Error("Dense: input width " + std::to_string(input_dim) + " does not match input_dim " +
                std::to_string(input_dim_));
  }
  return output_dim_;
}

void Dense::initialize(Matrix *params, std::mt19937 &rng) const {
  // Glorot uniform keeps activations' variance roughly constant through tanh stacks.
  const float limit = std::sqrt(6.0f / static_cast<float>(input_dim_ + output_dim_));
  std::uniform_real_distribution<float> u(-limit, limit);
  params[0] = Matrix::NullaryExpr(input_dim_, output_dim_, [&]() { return u(rng); });
  if (use_bias_)
    params[1] = Matrix::Zero(1, output_dim_);
}

std::optional<LayerTag> Dense::tag() const {
  LayerTag t;
  t.kind = TagKind::dense;
  t.params = use_bias_ ? std::vector<int>{0, 1} : std::vector<int>{0};
  t.has_bias = use_bias_;
  t.input_dim = input_dim_;
  t.output_dim = output_dim_;
  return t;
}

Matrix Dense::forward(const Matrix *params, const Matrix &x, TagRecord *record) {
  x_ = x;
  ops::dense_forward(y_, x, params[0], use_bias_ ? &params[1] : nullptr, act_);
  if (record)
    record->inputs = x;
  return y_;
}

Matrix Dense::backward(const Matrix *params, const Matrix &dy, Matrix *grads, TagRecord *record) {
  Matrix dz, dx, dw, db;
  ops::dense_backward(dz, dx, dw, db, dy, y_, x_, params[0], act_);
  grads[0] += dw;
  if (use_bias_)
    grads[1] += db;
  if (record)
    record->output_grads = std::move(dz);
  return dx;
}

Matrix Dense::backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) {
  Matrix dz, dx;
  ops::dense_backward_input(dz, dx, dy, y_, params[0], act_);
  if (record)
    record->output_grads = std::move(dz);
  return dx;
}

void Dense::backward_without_input_grad(const Matrix *, const Matrix &dy, Matrix *grads,
                                        TagRecord *record) {
  detail::affine_parameter_grads(dy, y_, x_, act_, grads, use_bias_, record);
}

void Dense::backward_records_without_input_grad(const Matrix *, const Matrix &dy,
                                                TagRecord *record) {
  if (record)
    record->output_grads = detail::times_derivative(dy, y_, act_);
}

Matrix Dense::jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) {
  return detail::affine_jvp(
      dx, [&]() -> const Matrix & { return dx; }, x_, params[0], tangents[0],
      use_bias_ ? &tangents[1] : nullptr, y_, act_);
}

} // namespace hkfac::kfac
