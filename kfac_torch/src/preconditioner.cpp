// The K-FAC preconditioner of a LibTorch model: layer discovery, the step's phases, checkpoints.
#include "hkfac/kfac_torch/preconditioner.h"

#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <regex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "capture.h"
#include "data_parallel.h"
#include "hkfac/error.h"
#include "layer_state.h"

namespace hkfac::kfac_torch {

using detail::LayerState;

const char *layer_kind_name(LayerKind kind) {
  switch (kind) {
  case LayerKind::linear:
    return "linear";
  case LayerKind::conv2d:
    return "conv2d";
  case LayerKind::embedding:
    return "embedding";
  }
  return "unknown";
}

namespace {

bool matches_any(const std::string &name, const std::vector<std::string> &patterns) {
  for (const std::string &p : patterns) {
    try {
      if (std::regex_match(name, std::regex(p)))
        return true;
    } catch (const std::regex_error &e) {
      throw Error("kfac_torch: skip_layers: '" + p + "' is not a valid regular expression (" +
                  e.what() + ")");
    }
  }
  return false;
}

bool float_cpu(const torch::Tensor &t) {
  return !t.defined() ||
         (t.scalar_type() == torch::kFloat && t.device().is_cpu() && t.layout() == torch::kStrided);
}

// A known layer's block, or the reason it cannot have one (the empty string when it can).
std::string make_layer(const std::string &name, torch::nn::Module &m, LayerState &l) {
  l.name = name;
  if (auto *lin = m.as<torch::nn::LinearImpl>()) {
    l.kind = LayerKind::linear;
    l.weight = lin->weight;
    l.bias = lin->bias;
    l.in = lin->options.in_features();
    l.out = lin->options.out_features();
    l.has_bias = l.bias.defined();
    l.a_dim = l.in + (l.has_bias ? 1 : 0);
    l.g_dim = l.out;
  } else if (auto *conv = m.as<torch::nn::Conv2dImpl>()) {
    const auto &o = conv->options;
    if (o.groups() != 1)
      return "a grouped convolution (groups " + std::to_string(o.groups()) + ")";
    if ((*o.dilation())[0] != 1 || (*o.dilation())[1] != 1)
      return "a dilated convolution";
    l.kind = LayerKind::conv2d;
    l.weight = conv->weight;
    l.bias = conv->bias;
    l.in = o.in_channels();
    l.out = o.out_channels();
    l.kernel_h = (*o.kernel_size())[0];
    l.kernel_w = (*o.kernel_size())[1];
    if (c10::get_if<torch::enumtype::kSame>(&o.padding()) &&
        (l.kernel_h % 2 == 0 || l.kernel_w % 2 == 0)) {
      return "'same' padding of an even kernel (uneven padding)";
    }
    l.has_bias = l.bias.defined();
    l.a_dim = l.kernel_h * l.kernel_w * l.in + (l.has_bias ? 1 : 0);
    l.g_dim = l.out;
  } else if (auto *emb = m.as<torch::nn::EmbeddingImpl>()) {
    if (emb->options.sparse())
      return "an embedding with sparse gradients";
    l.kind = LayerKind::embedding;
    l.weight = emb->weight;
    l.in = emb->options.num_embeddings();
    l.out = emb->options.embedding_dim();
    if (emb->options.padding_idx()) {
      const int64_t p = *emb->options.padding_idx();
      l.padding_idx = p < 0 ? p + l.in : p;
    }
    l.a_dim = l.in;
    l.g_dim = l.out;
  } else {
    return "a layer kind K-FAC does not know";
  }
  if (!float_cpu(l.weight) || !float_cpu(l.bias))
    return "parameters that are not float32 CPU tensors";
  return {};
}

void check_damping(double damping) {
  if (!(damping >= 0.0) || !std::isfinite(damping))
    throw Error("kfac_torch: 'damping' must be finite and >= 0, got " + std::to_string(damping));
}

} // namespace

Preconditioner::Preconditioner(torch::nn::Module &model, PreconditionerOptions options)
    : options_(std::move(options)) {
  if (options_.factor_update_period < 1 || options_.inverse_update_period < 1) {
    throw Error("kfac_torch: 'factor_update_period' and 'inverse_update_period' must be >= 1");
  }
  if (!(options_.factor_decay >= 0.0 && options_.factor_decay <= 1.0))
    throw Error("kfac_torch: 'factor_decay' must lie in [0, 1], got " +
                std::to_string(options_.factor_decay));
  check_damping(options_.damping);
  discover(model);
  if (options_.communicator && options_.communicator->size() > 1) {
    parallel_ = std::make_unique<detail::DataParallel>(
        options_.communicator, options_.loss_reduction, options_.distributed_inverses);
    int64_t elements = 0;
    for (const torch::Tensor &p : params_)
      elements += p.numel();
    // What decides the sizes and order of the collectives of a step, packed into one number.
    const int64_t options_code = (int64_t{options_.factor_update_period} << 32) ^
                                 (int64_t{options_.inverse_update_period} << 3) ^
                                 (options_.use_exact_inverses ? 1 : 0) ^
                                 (options_.distributed_inverses ? 2 : 0) ^
                                 (options_.loss_reduction == LossReduction::sum ? 4 : 0);
    parallel_->check_same_model(static_cast<int64_t>(layers_.size()), elements, options_code);
  }
  capture_ = std::make_unique<detail::LayerCapture>(layers_);
  set_capture(true);
}

Preconditioner::~Preconditioner() = default;

void Preconditioner::discover(torch::nn::Module &model) {
  std::unordered_map<const c10::StorageImpl *, std::string> weight_owner;
  std::unordered_set<const c10::TensorImpl *> covered;
  for (const auto &item : model.named_modules()) {
    const std::string &name = item.key();
    torch::nn::Module &m = *item.value();
    const auto own = m.named_parameters(/*recurse=*/false);
    if (own.is_empty())
      continue;
    auto layer = std::make_shared<LayerState>();
    layer->reduction = options_.loss_reduction;
    std::string reason = make_layer(name, m, *layer);
    if (reason.empty() && matches_any(name, options_.skip_layers))
      reason = "skipped by name";
    if (reason.empty()) {
      const c10::StorageImpl *storage = layer->weight.storage().unsafeGetStorageImpl();
      auto [it, fresh] = weight_owner.emplace(storage, name);
      if (!fresh)
        reason = "its weight is also layer '" + it->second + "''s";
    }
    if (!reason.empty()) {
      unhandled_.push_back({name, m.name(), reason});
      continue;
    }
    layer->a_sum = layer->kind == LayerKind::embedding
                       ? torch::zeros({layer->a_dim}, torch::kFloat)
                       : torch::zeros({layer->a_dim, layer->a_dim}, torch::kFloat);
    layer->g_sum = torch::zeros({layer->g_dim, layer->g_dim}, torch::kFloat);
    layer->reset_statistics();
    params_.push_back(layer->weight);
    covered.insert(layer->weight.unsafeGetTensorImpl());
    if (layer->has_bias) {
      params_.push_back(layer->bias);
      covered.insert(layer->bias.unsafeGetTensorImpl());
    }
    infos_.push_back(layer->info());
    layers_.push_back(std::move(layer));
  }
  num_preconditioned_ = params_.size();
  for (const torch::Tensor &p : model.parameters()) {
    if (p.requires_grad() && covered.insert(p.unsafeGetTensorImpl()).second)
      params_.push_back(p);
  }
  if (!unhandled_.empty()) {
    std::ostringstream msg;
    msg << "hkfac::kfac_torch: " << unhandled_.size()
        << (unhandled_.size() == 1 ? " module" : " modules")
        << " with parameters left to the base optimizer:";
    for (const UnhandledModule &u : unhandled_)
      msg << " '" << u.name << "' (" << u.type << ": " << u.reason << ");";
    if (options_.log)
      options_.log(msg.str());
    else
      std::cerr << msg.str() << "\n";
  }
}

bool Preconditioner::capturing() const { return capture_ && capture_->enabled(); }

void Preconditioner::set_capture(bool on) { capture_->set_enabled(on && !layers_.empty()); }

void Preconditioner::step() { step(options_.damping); }

void Preconditioner::step(double damping) {
  check_damping(damping);
  average_gradients();
  update_curvature(damping);
  precondition_grads();
}

void Preconditioner::set_batch_rows(int64_t rows) {
  if (rows < 1)
    throw Error("kfac_torch: set_batch_rows: 'rows' must be >= 1, got " + std::to_string(rows));
  if (parallel_)
    parallel_->set_batch_rows(rows);
}

void Preconditioner::average_gradients() {
  if (parallel_)
    parallel_->average_gradients(params_);
}

std::vector<double> Preconditioner::global_losses(std::vector<double> shard_losses) const {
  return parallel_ ? parallel_->global_losses(std::move(shard_losses)) : shard_losses;
}

void Preconditioner::update_curvature(double damping) {
  check_damping(damping);
  check_captures();
  if (steps_ % options_.factor_update_period == 0)
    fold_captured();
  refresh_inverses(damping);
  ++steps_;
  set_capture(steps_ % options_.factor_update_period == 0);
}

void Preconditioner::check_captures() {
  // The first failure is reported; every layer's is cleared, so the next step starts afresh.
  std::string error;
  for (const auto &layer : layers_) {
    std::lock_guard<std::mutex> lock(layer->mutex);
    if (!layer->capture_error.empty() && error.empty())
      error = "kfac_torch: capturing layer '" + layer->name + "' failed: " + layer->capture_error;
    layer->capture_error.clear();
  }
  if (parallel_)
    parallel_->check_captures(error);
  else if (!error.empty())
    throw Error(error);
}

void Preconditioner::fold_captured() {
  if (parallel_)
    parallel_->sum_statistics(layers_);
  for (const auto &layer : layers_)
    layer->fold(options_.factor_decay);
}

void Preconditioner::refresh_inverses(double damping) {
  const bool due = steps_ % options_.inverse_update_period == 0 || damping != inverse_damping_;
  std::vector<size_t> stale;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (due || !layers_[i]->have_inverse)
      stale.push_back(i);
  }
  if (parallel_) {
    parallel_->invert(layers_, stale, damping, options_.use_exact_inverses);
  } else {
    for (size_t i : stale)
      layers_[i]->invert(damping, options_.use_exact_inverses);
  }
  inverse_damping_ = damping;
}

