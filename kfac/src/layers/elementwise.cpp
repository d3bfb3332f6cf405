// The parameter-free activation layer, ScaleAndShift and Bias.
#include "activation_math.h"
#include "checked_size.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"

namespace hkfac::kfac {
namespace {

void expect_width(const char *layer, int expected, int got) {
  if (expected != got) {
    throw Error(std::string(layer) + ": input width " + std::to_string(got) +
                " does not match dim " + std::to_string(expected));
  }
}

} // namespace

Matrix ActivationLayer::forward(const Matrix *, const Matrix &x, TagRecord *) {
  y_ = detail::apply_activation(x, act_);
  return y_;
}

Matrix ActivationLayer::backward(const Matrix *, const Matrix &dy, Matrix *, TagRecord *) {
  return detail::times_derivative(dy, y_, act_);
}

Matrix ActivationLayer::jvp(const Matrix *, const Matrix *, const Matrix &dx) {
  return detail::times_derivative(dx, y_, act_);
}

ScaleAndShift::ScaleAndShift(int dim, bool has_scale, bool has_shift)
    : dim_(dim), has_scale_(has_scale), has_shift_(has_shift) {
  if (dim < 1)
    throw Error("ScaleAndShift: dim must be >= 1, got " + std::to_string(dim));
  if (!has_scale && !has_shift) {
    throw Error("ScaleAndShift: at least one of has_scale and has_shift must be true");
  }
  detail::checked_int(static_cast<long long>(dim) * ((has_scale ? 1 : 0) + (has_shift ? 1 : 0)),
                      "ScaleAndShift(" + std::to_string(dim) + ")", "the parameter count");
}

std::vector<ParamShape> ScaleAndShift::param_shapes() const {
  std::vector<ParamShape> s;
  if (has_scale_)
    s.push_back({1, dim_, "scale"});
  if (has_shift_)
    s.push_back({1, dim_, "shift"});
  return s;
}

int ScaleAndShift::output_dim(int input_dim) const {
  expect_width("ScaleAndShift", dim_, input_dim);
  return dim_;
}

void ScaleAndShift::initialize(Matrix *params, std::mt19937 &) const {
  int i = 0;
  if (has_scale_)
    params[i++] = Matrix::Ones(1, dim_);
  if (has_shift_)
    params[i] = Matrix::Zero(1, dim_);
}

std::optional<LayerTag> ScaleAndShift::tag() const {
  LayerTag t;
  t.kind = TagKind::scale_and_shift;
  t.params = has_scale_ && has_shift_ ? std::vector<int>{0, 1} : std::vector<int>{0};
  t.has_scale = has_scale_;
  t.has_shift = has_shift_;
  t.input_dim = dim_;
  t.output_dim = dim_;
  return t;
}

Matrix ScaleAndShift::forward(const Matrix *params, const Matrix &x, TagRecord *record) {
  x_ = x;
  if (record)
    record->inputs = x;
  Matrix y = x;
  int i = 0;
  if (has_scale_)
    y = y.array().rowwise() * params[i++].row(0).array();
  if (has_shift_)
    y.rowwise() += params[i].row(0);
  return y;
}

Matrix ScaleAndShift::backward(const Matrix *params, const Matrix &dy, Matrix *grads,
                               TagRecord *record) {
  if (record)
    record->output_grads = dy;
  Matrix dx = dy;
  int i = 0;
  if (has_scale_) {
    grads[i] += x_.cwiseProduct(dy).colwise().sum();
    dx = dy.array().rowwise() * params[i].row(0).array();
    ++i;
  }
  if (has_shift_)
    grads[i] += dy.colwise().sum();
  return dx;
}

Matrix ScaleAndShift::backward_records(const Matrix *params, const Matrix &dy, TagRecord *record) {
  if (record)
    record->output_grads = dy;
  if (!has_scale_)
    return dy;
  return dy.array().rowwise() * params[0].row(0).array();
}

Matrix ScaleAndShift::jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) {
  Matrix dy = dx;
  int i = 0;
  if (has_scale_) {
    dy = (dx.array().rowwise() * params[i].row(0).array()) +
         (x_.array().rowwise() * tangents[i].row(0).array());
    ++i;
  }
  if (has_shift_)
    dy.rowwise() += tangents[i].row(0);
  return dy;
}

Bias::Bias(int dim) : dim_(dim) {
  if (dim < 1)
    throw Error("Bias: dim must be >= 1, got " + std::to_string(dim));
}

std::vector<ParamShape> Bias::param_shapes() const { return {{1, dim_, "b"}}; }

int Bias::output_dim(int input_dim) const {
  expect_width("Bias", dim_, input_dim);
  return dim_;
}

std::optional<LayerTag> Bias::tag() const {
  LayerTag t;
  t.kind = TagKind::generic;
  t.params = {0};
  t.input_dim = dim_;
  t.output_dim = dim_;
  return t;
}

Matrix Bias::forward(const Matrix *params, const Matrix &x, TagRecord *) {
  Matrix y = x;
  y.rowwise() += params[0].row(0);
  return y;
}

Matrix Bias::backward(const Matrix *, const Matrix &dy, Matrix *grads, TagRecord *record) {
  // The per-example gradient of b is dy itself.
  if (record)
    record->output_grads = dy;
  grads[0] += dy.colwise().sum();
  return dy;
}

Matrix Bias::backward_records(const Matrix *, const Matrix &dy, TagRecord *record) {
  if (record)
    record->output_grads = dy;
  return dy;
}

Matrix Bias::jvp(const Matrix *, const Matrix *tangents, const Matrix &dx) {
  Matrix dy = dx;
  dy.rowwise() += tangents[0].row(0);
  return dy;
}

} // namespace hkfac::kfac
