// Double-precision brute-force references for the K-FAC tests: a reference forward pass of the
// layer library's networks, central finite differences, and output-space curvatures.
#pragma once

#include <Eigen/Dense>
#include <functional>
#include <gtest/gtest.h>
#include <random>
#include <string>
#include <vector>

#include "hkfac/error.h"
#include "hkfac/kfac/layers.h"

namespace hkfac::kfac::testref {

using Eigen::MatrixXd;
using Eigen::VectorXd;

// A network description the reference evaluates independently of the library code.
struct RefLayer {
  enum Type { dense, activation, scale_and_shift, bias, conv } type;
  Activation act = Activation::identity;
  int in = 0, out = 0; // conv: in = h·w·c, out = out_h·out_w·out_c
  bool use_bias = true;
  // conv geometry (NHWC rows, square kernel, zero padding)
  int h = 0, w = 0, c = 0, oc = 0, k = 0, stride = 1, pad = 0;

  static RefLayer conv2d(int h, int w, int c, int oc, int k, int stride, int pad, Activation act) {
    RefLayer l{conv, act};
    l.h = h, l.w = w, l.c = c, l.oc = oc, l.k = k, l.stride = stride, l.pad = pad;
    l.in = h * w * c;
    l.out = l.out_h() * l.out_w() * oc;
    return l;
  }
  int out_h() const { return (h + 2 * pad - k) / stride + 1; }
  int out_w() const { return (w + 2 * pad - k) / stride + 1; }
};

// Direct convolution (no im2col), kernel indexed [(kh·k + kw)·c + ci][o].
inline MatrixXd conv_d(const RefLayer &l, const MatrixXd &x, const MatrixXd &kernel,
                       const MatrixXd *bias) {
  MatrixXd y = MatrixXd::Zero(x.rows(), l.out);
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (int oh = 0; oh < l.out_h(); ++oh) {
      for (int ow = 0; ow < l.out_w(); ++ow) {
        for (int o = 0; o < l.oc; ++o) {
          double acc = bias ? (*bias)(0, o) : 0.0;
          for (int kh = 0; kh < l.k; ++kh) {
            for (int kw = 0; kw < l.k; ++kw) {
              const int ih = oh * l.stride - l.pad + kh, iw = ow * l.stride - l.pad + kw;
              if (ih < 0 || ih >= l.h || iw < 0 || iw >= l.w)
                continue;
              for (int ci = 0; ci < l.c; ++ci) {
                acc += x(i, (ih * l.w + iw) * l.c + ci) * kernel((kh * l.k + kw) * l.c + ci, o);
              }
            }
          }
          y(i, (oh * l.out_w() + ow) * l.oc + o) = acc;
        }
      }
    }
  }
  return y;
}

inline MatrixXd act_d(const MatrixXd &z, Activation a) {
  switch (a) {
  case Activation::tanh:
    return z.array().tanh().matrix();
  case Activation::relu:
    return z.cwiseMax(0.0);
  case Activation::sigmoid:
    return (1.0 / (1.0 + (-z.array()).exp())).matrix();
  default:
    return z;
  }
}

// Builds the library model for a description.
inline Sequential build(const std::vector<RefLayer> &net, int input_dim) {
  Sequential m(input_dim);
  for (const RefLayer &l : net) {
    switch (l.type) {
    case RefLayer::dense:
      m.add<Dense>(l.in, l.out, l.act, l.use_bias);
      break;
    case RefLayer::activation:
      m.add<ActivationLayer>(l.act);
      break;
    case RefLayer::scale_and_shift:
      m.add<ScaleAndShift>(l.out);
      break;
    case RefLayer::bias:
      m.add<Bias>(l.out);
      break;
    case RefLayer::conv:
      m.add<Conv2D>(l.h, l.w, l.c, l.oc, l.k, l.stride, l.pad, l.act, l.use_bias);
      break;
    }
  }
  return m;
}

