// A LibTorch layer's K-FAC block: statistics on hkfac's covariance kernels, damped inverses,
// products on the Kronecker-precondition and gemm kernels.
#include "layer_state.h"

#include <Eigen/Cholesky>
#include <Eigen/Eigenvalues>
#include <cmath>

#include "hkfac/error.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/gemm.h"
#include "hkfac/kernels/patch_covariance.h"
#include "hkfac/kernels/precondition.h"
#include "hkfac/kfac/blocks/dense_two_kronecker_factored.h"
#include "tensor_buffer.h"
#include "torch_threads.h"

namespace hkfac::kfac_torch::detail {
namespace {

// The tensors are CPU tensors (Debian's LibTorch is CPU-only), so the kernels run on the CPU
// whatever HKFAC_DEVICE says.
constexpr Device kCpu = Device::cpu;

using RowMajorD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

Eigen::MatrixXd to_eigen(const torch::Tensor &t) {
  const torch::Tensor d = t.to(torch::kDouble).contiguous();
  return Eigen::Map<const RowMajorD>(d.data_ptr<double>(), d.size(0), d.size(1));
}

torch::Tensor to_tensor(const Eigen::MatrixXd &m) {
  torch::Tensor t = torch::empty({m.rows(), m.cols()}, torch::kFloat);
  Eigen::Map<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
      t.data_ptr<float>(), m.rows(), m.cols()) = m.cast<float>();
  return t;
}

torch::Tensor vector_to_tensor(const Eigen::VectorXd &v) {
  torch::Tensor t = torch::empty({v.size()}, torch::kFloat);
  Eigen::Map<Eigen::VectorXf>(t.data_ptr<float>(), v.size()) = v.cast<float>();
  return t;
}

// m⁻¹ for symmetric positive definite m, by Cholesky in double as hkfac::kfac's blocks do.
torch::Tensor spd_inverse(const Eigen::MatrixXd &m, const std::string &what) {
  Eigen::LLT<Eigen::MatrixXd> llt(m);
  if (llt.info() != Eigen::Success)
    throw Error(what + " is not positive definite (damping too small?)");
  return to_tensor(llt.solve(Eigen::MatrixXd::Identity(m.rows(), m.cols())));
}

// Q and the eigenvalues clipped at 0 (a factor is PSD; rounding can dip below).
void eigen_decompose(const Eigen::MatrixXd &m, torch::Tensor &q, torch::Tensor &lambda,
                     const std::string &what) {
  if (!m.allFinite())
    throw Error(what + " is not finite");
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> e(m);
  if (e.info() != Eigen::Success)
    throw Error(what + ": eigendecomposition did not converge");
  q = to_tensor(e.eigenvectors());
  lambda = vector_to_tensor(e.eigenvalues().cwiseMax(0.0));
}

// C = op(A)·op(B) on the gemm kernel; C must be allocated.
void gemm_into(torch::Tensor &c, const torch::Tensor &a, bool ta, const torch::Tensor &b, bool tb) {
  KernelsOnTorchThreads pool;
  Buffer<float> cb = buffer_of(c, "gemm output");
  kernels::gemm(cb, buffer_of(a, "gemm left"),
                ta ? kernels::Transpose::yes : kernels::Transpose::no, buffer_of(b, "gemm right"),
                tb ? kernels::Transpose::yes : kernels::Transpose::no, 1.0f, 0.0f, kCpu);
}

// The multiplier of a captured output gradient: the batch size under a mean-reduced loss.
double gradient_scale(const torch::Tensor &grad, LossReduction reduction, int64_t unbatched_dims) {
  if (reduction == LossReduction::sum || grad.dim() <= unbatched_dims)
    return 1.0;
  return static_cast<double>(grad.size(0));
}

} // namespace

void LayerState::reset_statistics() {
  a_acc = kind == LayerKind::embedding ? torch::zeros({a_dim}, torch::kFloat)
                                       : torch::zeros({a_dim, a_dim}, torch::kFloat);
  g_acc = torch::zeros({g_dim, g_dim}, torch::kFloat);
  a_rows = g_rows = 0;
}

