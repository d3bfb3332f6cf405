// The curvature estimator: block selection and the six estimation modes.
#include "hkfac/kfac/estimator.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <regex>
#include <thread>

#include "hkfac/error.h"
#include "hkfac/serial_kernels.h"

namespace hkfac::kfac {
namespace {

constexpr EstimationMode kModes[] = {
    EstimationMode::fisher_gradients, EstimationMode::fisher_empirical,
    EstimationMode::fisher_exact,     EstimationMode::fisher_curvature_prop,
    EstimationMode::ggn_exact,        EstimationMode::ggn_curvature_prop,
};

bool matches_any(const std::string &name, const std::vector<std::string> &patterns) {
  for (const std::string &p : patterns) {
    try {
      if (std::regex_match(name, std::regex(p)))
        return true;
    } catch (const std::regex_error &e) {
      throw Error("patterns_to_skip: '" + p + "' is not a valid regular expression (" + e.what() +
                  ")");
    }
  }
  return false;
}

// 1/√w, so that a weighted loss's gradient √w·∇NLL enters the outer product as w·∇∇ᵀ.
float inverse_sqrt_weight(const LossFunction &l) {
  return l.weight() > 0.0f ? 1.0f / std::sqrt(l.weight()) : 0.0f;
}

// ±1 entries, row i from its example's stream (ExampleSeeds).
Matrix random_signs(Eigen::Index rows, Eigen::Index cols, const ExampleSeeds &seeds) {
  Matrix v(rows, cols);
  for (Eigen::Index i = 0; i < rows; ++i) {
    ExampleRng rng = seeds.rng(i);
    uint64_t bits = 0;
    for (Eigen::Index k = 0; k < cols; ++k) {
      if (k % 64 == 0)
        bits = rng();
      v(i, k) = (bits >> (k % 64)) & 1u ? 1.0f : -1.0f;
    }
  }
  return v;
}

// Every layer_tag_to_block entry must name a tag of the model or a kind, and a block type, even
// where no tag uses it: a typo must not leave a tag on its default block silently.
void check_block_selection_keys(const BlockSelection &selection,
                                const std::vector<LayerTag> &tags) {
  constexpr TagKind kKinds[] = {TagKind::dense, TagKind::conv2d, TagKind::scale_and_shift,
                                TagKind::generic};
  for (const auto &[key, value] : selection.layer_tag_to_block) {
    bool known =
        std::any_of(tags.begin(), tags.end(), [&](const LayerTag &t) { return t.name == key; });
    for (TagKind k : kKinds)
      known = known || key == tag_kind_name(k);
    if (!known) {
      std::string valid;
      for (const LayerTag &t : tags)
        valid += (valid.empty() ? "" : ", ") + t.name;
      std::string kinds;
      for (TagKind k : kKinds)
        kinds += std::string(kinds.empty() ? "" : ", ") + tag_kind_name(k);
      throw Error("layer_tag_to_block: key '" + key +
                  "' is neither a tag of the model nor a kind; the tags are " +
                  (valid.empty() ? "(none)" : valid) + " and the kinds " + kinds);
    }
    try {
      parse_block_kind(value);
    } catch (const Error &e) {
      throw Error("layer_tag_to_block['" + key + "']: " + e.what());
    }
  }
}

} // namespace

const char *estimation_mode_name(EstimationMode mode) {
  switch (mode) {
  case EstimationMode::fisher_gradients:
    return "fisher_gradients";
  case EstimationMode::fisher_empirical:
    return "fisher_empirical";
  case EstimationMode::fisher_exact:
    return "fisher_exact";
  case EstimationMode::fisher_curvature_prop:
    return "fisher_curvature_prop";
  case EstimationMode::ggn_exact:
    return "ggn_exact";
  case EstimationMode::ggn_curvature_prop:
    return "ggn_curvature_prop";
  }
  return "unknown";
}

EstimationMode parse_estimation_mode(const std::string &text) {
  for (EstimationMode m : kModes) {
    if (text == estimation_mode_name(m))
      return m;
  }
  throw Error("estimation_mode: expected fisher_gradients, fisher_empirical, fisher_exact, "
              "fisher_curvature_prop, ggn_exact or ggn_curvature_prop, got '" +
              text + "'");
}

bool is_ggn_mode(EstimationMode mode) {
  return mode == EstimationMode::ggn_exact || mode == EstimationMode::ggn_curvature_prop;
}

CurvatureEstimator::CurvatureEstimator(const Model &model, EstimationMode mode,
                                       const BlockSelection &selection)
    : mode_(mode), serial_inverses_(selection.block_options.debug_checks) {
  const std::vector<ParamShape> shapes = model.param_shapes();
  num_params_ = shapes.size();
  std::vector<int> owner(shapes.size(), -1);
  const std::vector<LayerTag> &tags = model.tags();
  check_block_selection_keys(selection, tags);
  for (size_t t = 0; t < tags.size(); ++t) {
    LayerTag tag = tags[t];
    for (int p : tag.params) {
      if (p < 0 || p >= static_cast<int>(shapes.size())) {
        throw Error("CurvatureEstimator: tag '" + tag.name + "' names parameter " +
                    std::to_string(p) + ", the model has " + std::to_string(shapes.size()));
      }
      if (owner[p] >= 0) {
        throw Error("CurvatureEstimator: parameter " + std::to_string(p) + " (" + shapes[p].name +
                    ") is in tags '" + tags[owner[p]].name + "' and '" + tag.name + "'");
      }
      owner[p] = static_cast<int>(t);
    }
    const bool generic =
        selection.register_only_generic || matches_any(tag.name, selection.patterns_to_skip);
    const TagKind effective = generic ? TagKind::generic : tag.kind;
    BlockKind kind = default_block_kind(effective);
    auto by_name = selection.layer_tag_to_block.find(tag.name);
    auto by_kind = selection.layer_tag_to_block.find(tag_kind_name(effective));
    if (by_name != selection.layer_tag_to_block.end()) {
      kind = parse_block_kind(by_name->second);
    } else if (by_kind != selection.layer_tag_to_block.end()) {
      kind = parse_block_kind(by_kind->second);
    }
    blocks_.push_back(make_block(kind, tag, shapes, selection.block_options));
    block_tag_.push_back(static_cast<int>(t));
  }
  for (size_t p = 0; p < owner.size(); ++p) {
    if (owner[p] < 0) {
      throw Error("CurvatureEstimator: parameter " + std::to_string(p) + " (" + shapes[p].name +
                  ") is not covered by any layer tag");
    }
  }
  init();
}

void CurvatureEstimator::init() {
  for (auto &b : blocks_)
    b->init();
}

bool CurvatureEstimator::update_curvature_estimate(Model &model, const LossRegistry &losses,
                                                   float ema_old, float ema_new, std::mt19937 &rng,
                                                   const BatchShard &shard) {
  if (losses.empty()) {
    throw Error("CurvatureEstimator: no loss was registered on the model output");
  }
  const Matrix &out = losses.losses()[0]->inputs();
  const Eigen::Index batch = out.rows(), width = out.cols();

  std::vector<BlockBatch> batches(blocks_.size());
  for (size_t b = 0; b < blocks_.size(); ++b) {
    batches[b].batch_size = static_cast<int>(batch);
    batches[b].inputs = &model.record(block_tag_[b]).inputs;
  }
  auto run_pass = [&](const Matrix &cotangent) {
    model.backward_records(cotangent);
    for (size_t b = 0; b < blocks_.size(); ++b) {
      batches[b].output_grads.push_back(model.record(block_tag_[b]).output_grads);
    }
  };

  // Every rank draws the same key (their generators are in step); rows draw by global index.
  const uint64_t high = rng();
  const ExampleSeeds seeds{(high << 32) ^ rng(), shard.first_example};
  const bool ggn = is_ggn_mode(mode_);
  switch (mode_) {
  case EstimationMode::fisher_gradients:
  case EstimationMode::fisher_empirical: {
    Matrix cot = Matrix::Zero(batch, width);
    for (size_t j = 0; j < losses.losses().size(); ++j) {
      const LossFunction &l = *losses.losses()[j];
      const Matrix g = mode_ == EstimationMode::fisher_gradients
                           ? l.gradient_on(l.sample(seeds.stream(j)))
                           : l.gradient();
      cot += inverse_sqrt_weight(l) * g;
    }
    run_pass(cot);
    break;
  }
  case EstimationMode::fisher_exact:
  case EstimationMode::ggn_exact:
    for (const auto &l : losses.losses()) {
      for (int k = 0; k < l->factor_dim(); ++k) {
        Matrix e = Matrix::Zero(batch, l->factor_dim());
        e.col(k).setOnes();
        run_pass(ggn ? l->multiply_hessian_factor(e) : l->multiply_fisher_factor(e));
      }
    }
    break;
  case EstimationMode::fisher_curvature_prop:
  case EstimationMode::ggn_curvature_prop: {
    Matrix cot = Matrix::Zero(batch, width);
    for (size_t j = 0; j < losses.losses().size(); ++j) {
      const auto &l = losses.losses()[j];
      const Matrix v = random_signs(batch, l->factor_dim(), seeds.stream(j));
      cot += ggn ? l->multiply_hessian_factor(v) : l->multiply_fisher_factor(v);
    }
    run_pass(cot);
    break;
  }
  }
  bool finite = true;
  for (size_t b = 0; b < blocks_.size() && finite; ++b)
    finite = blocks_[b]->keeps_estimate_finite(ema_old, ema_new, batches[b]);
  if (shard.communicator)
    finite = shard.communicator->all(finite, "curvature");
  if (!finite)
    return false;
  for (size_t b = 0; b < blocks_.size(); ++b) {
    blocks_[b]->update_curvature_estimate(ema_old, ema_new, batches[b]);
  }
  if (shard.communicator)
    average_estimates(shard);
  return true;
}

void CurvatureEstimator::update_inverse(float diagonal_weight, Communicator *distribute) {
  if (distribute && distribute->size() > 1) {
    update_inverse_distributed(diagonal_weight, *distribute);
    return;
  }
  std::vector<CurvatureBlock *> all;
  for (auto &b : blocks_)
    all.push_back(b.get());
  invert(all, diagonal_weight);
}

void CurvatureEstimator::invert(const std::vector<CurvatureBlock *> &blocks,
                                float diagonal_weight) const {
  // Blocks are independent and their inverses (Eigen factorisations, single-threaded) dominate
  // a K-FAC step, so they run on all cores, largest first so the big ones do not finish last.
  // Small models invert in microseconds, less than starting a thread costs; and a caller inside
  // a SerialKernels scope asked for its thread alone.
  long total_dim = 0;
  for (const CurvatureBlock *b : blocks)
    total_dim += b->dim();
  constexpr long kParallelInverseMinDim = 1 << 16;
  const unsigned threads =
      serial_inverses_ || kernels_run_serially() || total_dim < kParallelInverseMinDim
          ? 1u
          : std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                            static_cast<unsigned>(blocks.size())));
  if (threads <= 1) {
    for (CurvatureBlock *b : blocks)
      b->update_inverse(diagonal_weight);
    return;
  }
  std::vector<CurvatureBlock *> order = blocks;
  std::stable_sort(
      order.begin(), order.end(),
      [](const CurvatureBlock *a, const CurvatureBlock *b) { return a->dim() > b->dim(); });
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(threads);
  auto work = [&](unsigned id) {
    try {
      for (size_t i = next++; i < order.size(); i = next++)
        order[i]->update_inverse(diagonal_weight);
    } catch (...) {
      errors[id] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned id = 1; id < threads; ++id)
    pool.emplace_back(work, id);
  work(0);
  for (auto &t : pool)
    t.join();
  for (auto &e : errors) {
    if (e)
      std::rethrow_exception(e);
  }
}

Params CurvatureEstimator::multiply_matpower(const Params &vec, int exp,
                                             float diagonal_weight) const {
  if (vec.size() != num_params_) {
    throw Error("CurvatureEstimator::multiply_matpower: 'vec' has " + std::to_string(vec.size()) +
                " tensors, the model has " + std::to_string(num_params_));
  }
  Params out(vec.size());
  for (const auto &b : blocks_) {
    std::vector<Matrix> part;
    for (int p : b->tag().params)
      part.push_back(vec[p]);
    std::vector<Matrix> res = b->multiply_matpower(part, exp, diagonal_weight);
    for (size_t i = 0; i < res.size(); ++i)
      out[b->tag().params[i]] = std::move(res[i]);
  }
  return out;
}

Matrix multiply_output_curvature(const LossRegistry &losses, const Matrix &jv, bool ggn) {
  if (losses.empty())
    throw Error("multiply_output_curvature: no loss was registered");
  Matrix out = Matrix::Zero(jv.rows(), jv.cols());
  for (const auto &l : losses.losses())
    out += ggn ? l->multiply_hessian(jv) : l->multiply_fisher(jv);
  return out;
}

} // namespace hkfac::kfac