// Forward in double. `offsets[k]`, when given, is added to the k-th dense or conv layer's
// pre-activation (finite differences against it give Jacobians with respect to it).
inline MatrixXd forward(const std::vector<RefLayer> &net, const std::vector<MatrixXd> &p,
                        const MatrixXd &x, const std::vector<MatrixXd> *offsets = nullptr) {
  MatrixXd h = x;
  size_t pi = 0, dense_k = 0;
  for (const RefLayer &l : net) {
    switch (l.type) {
    case RefLayer::dense: {
      MatrixXd z = h * p[pi++];
      if (l.use_bias)
        z.rowwise() += p[pi++].row(0);
      if (offsets)
        z += (*offsets)[dense_k];
      ++dense_k;
      h = act_d(z, l.act);
      break;
    }
    case RefLayer::activation:
      h = act_d(h, l.act);
      break;
    case RefLayer::scale_and_shift: {
      h = h.array().rowwise() * p[pi++].row(0).array();
      h.rowwise() += p[pi++].row(0);
      break;
    }
    case RefLayer::bias:
      h.rowwise() += p[pi++].row(0);
      break;
    case RefLayer::conv: {
      const MatrixXd &kernel = p[pi++];
      const MatrixXd *b = l.use_bias ? &p[pi++] : nullptr;
      MatrixXd z = conv_d(l, h, kernel, b);
      if (offsets)
        z += (*offsets)[dense_k];
      ++dense_k;
      h = act_d(z, l.act);
      break;
    }
    }
  }
  return h;
}

inline std::vector<MatrixXd> to_double(const Params &p) {
  std::vector<MatrixXd> out;
  for (const Matrix &m : p)
    out.push_back(m.cast<double>());
  return out;
}

inline size_t total_size(const std::vector<MatrixXd> &p) {
  size_t n = 0;
  for (const MatrixXd &m : p)
    n += m.size();
  return n;
}

// Flattened-parameter access in the library's order (tensor by tensor, row-major).
inline double &flat_at(std::vector<MatrixXd> &p, size_t k) {
  for (MatrixXd &m : p) {
    if (k < static_cast<size_t>(m.size()))
      return m(k / m.cols(), k % m.cols());
    k -= m.size();
  }
  throw std::out_of_range("flat_at");
}

// Central-difference gradient of a scalar function of the flattened parameters.
inline VectorXd fd_gradient(const std::function<double(const std::vector<MatrixXd> &)> &f,
                            std::vector<MatrixXd> p, double h = 1e-6) {
  VectorXd g(total_size(p));
  for (Eigen::Index k = 0; k < g.size(); ++k) {
    double &v = flat_at(p, k);
    const double v0 = v;
    v = v0 + h;
    const double fp = f(p);
    v = v0 - h;
    const double fm = f(p);
    v = v0;
    g(k) = (fp - fm) / (2 * h);
  }
  return g;
}

// Per-example Jacobian d out_i / d θ (K x P) of the network by central differences.
inline std::vector<MatrixXd> fd_jacobians(const std::vector<RefLayer> &net, std::vector<MatrixXd> p,
                                          const MatrixXd &x, double h = 1e-6) {
  const size_t P = total_size(p);
  const MatrixXd y0 = forward(net, p, x);
  std::vector<MatrixXd> J(x.rows(), MatrixXd(y0.cols(), P));
  for (size_t k = 0; k < P; ++k) {
    double &v = flat_at(p, k);
    const double v0 = v;
    v = v0 + h;
    const MatrixXd yp = forward(net, p, x);
    v = v0 - h;
    const MatrixXd ym = forward(net, p, x);
    v = v0;
    for (Eigen::Index i = 0; i < x.rows(); ++i)
      J[i].col(k) = (yp.row(i) - ym.row(i)) / (2 * h);
  }
  return J;
}

