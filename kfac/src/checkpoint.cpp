// Optimizer checkpoints: the whole K-FAC state in one versioned little-endian file.
//
// Layout (every integer little-endian; strings are a u32 length and that many bytes; a matrix is
// a string name, u32 rows, u32 cols and rows·cols floats in row-major order):
//   "HKFACCKP", u32 version, string estimation mode, string caller's metadata,
//   u64 step, u8 burned_in, u8 force_inverse_update, f64 damping, f64 damping_boost,
//   u64 rejected_steps, u64 inverse_failures, u64 inverse_updates, u64 curvature_updates,
//   u64 consecutive non-finite batches,
//   string rng, string value rng (std::mt19937's text form),
//   u32 count + matrices: params, then velocity,
//   u32 block count, per block: string type, string tag, f64 ema weight, u8 have_inverse,
//   u32 matrix count + matrices (CurvatureBlock::state's, in its order),
//   u64 64-bit FNV-1a of every byte before it,
// and nothing after. The checksum catches damage the field checks cannot see (a flipped bit in a
// float, a generator state or a flag); it is verified before any field is read. Version 2 files,
// the same without the metadata, and version 1 files, without the checksum too, still load. The
// reader checks every count and extent against this optimizer before it allocates, so a damaged or
// hostile file costs no more memory than a good one. The writer refuses what the reader would
// (non-finite values), so every file it writes loads.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <sstream>
#include <utility>

#include "hkfac/error.h"
#include "hkfac/file_util.h"
#include "hkfac/kfac/optimizer.h"

