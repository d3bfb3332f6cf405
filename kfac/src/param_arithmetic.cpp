// Arithmetic on parameter lists.
#include "hkfac/kfac/types.h"

#include "hkfac/error.h"
#include "parallel_chunks.h"

#include <algorithm>
#include <cmath>

namespace hkfac::kfac {

void check_same_shapes(const Params &a, const Params &b, const char *what) {
  if (a.size() != b.size()) {
    throw Error(std::string(what) + ": parameter lists have " + std::to_string(a.size()) + " and " +
                std::to_string(b.size()) + " tensors");
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].rows() != b[i].rows() || a[i].cols() != b[i].cols()) {
      throw Error(std::string(what) + ": tensor " + std::to_string(i) + " is " +
                  std::to_string(a[i].rows()) + " x " + std::to_string(a[i].cols()) + " in one " +
                  "list and " + std::to_string(b[i].rows()) + " x " + std::to_string(b[i].cols()) +
                  " in the other");
    }
  }
}

Params zeros_like(const Params &p) {
  Params z;
  z.reserve(p.size());
  for (const Matrix &m : p)
    z.push_back(Matrix::Zero(m.rows(), m.cols()));
  return z;
}

namespace {

// Sums term(i) for i < n in double with kLanes independent accumulators. Each lane is its own
// sequential sum, so the compiler may keep the lanes in vector registers without reassociating
// anything. Eigen's cast<double>() reductions ran scalar, several times slower (see
// docs/RESULTS.md#step-overheads).
constexpr int kLanes = 16;

template <class Term>
double lane_sum(Eigen::Index n, Term term) {
  double acc[kLanes] = {};
  Eigen::Index i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l)
      acc[l] += term(i + l);
  }
  double s = 0.0;
  for (; i < n; ++i)
    s += term(i);
  for (double a : acc)
    s += a;
  return s;
}

} // namespace

double dot(const Matrix &a, const Matrix &b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    throw Error("kfac::dot: matrices are " + std::to_string(a.rows()) + " x " +
                std::to_string(a.cols()) + " and " + std::to_string(b.rows()) + " x " +
                std::to_string(b.cols()));
  }
  const float *x = a.data(), *y = b.data();
  return lane_sum(a.size(), [=](Eigen::Index k) {
    return static_cast<double>(x[k]) * static_cast<double>(y[k]);
  });
}

double dot(const Params &a, const Params &b) {
  check_same_shapes(a, b, "kfac::dot");
  return detail::reduce_chunks(a, 1, [&](const detail::Chunk &c, double *sum) {
    const float *x = a[c.tensor].data() + c.begin, *y = b[c.tensor].data() + c.begin;
    *sum += lane_sum(c.end - c.begin, [=](Eigen::Index k) {
      return static_cast<double>(x[k]) * static_cast<double>(y[k]);
    });
  })[0];
}

double squared_norm(const Params &p) {
  return detail::reduce_chunks(p, 1, [&](const detail::Chunk &c, double *sum) {
    const float *x = p[c.tensor].data() + c.begin;
    *sum += lane_sum(c.end - c.begin, [=](Eigen::Index k) {
      return static_cast<double>(x[k]) * static_cast<double>(x[k]);
    });
  })[0];
}

namespace {

// Adds every pairwise product of K lists over n elements into out[pair], pairs (i, j), i <= j,
// in row order. Widening to double is what these sums spend their time on, so each element is
// widened once, into a block buffer in L1, for all its pairs: with lane_sum on the floats
// directly (widening each element K times) the three-list Gram took as long as six separate
// dots (see docs/RESULTS.md#step-overheads).
template <int K>
void pair_sums(const float *const *x, Eigen::Index n, double *out) {
  constexpr Eigen::Index kBlock = 512; // K blocks of 4 KB
  double buf[K][kBlock];
  for (Eigen::Index b = 0; b < n; b += kBlock) {
    const Eigen::Index m = std::min(kBlock, n - b);
    for (int i = 0; i < K; ++i) {
      for (Eigen::Index e = 0; e < m; ++e)
        buf[i][e] = static_cast<double>(x[i][b + e]);
    }
    int p = 0;
    for (int i = 0; i < K; ++i) {
      for (int j = i; j < K; ++j, ++p) {
        const double *u = buf[i], *v = buf[j];
        out[p] += lane_sum(m, [=](Eigen::Index e) { return u[e] * v[e]; });
      }
    }
  }
}

} // namespace

Eigen::MatrixXd gram(const std::vector<const Params *> &lists) {
  if (lists.empty())
    return Eigen::MatrixXd(0, 0);
  for (size_t i = 1; i < lists.size(); ++i)
    check_same_shapes(*lists[0], *lists[i], "kfac::gram");
  const int k = static_cast<int>(lists.size());
  const int num_pairs = k * (k + 1) / 2;
  const std::vector<double> sums =
      detail::reduce_chunks(*lists[0], num_pairs, [&](const detail::Chunk &c, double *out) {
        const float *x[4];
        const Eigen::Index n = c.end - c.begin;
        if (k <= 4) {
          for (int i = 0; i < k; ++i)
            x[i] = (*lists[i])[c.tensor].data() + c.begin;
        }
        switch (k) {
        case 1: pair_sums<1>(x, n, out); return;
        case 2: pair_sums<2>(x, n, out); return;
        case 3: pair_sums<3>(x, n, out); return;
        case 4: pair_sums<4>(x, n, out); return;
        default: break;
        }
        // More lists: pair by pair (a chunk of every list is 128 KB, so the re-reads hit L2).
        int p = 0;
        for (int i = 0; i < k; ++i) {
          for (int j = i; j < k; ++j) {
            const float *pair[2] = {(*lists[i])[c.tensor].data() + c.begin,
                                    (*lists[j])[c.tensor].data() + c.begin};
            double s[3] = {};
            pair_sums<2>(pair, n, s);
            out[p++] += s[1];
          }
        }
      });
  Eigen::MatrixXd g(k, k);
  int p = 0;
  for (int i = 0; i < k; ++i) {
    for (int j = i; j < k; ++j)
      g(i, j) = g(j, i) = sums[p++];
  }
  return g;
}

