// Optimizer checkpoints: a resumed run continues bit for bit, and every damaged or mismatched
// file is refused with an error that names what was wrong, leaving the optimizer untouched.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "hkfac/error.h"
#include "hkfac/file_util.h"
#include "hkfac/kfac/optimizer.h"
#include "reference.h"

namespace hkfac::kfac {
namespace {

using namespace testref;

// Every block kind at once: dense_0 and dense_2 Kronecker-factored, the scale-and-shift layer
// with a full block, dense_1 skipped to a naive diagonal.
struct Net {
  Sequential model;
  Params params;
  explicit Net(unsigned seed, int hidden = 6) : model(4) {
    model.add<Dense>(4, hidden, Activation::tanh);
    model.add<ScaleAndShift>(hidden);
    model.add<Dense>(hidden, 5, Activation::tanh);
    model.add<Dense>(5, 2);
    std::mt19937 rng(seed);
    params = model.init_params(rng);
  }
  // Noisy targets from the value function's generator (value_func_has_rng), which must resume
  // too.
  static void value(const Matrix &out, const Batch &batch, ValueContext &ctx) {
    std::normal_distribution<float> noise(0.0f, 0.05f);
    Matrix noisy = batch.targets;
    for (Eigen::Index i = 0; i < noisy.size(); ++i)
      noisy.data()[i] += noise(ctx.rng());
    ctx.losses().register_squared_error_loss(out, &noisy);
  }
};

std::vector<Batch> batches(int n, unsigned seed) {
  std::mt19937 rng(seed);
  const Matrix teacher = random_matrix(4, 2, rng);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    Batch b;
    b.inputs = random_matrix(24, 4, rng);
    b.targets = (b.inputs * teacher).array().sin().matrix();
    out.push_back(b);
  }
  return out;
}

// Hands out `all` in order from `next`.
std::function<Batch()> replay(const std::vector<Batch> &all, size_t &next) {
  return [&all, &next]() { return all.at(next++); };
}

OptimizerOptions options(bool exact_inverses) {
  OptimizerOptions o;
  o.num_burnin_steps = 2;
  o.estimation_mode = EstimationMode::fisher_gradients; // sampled: the rng must resume too
  o.inverse_update_period = 3;
  o.curvature_update_period = 2;
  o.use_adaptive_learning_rate = true;
  o.use_adaptive_momentum = true;
  o.use_adaptive_damping = true;
  o.damping_adaptation_interval = 2;
  o.initial_damping = 1e-1;
  o.l2_reg = 1e-4f;
  o.use_exact_inverses = exact_inverses;
  o.value_func_has_rng = true;
  o.patterns_to_skip = {"dense_1"};
  o.layer_tag_to_block["scale_and_shift_0"] = "ScaleAndShiftFull";
  return o;
}

std::string temp_path(const std::string &name) {
  return ::testing::TempDir() + "hkfac_ckpt_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<uint8_t> read_bytes(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string &path, const std::vector<uint8_t> &bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char *>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

// The format's trailing checksum (64-bit FNV-1a of every byte before it), recomputed after a
// test edits the content so that the edit reaches the field checks.
void reseal(std::vector<uint8_t> &bytes) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i + 8 < bytes.size(); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  detail::store_le64(&bytes[bytes.size() - 8], h);
}

// Where the bytes of `key` (a length-prefixed string as the format writes it) end.
size_t after_string(const std::vector<uint8_t> &bytes, const std::string &s) {
  std::string key(4, '\0');
  detail::store_le32(reinterpret_cast<uint8_t *>(key.data()), static_cast<uint32_t>(s.size()));
  key += s;
  const size_t at = std::search(bytes.begin(), bytes.end(), key.begin(), key.end()) - bytes.begin();
  EXPECT_LT(at, bytes.size()) << s;
  return at + key.size();
}

bool same(const Params &a, const Params &b) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rows() != b[i].rows() || a[i].cols() != b[i].cols() || a[i] != b[i])
      return false;
  }
  return true;
}

