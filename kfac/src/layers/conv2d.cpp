// Conv2D as a dense layer over im2col patches, on the generated dense kernels.
#include <cmath>

#include "affine_jvp.h"
#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"
#include "ops.h"

namespace hkfac::kfac {

Conv2D::Conv2D(int height, int width, int in_channels, int out_channels, int kernel_size,
               int stride, int padding, Activation act, bool use_bias)
    : h_(height), w_(width), c_(in_channels), out_c_(out_channels), k_(kernel_size),
      stride_(stride), pad_(padding), act_(act), use_bias_(use_bias) {
  if (height < 1 || width < 1 || in_channels < 1 || out_channels < 1 || kernel_size < 1 ||
      stride < 1 || padding < 0) {
    throw Error("Conv2D: sizes, kernel_size and stride must be >= 1 and padding >= 0");
  }
  out_h_ = (h_ + 2 * pad_ - k_) / stride_ + 1;
  out_w_ = (w_ + 2 * pad_ - k_) / stride_ + 1;
  if (h_ + 2 * pad_ < k_ || w_ + 2 * pad_ < k_) {
    throw Error("Conv2D: kernel_size " + std::to_string(k_) + " exceeds the padded image " +
                std::to_string(h_ + 2 * pad_) + " x " + std::to_string(w_ + 2 * pad_));
  }
}

std::vector<ParamShape> Conv2D::param_shapes() const {
  std::vector<ParamShape> s{{k_ * k_ * c_, out_c_, "kernel"}};
  if (use_bias_)
    s.push_back({1, out_c_, "b"});
  return s;
}

int Conv2D::output_dim(int input_dim) const {
  if (input_dim != h_ * w_ * c_) {
    throw Error("Conv2D: input width " + std::to_string(input_dim) + " is not height·width·" +
                "channels = " + std::to_string(h_ * w_ * c_));
  }
  return out_h_ * out_w_ * out_c_;
}

void Conv2D::initialize(Matrix *params, std::mt19937 &rng) const {
  // Glorot uniform with the receptive field in both fans.
  const float fan_in = static_cast<float>(k_ * k_ * c_),
              fan_out = static_cast<float>(k_ * k_ * out_c_);
  const float limit = std::sqrt(6.0f / (fan_in + fan_out));
  std::uniform_real_distribution<float> u(-limit, limit);
  params[0] = Matrix::NullaryExpr(k_ * k_ * c_, out_c_, [&]() { return u(rng); });
  if (use_bias_)
    params[1] = Matrix::Zero(1, out_c_);
}

std::optional<LayerTag> Conv2D::tag() const {
  LayerTag t;
  t.kind = TagKind::conv2d;
  t.params = use_bias_ ? std::vector<int>{0, 1} : std::vector<int>{0};
  t.has_bias = use_bias_;
  t.input_dim = k_ * k_ * c_;
  t.output_dim = out_c_;
  t.locations = out_h_ * out_w_;
  return t;
}

Matrix Conv2D::im2col(const Matrix &x) const {
  const Eigen::Index B = x.rows(), T = out_h_ * out_w_;
  Matrix p = Matrix::Zero(B * T, k_ * k_ * c_);
  for (Eigen::Index i = 0; i < B; ++i) {
    for (int oh = 0; oh < out_h_; ++oh) {
      for (int ow = 0; ow < out_w_; ++ow) {
        float *row = p.row(i * T + oh * out_w_ + ow).data();
        for (int kh = 0; kh < k_; ++kh) {
          const int ih = oh * stride_ - pad_ + kh;
          if (ih < 0 || ih >= h_)
            continue;
          for (int kw = 0; kw < k_; ++kw) {
            const int iw = ow * stride_ - pad_ + kw;
            if (iw < 0 || iw >= w_)
              continue;
            const float *src = x.row(i).data() + (ih * w_ + iw) * c_;
            std::copy(src, src + c_, row + (kh * k_ + kw) * c_);
          }
        }
      }
    }
  }
  return p;
}

Matrix Conv2D::col2im(const Matrix &cols) const {
  const Eigen::Index T = out_h_ * out_w_, B = cols.rows() / T;
  Matrix x = Matrix::Zero(B, h_ * w_ * c_);
  for (Eigen::Index i = 0; i < B; ++i) {
    for (int oh = 0; oh < out_h_; ++oh) {
      for (int ow = 0; ow < out_w_; ++ow) {
        const float *row = cols.row(i * T + oh * out_w_ + ow).data();
        for (int kh = 0; kh < k_; ++kh) {
          const int ih = oh * stride_ - pad_ + kh;
          if (ih < 0 || ih >= h_)
            continue;
          for (int kw = 0; kw < k_; ++kw) {
            const int iw = ow * stride_ - pad_ + kw;
            if (iw < 0 || iw >= w_)
              continue;
            float *dst = x.row(i).data() + (ih * w_ + iw) * c_;
            for (int c = 0; c < c_; ++c)
              dst[c] += row[(kh * k_ + kw) * c_ + c];
          }
        }
      }
    }
  }
  return x;
}

namespace {
// (B·T) x C_out <-> B x (T·C_out): the same row-major storage read two ways.
Matrix reshaped(const Matrix &m, Eigen::Index rows, Eigen::Index cols) {
  return Eigen::Map<const Matrix>(m.data(), rows, cols);
}
} // namespace

Matrix Conv2D::forward(const Matrix *params, const Matrix &x, TagRecord *record) {
  patches_ = im2col(x);
  ops::dense_forward(y_, patches_, params[0], use_bias_ ? &params[1] : nullptr, act_);
  if (record)
    record->inputs = patches_;
  return reshaped(y_, x.rows(), static_cast<Eigen::Index>(out_h_) * out_w_ * out_c_);
}

Matrix Conv2D::backward(const Matrix *params, const Matrix &dy, Matrix *grads, TagRecord *record) {
  const Matrix dy_rows = reshaped(dy, y_.rows(), out_c_);
  Matrix dz, dpatches, dw, db;
  ops::dense_backward(dz, dpatches, dw, db, dy_rows, y_, patches_, params[0], act_);
  grads[0] += dw;
  if (use_bias_)
    grads[1] += db;
  if (record)
    record->output_grads = std::move(dz);
  return col2im(dpatches);
}

Matrix Conv2D::jvp(const Matrix *params, const Matrix *tangents, const Matrix &dx) {
  const Matrix ds = detail::affine_jvp(
      dx, [&] { return im2col(dx); }, patches_, params[0], tangents[0],
      use_bias_ ? &tangents[1] : nullptr, y_, act_);
  return reshaped(ds, dx.rows(), static_cast<Eigen::Index>(out_h_) * out_w_ * out_c_);
}

} // namespace hkfac::kfac