// Per-example Jacobian d out_i / d s_i (K x d_out) with respect to the pre-activation of the k-th
// dense or conv layer (for conv, d_out = T·out_c with location t in columns [t·oc, (t+1)·oc)).
inline std::vector<MatrixXd> fd_preactivation_jacobians(const std::vector<RefLayer> &net,
                                                        const std::vector<MatrixXd> &p,
                                                        const MatrixXd &x, size_t dense_k,
                                                        double h = 1e-6) {
  std::vector<MatrixXd> offsets;
  for (const RefLayer &l : net) {
    if (l.type == RefLayer::dense || l.type == RefLayer::conv) {
      offsets.push_back(MatrixXd::Zero(x.rows(), l.out));
    }
  }
  const Eigen::Index dout = offsets[dense_k].cols();
  const Eigen::Index K = forward(net, p, x).cols();
  std::vector<MatrixXd> J(x.rows(), MatrixXd(K, dout));
  for (Eigen::Index i = 0; i < x.rows(); ++i) {
    for (Eigen::Index c = 0; c < dout; ++c) {
      offsets[dense_k](i, c) = h;
      const MatrixXd yp = forward(net, p, x, &offsets);
      offsets[dense_k](i, c) = -h;
      const MatrixXd ym = forward(net, p, x, &offsets);
      offsets[dense_k](i, c) = 0;
      J[i].col(c) = (yp.row(i) - ym.row(i)).transpose() / (2 * h);
    }
  }
  return J;
}

// Output-space Fisher of each loss kind in closed form (w = weight).
inline MatrixXd normal_fisher(int K, double variance, double w) {
  return MatrixXd::Identity(K, K) * (w / variance);
}
inline MatrixXd categorical_fisher(const VectorXd &z, double w) {
  VectorXd p = (z.array() - z.maxCoeff()).exp();
  p /= p.sum();
  return w * (MatrixXd(p.asDiagonal()) - p * p.transpose());
}
inline MatrixXd bernoulli_fisher(const VectorXd &z, double w) {
  const VectorXd p = (1.0 / (1.0 + (-z.array()).exp())).matrix();
  return w * MatrixXd((p.array() * (1 - p.array())).matrix().asDiagonal());
}

// Hessian of a scalar function of a vector by central differences of central differences.
inline MatrixXd fd_hessian(const std::function<double(const VectorXd &)> &f, const VectorXd &z,
                           double h = 1e-4) {
  const Eigen::Index n = z.size();
  MatrixXd H(n, n);
  for (Eigen::Index a = 0; a < n; ++a) {
    for (Eigen::Index b = 0; b < n; ++b) {
      VectorXd pp = z, pm = z, mp = z, mm = z;
      pp(a) += h, pp(b) += h;
      pm(a) += h, pm(b) -= h;
      mp(a) -= h, mp(b) += h;
      mm(a) -= h, mm(b) -= h;
      H(a, b) = (f(pp) - f(pm) - f(mp) + f(mm)) / (4 * h * h);
    }
  }
  return H;
}

// max |a - b| / max |b|.
inline double rel_err(const MatrixXd &a, const MatrixXd &b) {
  return (a - b).cwiseAbs().maxCoeff() / std::max(1e-30, b.cwiseAbs().maxCoeff());
}

inline Matrix random_matrix(int rows, int cols, std::mt19937 &rng, float lo = -1.0f,
                            float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  return Matrix::NullaryExpr(rows, cols, [&]() { return u(rng); });
}

// The message of the hkfac::Error `f` throws ("" when it does not throw).
inline std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

// Expects `f` to throw an hkfac::Error whose message contains every one of `needles`.
inline void expect_error_names(const std::function<void()> &f,
                               const std::vector<std::string> &needles) {
  const std::string e = error_of(f);
  ASSERT_FALSE(e.empty()) << "no error";
  for (const std::string &n : needles)
    EXPECT_NE(e.find(n), std::string::npos) << "'" << n << "' not in '" << e << "'";
}

} // namespace hkfac::kfac::testref
