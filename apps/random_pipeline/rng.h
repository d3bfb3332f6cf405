// A small seeded random number generator whose stream is the same on every platform and library.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace hkfac {

// SplitMix64 with integer-only draws. std:: distributions are avoided on purpose: their output is
// implementation-defined, and a random pipeline must be the same pipeline on every machine that
// builds it, or samples from two machines would disagree about what "seed 17" means.
//
// The seed is mixed before it becomes the state. SplitMix64 steps its state by a constant, so a
// state linear in the seed (as it once was) made seed s + 1's stream seed s's shifted by one draw:
// neighbouring seeds then built pipelines that shared whole runs of stages (a dozen seeds near
// 1460 all ended in the same three steps).
class Rng {
public:
  explicit Rng(uint64_t seed = 0) : state_(mix(seed + 0x632BE59BD9B4E019ull)) {}

  uint64_t next() { return mix(state_ += kGamma); }

  // Uniform in [0, n); the modulo bias (< 2^-40 for our n) does not matter here.
  int below(int n) { return n <= 1 ? 0 : static_cast<int>(next() % static_cast<uint64_t>(n)); }

  // Uniform in [lo, hi], both inclusive.
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }

  bool chance(int percent) { return below(100) < percent; }

  // Index drawn with probability proportional to its (non-negative integer) weight.
  int weighted(std::initializer_list<int> weights) {
    int total = 0;
    for (int w : weights) {
      total += w;
    }
    int r = below(total);
    int i = 0;
    for (int w : weights) {
      if (r < w) {
        return i;
      }
      r -= w;
      ++i;
    }
    return i - 1;
  }

  template <typename T> const T &pick(const std::vector<T> &items) {
    return items[below(static_cast<int>(items.size()))];
  }

private:
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  uint64_t state_;
};

} // namespace hkfac