void LayerState::accumulate(const LayerCall &call, const torch::Tensor &output_grad) {
  torch::NoGradGuard no_grad;
  KernelsOnTorchThreads pool;
  torch::Tensor x, dy;
  double scale = 1.0;
  int64_t a_rows_added = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (kind == LayerKind::linear) {
    x = contiguous_float(call.input.reshape({-1, in}));
    dy = contiguous_float(output_grad.reshape({-1, out}));
    scale = gradient_scale(output_grad, reduction, 1);
    if (x.size(0) == 0)
      return;
    Buffer<float> a = buffer_of(a_acc, "A");
    kernels::covariance_update(a, buffer_of(x, "the layer's input"), 1.0f, 1.0f, has_bias, kCpu);
    a_rows_added = x.size(0);
  } else if (kind == LayerKind::conv2d) {
    const torch::Tensor images4 = call.input.dim() == 3 ? call.input.unsqueeze(0) : call.input;
    kernels::PatchGeometry g;
    g.channels = static_cast<int>(images4.size(1));
    g.height = static_cast<int>(images4.size(2));
    g.width = static_cast<int>(images4.size(3));
    g.kernel_h = static_cast<int>(kernel_h);
    g.kernel_w = static_cast<int>(kernel_w);
    g.stride_h = static_cast<int>(call.stride_h);
    g.stride_w = static_cast<int>(call.stride_w);
    g.pad_h = static_cast<int>(call.pad_h);
    g.pad_w = static_cast<int>(call.pad_w);
    const int64_t batch = images4.size(0);
    g.validate("kfac_torch: conv2d layer '" + name + "'", batch);
    // The kernel reads NHWC rows; LibTorch's NCHW needs this one copy.
    const torch::Tensor images =
        contiguous_float(images4.permute({0, 2, 3, 1})).reshape({batch, g.image_size()});
    const torch::Tensor grad4 = output_grad.dim() == 3 ? output_grad.unsqueeze(0) : output_grad;
    if (grad4.size(2) != g.out_h() || grad4.size(3) != g.out_w()) {
      throw Error("kfac_torch: conv2d layer '" + name + "': output gradient is " +
                  std::to_string(grad4.size(2)) + " x " + std::to_string(grad4.size(3)) +
                  ", its geometry gives " + std::to_string(g.out_h()) + " x " +
                  std::to_string(g.out_w()));
    }
    dy = contiguous_float(grad4.permute({0, 2, 3, 1})).reshape({-1, out});
    scale = gradient_scale(output_grad, reduction, 3);
    Buffer<float> a = buffer_of(a_acc, "A");
    kernels::patch_covariance_update(a, buffer_of(images, "the layer's images"), g, 1.0f, 1.0f,
                                     has_bias, kCpu);
    a_rows_added = batch; // A sums over an example's locations, averages over examples
  } else {
    torch::Tensor ids = call.input.reshape({-1}).to(torch::kLong);
    dy = output_grad.reshape({-1, out});
    if (padding_idx) {
      // The padding row gets no gradient: its positions take no part in either factor.
      const torch::Tensor keep = ids != *padding_idx;
      ids = ids.masked_select(keep);
      dy = dy.index({keep});
    }
    dy = contiguous_float(dy);
    scale = gradient_scale(output_grad, reduction, 1);
    if (ids.numel() == 0)
      return;
    a_acc.index_add_(0, ids, torch::ones({ids.numel()}, torch::kFloat));
    a_rows_added = ids.numel();
  }
  if (dy.size(0) == 0)
    return;
  Buffer<float> gb = buffer_of(g_acc, "G");
  kernels::covariance_update(gb, buffer_of(dy, "the output gradient"), 1.0f,
                             static_cast<float>(scale * scale), false, kCpu);
  a_rows += a_rows_added;
  g_rows += dy.size(0);
}

bool LayerState::fold(double decay) {
  std::lock_guard<std::mutex> lock(mutex);
  if (a_rows == 0 || g_rows == 0) {
    reset_statistics();
    return false;
  }
  torch::NoGradGuard no_grad;
  // w <- decay·w + 1 and S <- decay·S + batch statistic: the first update is the statistic itself.
  ema_weight = decay * ema_weight + 1.0;
  a_sum.mul_(decay).add_(a_acc, 1.0 / static_cast<double>(a_rows));
  g_sum.mul_(decay).add_(g_acc, 1.0 / static_cast<double>(g_rows));
  reset_statistics();
  return true;
}