std::string load_error(Optimizer &opt, const std::string &path, Params &params) {
  try {
    opt.load_checkpoint(path, params);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

// Runs 5 steps (the last one between inverse updates, so the cached inverse must travel),
// saves, and runs 5 more; an optimizer restored from the file into a differently initialised
// network must take the same 5 steps bit for bit.
void expect_resume_is_exact(bool exact_inverses) {
  const std::vector<Batch> data = batches(20, 5);
  const std::string path = temp_path(exact_inverses ? "exact" : "cholesky");
  Net a(1);
  Optimizer opt_a(a.model, Net::value, options(exact_inverses));
  size_t next = 0;
  for (int s = 0; s < 5; ++s)
    ASSERT_FALSE(opt_a.step(a.params, replay(data, next)).rejected);
  opt_a.save_checkpoint(path, a.params);
  const size_t resume_at = next;
  std::vector<StepStats> stats_a;
  for (int s = 0; s < 5; ++s)
    stats_a.push_back(opt_a.step(a.params, replay(data, next)));

  Net b(2);
  Optimizer opt_b(b.model, Net::value, options(exact_inverses));
  opt_b.load_checkpoint(path, b.params);
  EXPECT_EQ(opt_b.step_count(), 5);
  next = resume_at;
  for (int s = 0; s < 5; ++s) {
    const StepStats st = opt_b.step(b.params, replay(data, next));
    EXPECT_EQ(st.step, stats_a[s].step);
    EXPECT_EQ(st.loss, stats_a[s].loss) << "step " << st.step;
    EXPECT_EQ(st.learning_rate, stats_a[s].learning_rate) << "step " << st.step;
    EXPECT_EQ(st.momentum, stats_a[s].momentum) << "step " << st.step;
    EXPECT_EQ(st.damping, stats_a[s].damping) << "step " << st.step;
  }
  EXPECT_TRUE(same(b.params, a.params));
  EXPECT_TRUE(same(opt_b.velocity(), opt_a.velocity()));
  EXPECT_EQ(opt_b.inverse_updates(), opt_a.inverse_updates());
  EXPECT_EQ(opt_b.curvature_updates(), opt_a.curvature_updates());
  std::remove(path.c_str());
}

TEST(kfacCheckpoint, ResumedRunIsBitIdenticalCholeskyRoute) { expect_resume_is_exact(false); }
TEST(kfacCheckpoint, ResumedRunIsBitIdenticalEigenRoute) { expect_resume_is_exact(true); }

// A checkpoint taken before the first step (no burn-in yet) resumes into the same first step.
TEST(kfacCheckpoint, FreshOptimizerRoundTrips) {
  const std::vector<Batch> data = batches(8, 6);
  const std::string path = temp_path("fresh");
  Net a(3), b(4);
  Optimizer opt_a(a.model, Net::value, options(false));
  opt_a.save_checkpoint(path, a.params);
  Optimizer opt_b(b.model, Net::value, options(false));
  opt_b.load_checkpoint(path, b.params);
  size_t na = 0, nb = 0;
  const StepStats sa = opt_a.step(a.params, replay(data, na));
  const StepStats sb = opt_b.step(b.params, replay(data, nb));
  EXPECT_EQ(sa.loss, sb.loss);
  EXPECT_TRUE(same(a.params, b.params));
  std::remove(path.c_str());
}

struct Saved {
  std::string path = temp_path("saved");
  std::vector<uint8_t> bytes;
  Saved() {
    const std::vector<Batch> data = batches(8, 7);
    Net n(1);
    Optimizer opt(n.model, Net::value, options(false));
    size_t next = 0;
    for (int s = 0; s < 4; ++s)
      opt.step(n.params, replay(data, next));
    opt.save_checkpoint(path, n.params);
    bytes = read_bytes(path);
  }
  ~Saved() { std::remove(path.c_str()); }
};

// The error of loading `path` into a fresh optimizer with options `o` over a network of hidden
// width `hidden` ("" when it loads).
std::string mismatch_error(const std::string &path, const OptimizerOptions &o, int hidden = 6) {
  Net n(1, hidden);
  Optimizer opt(n.model, Net::value, o);
  return load_error(opt, path, n.params);
}

TEST(kfacCheckpoint, MismatchedOptimizersAreNamed) {
  Saved saved;
  auto expect_named = [](const std::string &e, const std::string &needle) {
    EXPECT_NE(e.find(needle), std::string::npos) << "error: '" << e << "'";
  };
  expect_named(mismatch_error(saved.path, options(false), 7),
               "params[0] (layer0/w): expected 4 x 7, found 4 x 6");
  OptimizerOptions ggn = options(false);
  ggn.estimation_mode = EstimationMode::ggn_exact;
  expect_named(mismatch_error(saved.path, ggn),
               "estimation mode: expected 'ggn_exact', found 'fisher_gradients'");
  expect_named(mismatch_error(saved.path, options(true)),
               "block 0 ('dense_0') matrix count: expected 6, found 4");
  OptimizerOptions diagonal = options(false);
  diagonal.layer_tag_to_block.clear(); // the scale-and-shift layer gets its default block
  expect_named(mismatch_error(saved.path, diagonal),
               "type: expected 'ScaleAndShiftDiagonal', found 'ScaleAndShiftFull'");
  expect_named(mismatch_error(saved.path + ".missing", options(false)), saved.path + ".missing");
}

// Prefixes, a trailing byte, and single-byte corruptions all through the file: each load either
// succeeds or throws hkfac::Error, and a failed load changes nothing.
TEST(kfacCheckpoint, DamagedFilesAreRefusedAndChangeNothing) {
  Saved saved;
  const std::string path = temp_path("damaged");
  Net n(9);
  Optimizer opt(n.model, Net::value, options(false));
  const Params before = n.params;
  auto expect_refused = [&](const std::vector<uint8_t> &bytes, const std::string &needle) {
    write_bytes(path, bytes);
    const std::string e = load_error(opt, path, n.params);
    EXPECT_NE(e.find(needle), std::string::npos) << "error: '" << e << "'";
    EXPECT_TRUE(same(n.params, before));
    EXPECT_EQ(opt.step_count(), 0);
  };
  const std::vector<uint8_t> &good = saved.bytes;
  ASSERT_GT(good.size(), 100u);
  for (size_t len = 0; len < good.size(); len += (len < 64 ? 1 : 97))
    expect_refused(std::vector<uint8_t>(good.begin(), good.begin() + len), "truncated");
  std::vector<uint8_t> longer = good;
  longer.push_back(0);
  expect_refused(longer, "the content is corrupted or truncated");
  // Past the checksum, the field checks still hold.
  std::vector<uint8_t> padded = good;
  padded.insert(padded.end() - 8, 0);
  reseal(padded);
  expect_refused(padded, "1 unexpected bytes after the last block");
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  expect_refused(bad, "signature");
  bad = good;
  bad[8] = 4; // version
  expect_refused(bad, "version: expected 3 (or an earlier one from 1), found 4");

  // The generator's text (at the layout's fixed offset after the 16-letter estimation mode and
  // the empty metadata)
  // with a stray letter after its last number: the number would parse, the state would be wrong.
  bad = good;
  const size_t rng_at = 8 + 4 + (4 + 16) + 4 + 8 + 2 + 2 * 8 + 5 * 8;
  const uint32_t rng_len = detail::load_le32(&bad[rng_at]);
  ASSERT_LT(rng_at + 4 + rng_len, bad.size());
  bad[rng_at + 4 + rng_len - 1] = 'x';
  expect_refused(bad, "the content is corrupted or truncated");
  reseal(bad);
  expect_refused(bad, "rng: not a std::mt19937 state");

  // Every byte of the header and the generators' states, then every 13th: the checksum refuses
  // each (any one changed byte changes it), naming the file, before any field is read.
  for (size_t i = 0; i < good.size(); i += (i < 200 ? 1 : 13)) {
    std::vector<uint8_t> flipped = good;
    flipped[i] ^= 0xA5;
    write_bytes(path, flipped);
    Net m(9);
    Optimizer fresh(m.model, Net::value, options(false));
    const Params m_before = m.params;
    const std::string e = load_error(fresh, path, m.params);
    EXPECT_FALSE(e.empty()) << "byte " << i;
    if (i >= 12) { // past the signature and version
      EXPECT_NE(e.find("checkpoint '" + path + "': the content is corrupted"), std::string::npos)
          << "byte " << i << ": " << e;
    }
    EXPECT_TRUE(same(m.params, m_before)) << "byte " << i;
    EXPECT_EQ(fresh.step_count(), 0) << "byte " << i;
  }
  std::remove(path.c_str());

  // The untouched file still loads into the optimizer the failures left alone.
  opt.load_checkpoint(saved.path, n.params);
  EXPECT_EQ(opt.step_count(), 4);
}

// Damage every field check accepts — a flag flipped, a generator's number changed, a float's low
// bit — is refused by the checksum; resealed, the same damage would load without a word.
TEST(kfacCheckpoint, ChecksumRefusesDamageTheFieldChecksAccept) {
  Saved saved;
  const std::string path = temp_path("plausible");
  const std::vector<uint8_t> &good = saved.bytes;
  const size_t rng_text = 8 + 4 + (4 + 16) + 4 + 8 + 2 + 2 * 8 + 5 * 8 + 4;
  const size_t have_inverse = after_string(good, "dense_0") + 8; // after the ema weight
  ASSERT_EQ(good[have_inverse], 1);
  const std::vector<std::pair<const char *, size_t>> damage = {
      {"burned_in", 44},
      {"force_inverse_update", 45},
      {"rng", rng_text},
      {"have_inverse", have_inverse},
      {"params[0]", after_string(good, "layer0/w") + 8},
  };
  for (const auto &[field, at] : damage) {
    std::vector<uint8_t> bad = good;
    if (std::string(field) == "rng")
      bad[at] = bad[at] > '0' ? bad[at] - 1 : '1'; // a smaller first number still parses
    else
      bad[at] ^= 1;
    write_bytes(path, bad);
    Net n(9);
    Optimizer opt(n.model, Net::value, options(false));
    const std::string e = load_error(opt, path, n.params);
    EXPECT_NE(e.find("checkpoint '" + path + "': the content is corrupted"), std::string::npos)
        << field << ": '" << e << "'";
    reseal(bad);
    write_bytes(path, bad);
    EXPECT_EQ(load_error(opt, path, n.params), "") << field;
  }
  std::remove(path.c_str());
}

// Version 1 files, the same layout without the checksum, still load.
// The file of an earlier format version: version 2 without the metadata field (an empty one
// is its 4-byte length after the 16-letter estimation mode), version 1 without the checksum too.
std::vector<uint8_t> as_version(const std::vector<uint8_t> &v3, uint32_t version) {
  constexpr size_t kMetadataAt = 8 + 4 + (4 + 16);
  EXPECT_EQ(detail::load_le32(&v3[8]), 3u);
  EXPECT_EQ(detail::load_le32(&v3[kMetadataAt]), 0u);
  std::vector<uint8_t> old = v3;
  old.erase(old.begin() + kMetadataAt, old.begin() + kMetadataAt + 4);
  detail::store_le32(&old[8], version);
  if (version == 1)
    old.resize(old.size() - 8);
  else
    reseal(old);
  return old;
}

TEST(kfacCheckpoint, EarlierFormatVersionsStillLoad) {
  Saved saved;
  const std::string path = temp_path("earlier");
  Net current(9);
  Optimizer from_current(current.model, Net::value, options(false));
  from_current.load_checkpoint(saved.path, current.params);
  for (uint32_t version : {1u, 2u}) {
    write_bytes(path, as_version(saved.bytes, version));
    Net n(9);
    Optimizer opt(n.model, Net::value, options(false));
    EXPECT_EQ(opt.checkpoint_metadata(path), "") << "version " << version;
    opt.load_checkpoint(path, n.params);
    EXPECT_EQ(opt.step_count(), 4) << "version " << version;
    EXPECT_TRUE(same(n.params, current.params)) << "version " << version;
    EXPECT_TRUE(same(opt.velocity(), from_current.velocity())) << "version " << version;
  }
  // The version-1 reader expects nothing after the last block: a checksum there is refused.
  std::vector<uint8_t> mislabelled = as_version(saved.bytes, 2);
  detail::store_le32(&mislabelled[8], 1);
  write_bytes(path, mislabelled);
  Net n(9);
  Optimizer opt(n.model, Net::value, options(false));
  EXPECT_NE(load_error(opt, path, n.params).find("8 unexpected bytes"), std::string::npos);
  std::remove(path.c_str());
}

// The caller's metadata comes back as saved, covered by the checksum, and is no part of what
// load_checkpoint restores.
TEST(kfacCheckpoint, MetadataIsReturnedAsSavedAndChecksummed) {
  const std::vector<Batch> data = batches(8, 7);
  const std::string plain = temp_path("plain"), tagged = temp_path("tagged");
  Net n(1);
  Optimizer opt(n.model, Net::value, options(false));
  size_t next = 0;
  for (int s = 0; s < 3; ++s)
    opt.step(n.params, replay(data, next));
  const std::string metadata = std::string("batch_size=128\nseed=3\n") + '\0' + "binary ok";
  opt.save_checkpoint(plain, n.params);
  opt.save_checkpoint(tagged, n.params, metadata);
  EXPECT_EQ(opt.checkpoint_metadata(plain), "");
  EXPECT_EQ(opt.checkpoint_metadata(tagged), metadata);
  Net a(2), b(2);
  Optimizer from_plain(a.model, Net::value, options(false)),
      from_tagged(b.model, Net::value, options(false));
  from_plain.load_checkpoint(plain, a.params);
  from_tagged.load_checkpoint(tagged, b.params);
  EXPECT_TRUE(same(a.params, b.params));
  size_t na = next, nb = next;
  EXPECT_EQ(from_plain.step(a.params, replay(data, na)).loss,
            from_tagged.step(b.params, replay(data, nb)).loss);

  std::vector<uint8_t> bytes = read_bytes(tagged);
  bytes[after_string(bytes, "fisher_gradients") + 4] ^= 1; // the metadata's first byte
  write_bytes(tagged, bytes);
  try {
    opt.checkpoint_metadata(tagged);
    ADD_FAILURE() << "damaged metadata was returned";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("the content is corrupted"), std::string::npos)
        << e.what();
  }
  std::remove(plain.c_str());
  std::remove(tagged.c_str());
}

// save_checkpoint refuses state load_checkpoint would refuse, naming the field, and writes
// nothing (an older file at the path stays).
TEST(kfacCheckpoint, SaveRefusesNonFiniteStateAndWritesNothing) {
  Saved saved;
  const std::vector<Batch> data = batches(8, 7);
  Net n(1);
  Optimizer opt(n.model, Net::value, options(false));
  size_t next = 0;
  for (int s = 0; s < 4; ++s)
    opt.step(n.params, replay(data, next));
  auto save_error = [&](const std::string &path, const Params &params) -> std::string {
    try {
      opt.save_checkpoint(path, params);
    } catch (const Error &e) {
      return e.what();
    }
    return "";
  };
  Params nan_params = n.params;
  nan_params[2](0, 1) = std::numeric_limits<float>::quiet_NaN();
  std::string e = save_error(saved.path, nan_params);
  EXPECT_NE(e.find("params[2] (layer1/scale) holds nan at row 0, column 1"), std::string::npos)
      << e;
  EXPECT_NE(e.find("nothing was written"), std::string::npos) << e;
  EXPECT_EQ(read_bytes(saved.path), saved.bytes);
  const std::string fresh = temp_path("never_written");
  EXPECT_NE(save_error(fresh, nan_params), "");
  EXPECT_FALSE(std::ifstream(fresh).good());

  CurvatureBlock::State s = opt.estimator().block(0).state();
  Matrix &m = *s.matrices[0].matrix;
  const float kept = m(0, 0);
  m(0, 0) = std::numeric_limits<float>::infinity();
  e = save_error(fresh, n.params);
  EXPECT_NE(e.find(std::string("block 0 ('dense_0') ") + s.matrices[0].name + " holds inf"),
            std::string::npos)
      << e;
  EXPECT_FALSE(std::ifstream(fresh).good());
  m(0, 0) = kept;
  EXPECT_EQ(save_error(fresh, n.params), "");
  std::remove(fresh.c_str());
}

TEST(kfacCheckpoint, EmptyPathIsNamed) {
  Net n(1);
  Optimizer opt(n.model, Net::value, options(false));
  try {
    opt.save_checkpoint("", n.params);
    FAIL() << "saved to ''";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "Optimizer::save_checkpoint: 'path' is empty");
  }
  EXPECT_EQ(load_error(opt, "", n.params), "Optimizer::load_checkpoint: 'path' is empty");
}

