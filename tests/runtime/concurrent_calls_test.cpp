// Kernels called from several threads at once give each caller the bits it gets alone. A plugin
// may score candidates from its own worker threads, and several optimizers may step side by side;
// the dispatch keeps per-thread state (the staging blocks for unaligned arguments, the cost
// model's padded batch, the last Halide error), which a shared cache would corrupt under load.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "hkfac/buffer.h"
#include "hkfac/kernels/cost_model.h"
#include "hkfac/kernels/covariance.h"
#include "hkfac/kernels/gemm.h"
#include "../test_util.h"

namespace hkfac {
namespace {

using namespace kernels;

using testing::random_buffer;

// A view one float into a larger allocation: not 64-byte aligned, so every call stages it
// through the calling thread's aligned blocks.
struct Unaligned {
  Buffer<float> storage;
  Buffer<float> view;
  Unaligned(int rows, int cols, unsigned seed) : storage(cols + 1, rows) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for_each_value(storage, [&](float &x) { x = u(rng); });
    halide_dimension_t dims[2] = {{0, cols, 1, 0}, {0, rows, cols + 1, 0}};
    view = Buffer<float>(storage.data() + 1, 2, dims);
  }
};

bool same_bits(const Buffer<float> &a, const Buffer<float> &b) {
  if (a.number_of_elements() != b.number_of_elements())
    return false;
  std::vector<float> va, vb;
  for_each_value(a, [&](float x) { va.push_back(x); });
  for_each_value(b, [&](float x) { vb.push_back(x); });
  return std::memcmp(va.data(), vb.data(), va.size() * sizeof(float)) == 0;
}

// One caller's work: a cost-model batch of its own size (1 is padded per thread), a product from
// unaligned operands and a covariance update, each repeated.
struct Work {
  Buffer<float> pf, sf, predictions;
  CostModelWeights w;
  Unaligned a, b;
  Buffer<float> c, x, cov; // cov: X̄ with its ones column, one wider than X

  Work(int batch, unsigned seed)
      : pf(random_buffer({40, 7, 6}, seed)), sf(random_buffer({batch, 39, 6}, seed + 1)),
        predictions(batch), w(testing::random_cost_model_weights(seed + 5)), a(37, 50, seed + 2),
        b(50, 21, seed + 3), c(make_matrix<float>(37, 21)),
        x(testing::random_matrix(64, 33 + batch, seed + 4)),
        cov(make_matrix<float>(34 + batch, 34 + batch)) {}
  // Runs `rounds` rounds and returns how many gave other bits than `reference`'s (every round is
  // checked: a later round would overwrite an earlier round's damage).
  int run(int rounds, const Work *reference = nullptr) {
    int mismatches = 0;
    for (int r = 0; r < rounds; ++r) {
      cost_model_predict(pf, sf, w, 2, predictions);
      gemm(c, a.view, Transpose::no, b.view, Transpose::no);
      // a = 0: each round's result is the same single update, not a growing sum.
      covariance_update(cov, x, 0.0f, 1.0f, true);
      if (reference && !(same_bits(predictions, reference->predictions) &&
                         same_bits(c, reference->c) && same_bits(cov, reference->cov))) {
        ++mismatches;
      }
    }
    return mismatches;
  }
};

TEST(ConcurrentCalls, EachThreadGetsItsSerialResults) {
  const int threads = 4, rounds = 200;
  const int batches[threads] = {1, 3, 16, 40};
  std::vector<Work> alone, together;
  for (int t = 0; t < threads; ++t) {
    alone.emplace_back(batches[t], 100 * t + 1);
    together.emplace_back(batches[t], 100 * t + 1);
  }
  for (Work &w : alone)
    w.run(1);
  int mismatches[threads] = {};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { mismatches[t] = together[t].run(rounds, &alone[t]); });
  for (std::thread &th : pool)
    th.join();
  for (int t = 0; t < threads; ++t)
    EXPECT_EQ(mismatches[t], 0) << "thread " << t << " (batch " << batches[t] << ")";
}

// An argument error on one thread is that thread's, with its own message, while the others run.
TEST(ConcurrentCalls, ErrorsStayWithTheirThread) {
  const int rounds = 200;
  Work ok(16, 7);
  Work reference(16, 7);
  reference.run(1);
  int wrong_messages = 0, missing_errors = 0;
  std::thread failing([&] {
    Buffer<float> C = make_matrix<float>(5, 5), A = make_matrix<float>(5, 4),
                  B = make_matrix<float>(3, 5);
    for (int r = 0; r < rounds; ++r) {
      try {
        gemm(C, A, Transpose::no, B, Transpose::no);
        ++missing_errors;
      } catch (const Error &e) {
        if (std::string(e.what()).find("gemm") == std::string::npos)
          ++wrong_messages;
      }
    }
  });
  EXPECT_EQ(ok.run(rounds, &reference), 0);
  failing.join();
  EXPECT_EQ(missing_errors, 0);
  EXPECT_EQ(wrong_messages, 0);
}

} // namespace
} // namespace hkfac