void Preconditioner::precondition_grads() {
  torch::NoGradGuard no_grad;
  for (const auto &layer : layers_) {
    torch::Tensor gw = layer->weight.grad();
    if (!layer->have_inverse || !gw.defined())
      continue;
    std::vector<torch::Tensor> grads{gw};
    if (layer->has_bias) {
      torch::Tensor gb = layer->bias.grad();
      if (!gb.defined())
        gb = torch::zeros_like(layer->bias);
      grads.push_back(gb);
    }
    const std::vector<torch::Tensor> u =
        layer->multiply(grads, -1, inverse_damping_, options_.use_exact_inverses);
    gw.copy_(u[0]);
    if (layer->has_bias) {
      if (layer->bias.grad().defined())
        layer->bias.mutable_grad().copy_(u[1]);
      else
        layer->bias.mutable_grad() = u[1];
    }
  }
}

std::vector<torch::Tensor> Preconditioner::multiply(const std::vector<torch::Tensor> &vectors,
                                                    int exp, double damping) const {
  check_damping(damping);
  if (vectors.size() != params_.size()) {
    throw Error("kfac_torch: multiply: expected " + std::to_string(params_.size()) +
                " tensors (one per parameter), got " + std::to_string(vectors.size()));
  }
  std::vector<torch::Tensor> result;
  result.reserve(vectors.size());
  size_t next = 0;
  for (const auto &layer : layers_) {
    std::vector<torch::Tensor> v{vectors[next]};
    if (layer->has_bias)
      v.push_back(vectors[next + 1]);
    next += v.size();
    const bool usable = exp == 1 ? layer->ema_weight > 0 : layer->have_inverse;
    if (!usable) {
      for (const torch::Tensor &t : v)
        result.push_back(exp == 1 ? t * damping : t);
      continue;
    }
    for (torch::Tensor &t : layer->multiply(v, exp, damping, options_.use_exact_inverses))
      result.push_back(std::move(t));
  }
  for (; next < vectors.size(); ++next)
    result.push_back(exp == 1 ? vectors[next] * damping : vectors[next]);
  return result;
}