// A damped factor that is not positive definite (here made so through a checkpoint: a float
// estimate gets there by rounding when the damping is tiny) rejects the step and raises the
// damping; the inverse is retried on the next step until the damping covers the defect.
struct Indefinite {
  std::string path = temp_path("indefinite");
  std::vector<Batch> data = batches(12, 8);
  size_t next = 0;
  // A checkpoint after 3 steps (the next one updates the inverses) with dense_0's A sum made
  // indefinite: its (0, 1) and (1, 0) entries set to 10 times its (0, 0) entry.
  explicit Indefinite(const OptimizerOptions &o) {
    Net n(1);
    Optimizer opt(n.model, Net::value, o);
    for (int s = 0; s < 3; ++s)
      opt.step(n.params, replay(data, next));
    opt.save_checkpoint(path, n.params);
    std::vector<uint8_t> bytes = read_bytes(path);
    const std::string key("\x05\0\0\0a_sum", 9);
    const size_t name =
        std::search(bytes.begin(), bytes.end(), key.begin(), key.end()) - bytes.begin();
    EXPECT_LT(name, bytes.size());
    const size_t cols = detail::load_le32(&bytes[name + key.size() + 4]);
    uint8_t *values = &bytes[name + key.size() + 8];
    const float a00 = detail::load_le_float(values);
    EXPECT_GT(a00, 0.0f);
    detail::store_le_float(values + 4 * 1, 10 * a00);
    detail::store_le_float(values + 4 * cols, 10 * a00);
    reseal(bytes);
    write_bytes(path, bytes);
  }
  ~Indefinite() { std::remove(path.c_str()); }
};