namespace {

// A list with x's shapes whose elements are all about to be written: no zero fill.
Params uninitialized_like(const Params &x) {
  Params out;
  out.reserve(x.size());
  for (const Matrix &m : x)
    out.emplace_back(m.rows(), m.cols());
  return out;
}

// Makes `out` x's shapes, reusing its storage when it already has them.
void reshape_like(const Params &x, Params &out) {
  out.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (out[i].rows() != x[i].rows() || out[i].cols() != x[i].cols())
      out[i].resize(x[i].rows(), x[i].cols());
  }
}

// delta = alpha x + beta y, next = base + delta over n elements. A function of its own so the
// compiler sees values and unaliased pointers (inside the chunk lambda it reloaded the captured
// factors and did not vectorise the loop; see docs/RESULTS.md#step-overheads).
void step_elements(float alpha, const float *__restrict x, float beta, const float *__restrict y,
                   const float *__restrict base, float *__restrict delta, float *__restrict next,
                   Eigen::Index n) {
  for (Eigen::Index e = 0; e < n; ++e) {
    const float d = alpha * x[e] + beta * y[e];
    delta[e] = d;
    next[e] = base[e] + d;
  }
}

} // namespace

Params combine(float alpha, const Params &x, float beta, const Params &y) {
  check_same_shapes(x, y, "kfac::combine");
  // A plain loop, not the worker pool: the output is fresh memory, and the page faults of its
  // first touch, not the arithmetic, sets the time, serial or on the pool alike (see
  // docs/RESULTS.md#step-overheads). The optimizer uses form_step, which writes into kept lists.
  Params out = uninitialized_like(x);
  for (size_t t = 0; t < x.size(); ++t) {
    const float *a = x[t].data(), *b = y[t].data();
    float *o = out[t].data();
    for (Eigen::Index e = 0; e < x[t].size(); ++e)
      o[e] = alpha * a[e] + beta * b[e];
  }
  return out;
}

StepSums form_step(float alpha, const Params &x, float beta, const Params &y, const Params &base,
                   const Params &g, Params &delta, Params &next) {
  check_same_shapes(x, y, "kfac::form_step (x, y)");
  check_same_shapes(x, base, "kfac::form_step (x, base)");
  check_same_shapes(x, g, "kfac::form_step (x, g)");
  reshape_like(x, delta);
  reshape_like(x, next);
  const std::vector<double> sums =
      detail::reduce_chunks(x, 3, [&](const detail::Chunk &c, double *out) {
        const float *xp = x[c.tensor].data() + c.begin, *yp = y[c.tensor].data() + c.begin;
        const float *bp = base[c.tensor].data() + c.begin, *gp = g[c.tensor].data() + c.begin;
        float *dp = delta[c.tensor].data() + c.begin, *np = next[c.tensor].data() + c.begin;
        const Eigen::Index n = c.end - c.begin;
        // The update in float (the same expressions as combine(alpha, x, beta, y) and
        // combine(1, base, 1, delta)), then the sums from the values written, block by block
        // while they are in L1.
        constexpr Eigen::Index kBlock = 1024;
        for (Eigen::Index b = 0; b < n; b += kBlock) {
          const Eigen::Index m = std::min(kBlock, n - b);
          step_elements(alpha, xp + b, beta, yp + b, bp + b, dp + b, np + b, m);
          const float *db = dp + b, *nb = np + b, *gb = gp + b;
          out[0] += lane_sum(m, [=](Eigen::Index e) {
            return static_cast<double>(db[e]) * static_cast<double>(db[e]);
          });
          out[1] += lane_sum(m, [=](Eigen::Index e) {
            return static_cast<double>(gb[e]) * static_cast<double>(db[e]);
          });
          out[2] += lane_sum(m, [=](Eigen::Index e) {
            return static_cast<double>(nb[e]) * static_cast<double>(nb[e]);
          });
        }
      });
  return {sums[0], sums[1], sums[2]};
}

void axpy(float alpha, const Params &x, Params &y) {
  check_same_shapes(x, y, "kfac::axpy");
  detail::for_chunks(x, [&](const detail::Chunk &c) {
    const float *a = x[c.tensor].data();
    float *o = y[c.tensor].data();
    for (Eigen::Index e = c.begin; e < c.end; ++e)
      o[e] += alpha * a[e];
  });
}

void scale(float alpha, Params &p) {
  detail::for_chunks(p, [&](const detail::Chunk &c) {
    float *o = p[c.tensor].data();
    for (Eigen::Index e = c.begin; e < c.end; ++e)
      o[e] *= alpha;
  });
}

bool all_finite(const Params &p) {
  // The squares of finite floats, summed in double, cannot overflow: the squared norm is finite
  // exactly when every element is (Eigen's allFinite ran scalar, as the reductions above did).
  return std::isfinite(squared_norm(p));
}

} // namespace hkfac::kfac