torch::Tensor Preconditioner::factor_a(size_t i) const { return layers_.at(i)->factor_a(); }
torch::Tensor Preconditioner::factor_g(size_t i) const { return layers_.at(i)->factor_g(); }

// ---- checkpoints ----

namespace {

const int64_t kStateVersion = 1;

c10::IValue read_value(torch::serialize::InputArchive &archive, const std::string &key,
                       const std::string &where) {
  c10::IValue v;
  if (!archive.try_read(key, v))
    throw Error("kfac_torch: load: " + where + " has no '" + key + "'");
  return v;
}

torch::Tensor read_tensor(torch::serialize::InputArchive &archive, const std::string &key,
                          const std::string &where, c10::IntArrayRef expected) {
  torch::Tensor t;
  if (!archive.try_read(key, t))
    throw Error("kfac_torch: load: " + where + " has no tensor '" + key + "'");
  if (t.sizes() != expected || t.scalar_type() != torch::kFloat) {
    std::ostringstream msg;
    msg << "kfac_torch: load: " << where << "'s '" << key << "' is " << t.sizes() << " "
        << t.scalar_type() << ", expected " << expected << " Float";
    throw Error(msg.str());
  }
  return t.contiguous();
}

} // namespace

void Preconditioner::save(torch::serialize::OutputArchive &archive,
                          const std::string &prefix) const {
  torch::serialize::OutputArchive state(archive.compilation_unit());
  state.write("version", c10::IValue(kStateVersion));
  state.write("steps", c10::IValue(steps_));
  state.write("inverse_damping", c10::IValue(inverse_damping_));
  state.write("exact_inverses", c10::IValue(options_.use_exact_inverses));
  state.write("num_layers", c10::IValue(static_cast<int64_t>(layers_.size())));
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerState &l = *layers_[i];
    torch::serialize::OutputArchive a(archive.compilation_unit());
    a.write("name", c10::IValue(l.name));
    a.write("kind", c10::IValue(static_cast<int64_t>(l.kind)));
    a.write("ema_weight", c10::IValue(l.ema_weight));
    a.write("have_inverse", c10::IValue(l.have_inverse));
    a.write("a_sum", l.a_sum);
    a.write("g_sum", l.g_sum);
    if (l.have_inverse) {
      if (options_.use_exact_inverses) {
        if (l.q_a.defined())
          a.write("q_a", l.q_a);
        a.write("lambda_a", l.lambda_a);
        a.write("q_g", l.q_g);
        a.write("lambda_g", l.lambda_g);
      } else {
        a.write("a_inv", l.a_inv);
        a.write("g_inv", l.g_inv);
      }
    }
    state.write("layer_" + std::to_string(i), a);
  }
  archive.write(prefix, state);
}