TEST(kfacCheckpoint, IndefiniteFactorRejectsTheStepAndRaisesDamping) {
  const OptimizerOptions o = options(false);
  Indefinite f(o);
  Net n(2);
  Optimizer opt(n.model, Net::value, o);
  opt.load_checkpoint(f.path, n.params);
  const Params loaded = n.params;
  const double damping = opt.damping();
  const StepStats st = opt.step(n.params, replay(f.data, f.next));
  EXPECT_TRUE(st.rejected);
  EXPECT_EQ(st.inverse_failures, 1);
  EXPECT_EQ(st.rejected_steps, 1);
  EXPECT_TRUE(same(n.params, loaded));
  EXPECT_NEAR(opt.damping(), damping * o.rejected_step_damping_factor, 1e-12);
  int accepted = 0;
  for (int s = 0; s < 6; ++s)
    accepted += opt.step(n.params, replay(f.data, f.next)).rejected ? 0 : 1;
  EXPECT_GT(accepted, 0);
  // Every rejection of the 7 steps since the checkpoint was the inverse's.
  EXPECT_EQ(opt.inverse_failures(), 7 - accepted);
  EXPECT_EQ(opt.step_count(), 3 + 7);
  EXPECT_TRUE(all_finite(n.params));
}

// With the damping already at max_damping there is nothing to raise: a clear error, not a loop.
TEST(kfacCheckpoint, IndefiniteFactorAtMaxDampingIsAnError) {
  OptimizerOptions o = options(false);
  o.min_damping = o.max_damping = o.initial_damping;
  Indefinite f(o);
  Net n(2);
  Optimizer opt(n.model, Net::value, o);
  opt.load_checkpoint(f.path, n.params);
  try {
    opt.step(n.params, replay(f.data, f.next));
    FAIL() << "the step went on with an indefinite factor";
  } catch (const Error &e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'dense_0': update_inverse: damped factor is not positive definite"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("cannot be raised further"), std::string::npos) << what;
  }
}

} // namespace
} // namespace hkfac::kfac