torch::Tensor LayerState::factor_a() const {
  return ema_weight > 0 ? a_sum / ema_weight : torch::Tensor();
}
torch::Tensor LayerState::factor_g() const {
  return ema_weight > 0 ? g_sum / ema_weight : torch::Tensor();
}

void LayerState::invert(double damping, bool exact) {
  if (ema_weight <= 0)
    return;
  const std::string what = "kfac_torch: layer '" + name + "': ";
  const Eigen::MatrixXd G = to_eigen(factor_g());
  if (kind != LayerKind::embedding) {
    Eigen::MatrixXd A = to_eigen(factor_a());
    if (!A.allFinite() || !G.allFinite())
      throw Error(what + "factor A or G is not finite");
    if (exact) {
      eigen_decompose(A, q_a, lambda_a, what + "factor A");
      eigen_decompose(G, q_g, lambda_g, what + "factor G");
    } else {
      kfac::DampedFactors f = kfac::pi_adjusted_damped_factors(std::move(A), G, damping);
      a_inv = spd_inverse(f.A, what + "damped factor A");
      g_inv = spd_inverse(f.G, what + "damped factor G");
    }
    have_inverse = true;
    return;
  }
  // Embedding: A = diag(a). The same pi-adjusted cases as hkfac::kfac's dense factors, with A's
  // trace the sum of its diagonal.
  const torch::Tensor a_t = factor_a().to(torch::kDouble).contiguous();
  Eigen::VectorXd a = Eigen::Map<const Eigen::VectorXd>(a_t.data_ptr<double>(), a_t.size(0));
  if (!a.allFinite() || !G.allFinite())
    throw Error(what + "factor A or G is not finite");
  if (exact) {
    lambda_a = vector_to_tensor(a.cwiseMax(0.0));
    eigen_decompose(G, q_g, lambda_g, what + "factor G");
    have_inverse = true;
    return;
  }
  const double da = static_cast<double>(a.size()), dg = static_cast<double>(G.rows());
  const double tr_a = a.sum(), tr_g = G.trace(), sqrt_gamma = std::sqrt(damping);
  Eigen::MatrixXd g_d = G;
  if (!(tr_a * tr_g > 0.0)) {
    a.setConstant(sqrt_gamma);
    g_d.setIdentity();
    g_d *= sqrt_gamma;
  } else if (a.size() == 1 && G.rows() == 1) {
    a(0) = a(0) * G(0, 0) + damping;
    g_d(0, 0) = 1.0;
  } else if (a.size() == 1) {
    g_d.diagonal().array() += damping / a(0);
  } else if (G.rows() == 1) {
    a.array() += damping / G(0, 0);
  } else {
    const double pi = std::sqrt((tr_a / da) / (tr_g / dg));
    a.array() += pi * sqrt_gamma;
    g_d.diagonal().array() += sqrt_gamma / pi;
  }
  if (!(a.array() > 0.0).all())
    throw Error(what + "damped factor A has a zero entry (damping too small?)");
  a_inv = vector_to_tensor(a.cwiseInverse());
  g_inv = spd_inverse(g_d, what + "damped factor G");
  have_inverse = true;
}

std::vector<torch::Tensor *> LayerState::inverse_tensors(bool exact, bool allocate) {
  const bool emb = kind == LayerKind::embedding;
  std::vector<std::pair<torch::Tensor *, std::vector<int64_t>>> parts;
  if (exact) {
    if (!emb)
      parts.push_back({&q_a, {a_dim, a_dim}});
    parts.push_back({&lambda_a, {a_dim}});
    parts.push_back({&q_g, {g_dim, g_dim}});
    parts.push_back({&lambda_g, {g_dim}});
  } else {
    parts.push_back(
        {&a_inv, emb ? std::vector<int64_t>{a_dim} : std::vector<int64_t>{a_dim, a_dim}});
    parts.push_back({&g_inv, {g_dim, g_dim}});
  }
  std::vector<torch::Tensor *> result;
  for (auto &[t, sizes] : parts) {
    if (allocate)
      *t = torch::empty(sizes, torch::kFloat);
    result.push_back(t);
  }
  return result;
}