void Preconditioner::load(torch::serialize::InputArchive &archive, const std::string &prefix) {
  torch::serialize::InputArchive state;
  if (!archive.try_read(prefix, state))
    throw Error("kfac_torch: load: the archive has no '" + prefix + "'");
  const std::string where = "'" + prefix + "'";
  if (read_value(state, "version", where).toInt() != kStateVersion)
    throw Error("kfac_torch: load: " + where + " has an unknown version");
  if (read_value(state, "exact_inverses", where).toBool() != options_.use_exact_inverses)
    throw Error("kfac_torch: load: " + where +
                " was saved with the other inverse route "
                "(use_exact_inverses)");
  const int64_t n = read_value(state, "num_layers", where).toInt();
  if (n != static_cast<int64_t>(layers_.size())) {
    throw Error("kfac_torch: load: " + where + " has " + std::to_string(n) +
                " layers, this preconditioner " + std::to_string(layers_.size()));
  }
  // Everything is read and checked before anything changes.
  struct Loaded {
    double ema_weight;
    bool have_inverse;
    torch::Tensor a_sum, g_sum, a_inv, g_inv, q_a, lambda_a, q_g, lambda_g;
  };
  std::vector<Loaded> loaded;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerState &l = *layers_[i];
    torch::serialize::InputArchive a;
    const std::string key = "layer_" + std::to_string(i);
    if (!state.try_read(key, a))
      throw Error("kfac_torch: load: " + where + " has no '" + key + "'");
    const std::string lw = where + "'s layer " + std::to_string(i);
    const std::string name = read_value(a, "name", lw).toStringRef();
    const int64_t kind = read_value(a, "kind", lw).toInt();
    if (name != l.name || kind != static_cast<int64_t>(l.kind)) {
      throw Error("kfac_torch: load: " + lw + " is '" + name + "' (kind " + std::to_string(kind) +
                  "), expected '" + l.name + "' (" + layer_kind_name(l.kind) + ")");
    }
    Loaded s;
    s.ema_weight = read_value(a, "ema_weight", lw).toDouble();
    s.have_inverse = read_value(a, "have_inverse", lw).toBool();
    const bool emb = l.kind == LayerKind::embedding;
    s.a_sum = read_tensor(a, "a_sum", lw, l.a_sum.sizes());
    s.g_sum = read_tensor(a, "g_sum", lw, l.g_sum.sizes());
    if (s.have_inverse) {
      const std::vector<int64_t> aa{l.a_dim, l.a_dim}, gg{l.g_dim, l.g_dim};
      const std::vector<int64_t> av{l.a_dim}, gv{l.g_dim};
      if (options_.use_exact_inverses) {
        if (!emb)
          s.q_a = read_tensor(a, "q_a", lw, aa);
        s.lambda_a = read_tensor(a, "lambda_a", lw, av);
        s.q_g = read_tensor(a, "q_g", lw, gg);
        s.lambda_g = read_tensor(a, "lambda_g", lw, gv);
      } else {
        s.a_inv = read_tensor(a, "a_inv", lw, emb ? c10::IntArrayRef(av) : c10::IntArrayRef(aa));
        s.g_inv = read_tensor(a, "g_inv", lw, gg);
      }
    }
    loaded.push_back(std::move(s));
  }
  const int64_t steps = read_value(state, "steps", where).toInt();
  const double inverse_damping = read_value(state, "inverse_damping", where).toDouble();
  for (size_t i = 0; i < layers_.size(); ++i) {
    LayerState &l = *layers_[i];
    Loaded &s = loaded[i];
    std::lock_guard<std::mutex> lock(l.mutex);
    l.ema_weight = s.ema_weight;
    l.have_inverse = s.have_inverse;
    l.a_sum = s.a_sum;
    l.g_sum = s.g_sum;
    l.a_inv = s.a_inv;
    l.g_inv = s.g_inv;
    l.q_a = s.q_a;
    l.lambda_a = s.lambda_a;
    l.q_g = s.q_g;
    l.lambda_g = s.lambda_g;
    l.reset_statistics();
  }
  steps_ = steps;
  inverse_damping_ = inverse_damping;
  set_capture(steps_ % options_.factor_update_period == 0);
}

void Preconditioner::save(const std::string &path) const {
  torch::serialize::OutputArchive archive;
  save(archive);
  archive.save_to(path);
}

void Preconditioner::load(const std::string &path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  load(archive);
}

} // namespace hkfac::kfac_torch