namespace hkfac::kfac {
namespace {

constexpr char kMagic[8] = {'H', 'K', 'F', 'A', 'C', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 3;
constexpr uint32_t kVersionWithoutMetadata = 2;
constexpr uint32_t kVersionWithoutChecksum = 1;
constexpr uint32_t kMaxString = 1u << 20; // the generators' text form is ~7 KB

// Byte-serial, a small part of a checkpoint's write (see docs/RESULTS.md#k-fac-checkpoints); any
// single changed byte changes it.
uint64_t fnv1a(const uint8_t *p, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

std::string hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void append_string(std::vector<uint8_t> &out, const std::string &s) {
  detail::append_le32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

// The checkpoint's fields, each refused with a named error when the reader would refuse it.
class Writer {
public:
  explicit Writer(const std::string &path) : what_("Optimizer::save_checkpoint '" + path + "'") {}

  [[noreturn]] void fail(const std::string &why) const {
    throw Error(what_ + ": " + why + "; load_checkpoint would refuse it, so nothing was written");
  }
  std::vector<uint8_t> &bytes() { return out_; }
  void f64(const std::string &field, double v, double min) {
    if (!std::isfinite(v) || v < min) {
      fail(field + " is " + std::to_string(v) + ", not a finite value >= " + std::to_string(min));
    }
    detail::append_le_double(out_, v);
  }
  void matrix(const std::string &field, const std::string &name, const Matrix &m) {
    if (!m.allFinite()) {
      const Eigen::Index i =
          std::find_if(m.data(), m.data() + m.size(), [](float v) { return !std::isfinite(v); }) -
          m.data();
      fail(field + " holds " + std::to_string(m.data()[i]) + " at row " +
           std::to_string(i / m.cols()) + ", column " + std::to_string(i % m.cols()));
    }
    append_string(out_, name);
    detail::append_le32(out_, static_cast<uint32_t>(m.rows()));
    detail::append_le32(out_, static_cast<uint32_t>(m.cols()));
    const size_t at = out_.size();
    out_.resize(at + 4 * static_cast<size_t>(m.size()));
    for (Eigen::Index i = 0; i < m.size(); ++i)
      detail::store_le_float(out_.data() + at + 4 * i, m.data()[i]);
  }

private:
  std::string what_;
  std::vector<uint8_t> out_;
};

template <typename Rng> std::string rng_text(const Rng &rng) {
  std::ostringstream os;
  os << rng;
  return os.str();
}

// The checkpoint's fields over the shared field-naming reader: flags, strings and named
// matrices, each checked as it is read.
class Reader : public detail::FieldReader {
public:
  Reader(const std::string &path, const uint8_t *data, size_t size)
      : FieldReader("checkpoint '" + path + "'", data, size, size) {}
  Reader(const std::string &path, const std::vector<uint8_t> &bytes)
      : FieldReader("checkpoint '" + path + "'", bytes) {}

  bool flag(const std::string &field) {
    const uint8_t v = *take(1, field);
    if (v > 1)
      fail(field + ": expected 0 or 1, found " + std::to_string(v));
    return v == 1;
  }
  std::string string(const std::string &field) {
    const uint32_t n = u32(field + " length");
    if (n > kMaxString)
      fail(field + ": length " + std::to_string(n) + " exceeds " + std::to_string(kMaxString));
    const uint8_t *p = take(n, field);
    return std::string(reinterpret_cast<const char *>(p), n);
  }
  void expect_string(const std::string &field, const std::string &expected) {
    const std::string found = string(field);
    if (found != expected)
      fail(field + ": expected '" + expected + "', found '" + found + "'");
  }
  // A matrix named `name` of rows x cols, or (when `may_be_empty`) 0 x 0; finite.
  Matrix matrix(const std::string &field, const std::string &name, int rows, int cols,
                bool may_be_empty) {
    expect_string(field + " name", name);
    const uint32_t r = u32(field + " rows"), c = u32(field + " cols");
    const bool empty = r == 0 && c == 0;
    if (!(empty && may_be_empty) &&
        (r != static_cast<uint32_t>(rows) || c != static_cast<uint32_t>(cols))) {
      fail(field + ": expected " + std::to_string(rows) + " x " + std::to_string(cols) +
           (may_be_empty ? " (or 0 x 0)" : "") + ", found " + std::to_string(r) + " x " +
           std::to_string(c));
    }
    Matrix m(r, c);
    const uint8_t *p = take(4 * static_cast<size_t>(m.size()), field + " values");
    for (Eigen::Index i = 0; i < m.size(); ++i)
      m.data()[i] = detail::load_le_float(p + 4 * i);
    if (!m.allFinite())
      fail(field + ": holds NaN or Inf");
    return m;
  }
  void expect_end() const {
    if (remaining() != 0)
      fail(std::to_string(remaining()) + " unexpected bytes after the last block");
  }
};

template <typename Rng> Rng parse_rng(Reader &r, const std::string &field) {
  std::istringstream is(r.string(field));
  Rng rng;
  is >> rng;
  std::string rest;
  if (is.fail() || (is >> rest, !rest.empty()))
    r.fail(field + ": not a std::mt19937 state");
  return rng;
}

Params read_params(Reader &r, const std::string &what, const std::vector<ParamShape> &shapes) {
  const uint32_t n = r.u32(what + " count");
  if (n != shapes.size()) {
    r.fail(what + " count: expected " + std::to_string(shapes.size()) + " (the model's), found " +
           std::to_string(n));
  }
  Params p;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const std::string field = what + "[" + std::to_string(i) + "] (" + shapes[i].name + ")";
    p.push_back(r.matrix(field, shapes[i].name, shapes[i].rows, shapes[i].cols, false));
  }
  return p;
}

// Everything a block's state holds, read and checked before anything is written.
struct BlockState {
  double ema_weight = 0.0;
  bool have_inverse = false;
  std::vector<Matrix> matrices;
};

// A checkpoint file read whole (at most `max_bytes`), its signature, version and checksum
// verified before any field is read.
struct VerifiedFile {
  std::vector<uint8_t> bytes;
  uint32_t version = 0;
  size_t header = 0, content = 0;
};

VerifiedFile read_verified(const std::string &path, size_t max_bytes) {
  VerifiedFile f;
  size_t total = 0;
  f.bytes = detail::read_file_prefix(path, max_bytes + 1, &total);
  Reader r(path, f.bytes);
  if (total > max_bytes) {
    r.fail("the file has " + std::to_string(total) + " bytes, more than this optimizer's " +
           "checkpoint can have (" + std::to_string(max_bytes) + ")");
  }
  const uint8_t *magic = r.take(sizeof kMagic, "signature");
  if (!std::equal(magic, magic + sizeof kMagic, kMagic))
    r.fail("signature: not an hkfac optimizer checkpoint (expected \"HKFACCKP\")");
  f.version = r.u32("version");
  if (f.version < kVersionWithoutChecksum || f.version > kVersion) {
    r.fail("version: expected " + std::to_string(kVersion) + " (or an earlier one from " +
           std::to_string(kVersionWithoutChecksum) + "), found " + std::to_string(f.version));
  }
  f.header = r.position();
  f.content = f.bytes.size();
  if (f.version != kVersionWithoutChecksum) {
    if (r.remaining() < 8)
      r.fail("truncated: no room for the checksum after the header");
    f.content -= 8;
    const uint64_t recorded = detail::load_le64(f.bytes.data() + f.content);
    const uint64_t computed = fnv1a(f.bytes.data(), f.content);
    if (recorded != computed) {
      throw Error("checkpoint '" + path + "': the content is corrupted or truncated: its " +
                  "FNV-1a checksum is " + hex(computed) + ", the file records " + hex(recorded));
    }
  }
  return f;
}

// A reader over the fields after the version, ending where the checksum starts.
Reader fields_of(const std::string &path, const VerifiedFile &f) {
  Reader r(path, f.bytes.data(), f.content);
  r.take(f.header, "header");
  return r;
}

} // namespace

size_t Optimizer::checkpoint_size_limit() const {
  size_t max_bytes = 1u << 22;
  for (const ParamShape &s : model_.param_shapes())
    max_bytes += 2 * (4 * static_cast<size_t>(s.rows) * s.cols + 1024);
  for (const auto &b : estimator_.blocks()) {
    for (const auto &m : std::as_const(*b).state().matrices)
      max_bytes += 4 * static_cast<size_t>(m.rows) * m.cols + 1024;
  }
  return max_bytes + 2 * kMaxString; // the metadata and the estimation mode
}

std::string Optimizer::checkpoint_metadata(const std::string &path) const {
  if (path.empty())
    throw Error("Optimizer::checkpoint_metadata: 'path' is empty");
  const VerifiedFile f = read_verified(path, checkpoint_size_limit());
  Reader r = fields_of(path, f);
  r.string("estimation mode");
  return f.version > kVersionWithoutMetadata ? r.string("metadata") : std::string();
}

void Optimizer::save_checkpoint(const std::string &path, const Params &params,
                                const std::string &metadata) const {
  if (!comm_) {
    write_checkpoint(path, params, metadata);
    return;
  }
  // The ranks hold the same state, so one file serves all; the others wait for it, and hear
  // of its failure rather than waiting for ever.
  std::exception_ptr error;
  if (comm_->rank() == 0) {
    try {
      write_checkpoint(path, params, metadata);
    } catch (...) {
      error = std::current_exception();
    }
  }
  const bool written = comm_->all(!error, "checkpoint");
  if (error)
    std::rethrow_exception(error);
  if (!written)
    throw Error("Optimizer::save_checkpoint '" + path + "': rank 0 could not write it");
}

void Optimizer::write_checkpoint(const std::string &path, const Params &params,
                                 const std::string &metadata) const {
  // Up front: write_file_atomically would otherwise fail renaming ".tmp.N" onto "".
  if (path.empty())
    throw Error("Optimizer::save_checkpoint: 'path' is empty");
  check_params(params, "Optimizer::save_checkpoint");
  Writer w(path);
  std::vector<uint8_t> &out = w.bytes();
  out.assign(kMagic, kMagic + sizeof kMagic);
  detail::append_le32(out, kVersion);
  append_string(out, estimation_mode_name(options_.estimation_mode));
  if (metadata.size() > kMaxString) {
    throw Error("Optimizer::save_checkpoint '" + path + "': metadata of " +
                std::to_string(metadata.size()) + " bytes exceeds " + std::to_string(kMaxString));
  }
  append_string(out, metadata);
  detail::append_le64(out, static_cast<uint64_t>(step_));
  out.push_back(burned_in_ ? 1 : 0);
  out.push_back(force_inverse_update_ ? 1 : 0);
  w.f64("damping", damping_, 0.0);
  w.f64("damping boost", damping_boost_, 1.0);
  detail::append_le64(out, static_cast<uint64_t>(rejected_steps_));
  detail::append_le64(out, static_cast<uint64_t>(inverse_failures_));
  detail::append_le64(out, static_cast<uint64_t>(inverse_updates_));
  detail::append_le64(out, static_cast<uint64_t>(curvature_updates_));
  detail::append_le64(out, static_cast<uint64_t>(nonfinite_batches_));
  append_string(out, rng_text(rng_));
  append_string(out, rng_text(value_rng_));
  const std::vector<ParamShape> shapes = model_.param_shapes();
  for (const auto &[what, list] :
       {std::pair("params", &params), std::pair("velocity", &velocity_)}) {
    detail::append_le32(out, static_cast<uint32_t>(list->size()));
    for (size_t i = 0; i < list->size(); ++i) {
      w.matrix(std::string(what) + "[" + std::to_string(i) + "] (" + shapes[i].name + ")",
               shapes[i].name, (*list)[i]);
    }
  }
  const auto &blocks = estimator_.blocks();
  detail::append_le32(out, static_cast<uint32_t>(blocks.size()));
  for (size_t i = 0; i < blocks.size(); ++i) {
    const CurvatureBlock &b = *blocks[i];
    // blocks() is const only shallowly, so ask for the read-only view explicitly.
    const CurvatureBlock::ConstState s = std::as_const(b).state();
    const std::string where = "block " + std::to_string(i) + " ('" + b.tag().name + "')";
    append_string(out, b.name());
    append_string(out, b.tag().name);
    w.f64(where + " ema weight", *s.ema_weight, 0.0);
    out.push_back(*s.have_inverse ? 1 : 0);
    detail::append_le32(out, static_cast<uint32_t>(s.matrices.size()));
    for (const auto &m : s.matrices)
      w.matrix(where + " " + m.name, m.name, *m.matrix);
  }
  detail::append_le64(out, fnv1a(out.data(), out.size()));
  detail::write_file_atomically(path, out);
}

void Optimizer::load_checkpoint(const std::string &path, Params &params) {
  if (!comm_) {
    read_checkpoint(path, params);
    return;
  }
  std::exception_ptr error;
  try {
    read_checkpoint(path, params);
  } catch (...) {
    error = std::current_exception();
  }
  // A rank that could not read it would step from other parameters than the rest.
  const bool everywhere = comm_->all(!error, "checkpoint");
  if (error)
    std::rethrow_exception(error);
  if (!everywhere) {
    throw Error("Optimizer::load_checkpoint '" + path +
                "': another rank could not load it; the ranks' states now differ");
  }
}

void Optimizer::read_checkpoint(const std::string &path, Params &params) {
  if (path.empty())
    throw Error("Optimizer::load_checkpoint: 'path' is empty");
  const std::vector<ParamShape> shapes = model_.param_shapes();
  std::vector<CurvatureBlock::State> live;
  for (size_t i = 0; i < estimator_.blocks().size(); ++i)
    live.push_back(estimator_.block(i).state());
  const VerifiedFile f = read_verified(path, checkpoint_size_limit());
  Reader r = fields_of(path, f);
  r.expect_string("estimation mode", estimation_mode_name(options_.estimation_mode));
  if (f.version > kVersionWithoutMetadata)
    r.string("metadata"); // the caller's (checkpoint_metadata)
  const uint64_t step = r.u64("step");
  const bool burned_in = r.flag("burned_in");
  const bool force_inverse = r.flag("force_inverse_update");
  const double damping = r.f64("damping"), boost = r.f64("damping boost");
  if (!std::isfinite(damping) || damping < 0.0)
    r.fail("damping: expected a finite value >= 0, found " + std::to_string(damping));
  if (!std::isfinite(boost) || boost < 1.0)
    r.fail("damping boost: expected a finite value >= 1, found " + std::to_string(boost));
  const uint64_t rejected = r.u64("rejected steps"), failures = r.u64("inverse failures"),
                 inverses = r.u64("inverse updates"), curvatures = r.u64("curvature updates");
  const uint64_t nonfinite = r.u64("consecutive non-finite batches");
  constexpr uint64_t kMaxCount = static_cast<uint64_t>(std::numeric_limits<int>::max());
  if (nonfinite >= static_cast<uint64_t>(kMaxNonfiniteBatches) || nonfinite > rejected) {
    r.fail("consecutive non-finite batches: expected at most " +
           std::to_string(kMaxNonfiniteBatches - 1) +
           " and no more than the rejected steps, found " + std::to_string(nonfinite));
  }
  if (step > kMaxCount || rejected > step || failures > rejected || inverses > kMaxCount ||
      curvatures > kMaxCount)
    r.fail("step counters out of range (step " + std::to_string(step) + ")");
  const std::mt19937 rng = parse_rng<std::mt19937>(r, "rng");
  const std::mt19937 value_rng = parse_rng<std::mt19937>(r, "value rng");
  Params new_params = read_params(r, "params", shapes);
  Params new_velocity = read_params(r, "velocity", shapes);

  const uint32_t nblocks = r.u32("block count");
  if (nblocks != live.size()) {
    r.fail("block count: expected " + std::to_string(live.size()) + ", found " +
           std::to_string(nblocks));
  }
  std::vector<BlockState> states(live.size());
  for (size_t i = 0; i < live.size(); ++i) {
    const CurvatureBlock &b = *estimator_.blocks()[i];
    const std::string where = "block " + std::to_string(i) + " ('" + b.tag().name + "')";
    r.expect_string(where + " type", b.name());
    r.expect_string(where + " tag", b.tag().name);
    BlockState &s = states[i];
    s.ema_weight = r.f64(where + " ema weight");
    if (!std::isfinite(s.ema_weight) || s.ema_weight < 0.0)
      r.fail(where + " ema weight: expected a finite value >= 0");
    s.have_inverse = r.flag(where + " have_inverse");
    const uint32_t count = r.u32(where + " matrix count");
    if (count != live[i].matrices.size()) {
      r.fail(where + " matrix count: expected " + std::to_string(live[i].matrices.size()) +
             ", found " + std::to_string(count) + " (a different use_exact_inverses?)");
    }
    for (const auto &m : live[i].matrices) {
      // An inverse the block relies on must be there.
      const bool may_be_empty = m.optional && !(m.inverse && s.have_inverse);
      s.matrices.push_back(r.matrix(where + " " + m.name, m.name, m.rows, m.cols, may_be_empty));
    }
  }
  r.expect_end();

  // All checked: commit.
  step_ = static_cast<int>(step);
  burned_in_ = burned_in;
  force_inverse_update_ = force_inverse;
  damping_ = damping;
  damping_boost_ = boost;
  rejected_steps_ = static_cast<int>(rejected);
  inverse_failures_ = static_cast<int>(failures);
  nonfinite_batches_ = static_cast<int>(nonfinite);
  inverse_updates_ = static_cast<int>(inverses);
  curvature_updates_ = static_cast<int>(curvatures);
  rng_ = rng;
  value_rng_ = value_rng;
  velocity_ = std::move(new_velocity);
  // Element-wise, as step() does: a caller's reference to one of params' matrices stays valid.
  if (params.size() == new_params.size()) {
    for (size_t i = 0; i < params.size(); ++i)
      params[i].swap(new_params[i]);
  } else {
    params = std::move(new_params);
  }
  for (size_t i = 0; i < live.size(); ++i) {
    *live[i].ema_weight = states[i].ema_weight;
    *live[i].have_inverse = states[i].have_inverse;
    for (size_t k = 0; k < live[i].matrices.size(); ++k)
      live[i].matrices[k].matrix->swap(states[i].matrices[k]);
  }
}

} // namespace hkfac::kfac