torch::Tensor LayerState::stack(const std::vector<torch::Tensor> &grads) const {
  const torch::Tensor &gw = grads.at(0);
  torch::Tensor w;
  if (kind == LayerKind::conv2d) {
    // (out, C, kh, kw) -> (out, kh·kw·C): the patch kernel's column order.
    w = gw.permute({0, 2, 3, 1}).reshape({out, -1});
  } else {
    w = gw.reshape({gw.size(0), -1});
  }
  if (has_bias)
    w = torch::cat({w, grads.at(1).reshape({out, 1})}, 1);
  return contiguous_float(w);
}

std::vector<torch::Tensor> LayerState::unstack(const torch::Tensor &u) const {
  std::vector<torch::Tensor> result;
  const int64_t cols = u.size(1) - (has_bias ? 1 : 0);
  torch::Tensor w = u.narrow(1, 0, cols);
  if (kind == LayerKind::conv2d)
    w = w.reshape({out, kernel_h, kernel_w, in}).permute({0, 3, 1, 2});
  result.push_back(w.contiguous().view(weight.sizes()));
  if (has_bias)
    result.push_back(u.select(1, cols).contiguous().view(bias.sizes()));
  return result;
}

std::vector<torch::Tensor> LayerState::multiply(const std::vector<torch::Tensor> &grads, int exp,
                                                double damping, bool exact) const {
  torch::NoGradGuard no_grad;
  KernelsOnTorchThreads pool;
  if (exp != -1 && exp != 1)
    throw Error("kfac_torch: multiply: 'exp' must be -1 or +1, got " + std::to_string(exp));
  const torch::Tensor v = stack(grads);
  torch::Tensor u = torch::empty_like(v);
  Buffer<float> ub = buffer_of(u, "preconditioned gradient");
  const float gamma = static_cast<float>(damping);
  if (kind != LayerKind::embedding) {
    if (exp == 1) {
      // (A ⊗ G + γI) v = G V A + γ V in this orientation, from the current estimate.
      const torch::Tensor a = factor_a().contiguous(), g = factor_g().contiguous();
      kernels::kron_precondition(ub, buffer_of(g, "G"), buffer_of(v, "gradient"), buffer_of(a, "A"),
                                 kCpu);
      u.add_(v, damping);
    } else if (exact) {
      kernels::kron_precondition_eigen(ub, buffer_of(q_g, "Q_G"), buffer_of(lambda_g, "λ_G"),
                                       buffer_of(v, "gradient"), buffer_of(q_a, "Q_A"),
                                       buffer_of(lambda_a, "λ_A"), gamma, -1, kCpu);
    } else {
      kernels::kron_precondition(ub, buffer_of(g_inv, "G⁻¹"), buffer_of(v, "gradient"),
                                 buffer_of(a_inv, "A⁻¹"), kCpu);
    }
    return unstack(u);
  }
  // Embedding: rows of V are tokens, A = diag(a) scales them.
  if (exp == 1) {
    const torch::Tensor scaled = contiguous_float(v * factor_a().unsqueeze(1));
    gemm_into(u, scaled, false, factor_g().contiguous(), false);
    u.add_(v, damping);
  } else if (exact) {
    // [(V Q_G) ⊘ (a λ_Gᵀ + γ)] Q_Gᵀ: A's eigenvectors are the identity.
    torch::Tensor t = torch::empty_like(v);
    gemm_into(t, v, false, q_g, false);
    t.div_(lambda_a.unsqueeze(1) * lambda_g.unsqueeze(0) + damping);
    gemm_into(u, t, false, q_g, true);
  } else {
    const torch::Tensor scaled = contiguous_float(v * a_inv.unsqueeze(1));
    gemm_into(u, scaled, false, g_inv, false);
  }
  return unstack(u);
}

} // namespace hkfac::kfac_torch::detail
