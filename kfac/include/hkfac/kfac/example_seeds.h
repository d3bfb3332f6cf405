// Per-example random streams for the sampled estimation modes.
#pragma once

#include <cstdint>
#include <limits>

namespace hkfac::kfac {

// SplitMix64 (Steele, Lea & Flood 2014): a 64-bit generator whose whole state is one counter,
// so seeding one per example costs nothing, unlike a std::mt19937's 2.5 KB. A
// UniformRandomBitGenerator, for the <random> distributions.
class ExampleRng {
public:
  using result_type = uint64_t;
  explicit ExampleRng(uint64_t seed) : state_(seed) {}
  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint64_t>::max(); }
  result_type operator()() { return mix(state_ += 0x9e3779b97f4a7c15ull); }
  // SplitMix64's output function: a bijection of 64-bit words that scatters nearby inputs.
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

private:
  uint64_t state_;
};

// The draws of one curvature estimate. Row i of a batch whose first example has the global index
// `first_example` draws from its own stream, keyed by (key, first_example + i): the draws of an
// example depend on its place in the global batch only, so a batch split across ranks
// (multi_device) draws exactly what the whole batch draws in one process. `key` is fresh for
// every estimate (the optimizer draws it from its seeded generator).
struct ExampleSeeds {
  uint64_t key = 0;
  int64_t first_example = 0;

  ExampleRng rng(int64_t row) const {
    return ExampleRng(
        ExampleRng::mix(key ^ ExampleRng::mix(static_cast<uint64_t>(first_example + row))));
  }
  // An independent key for another use of the same examples (another loss, another estimate).
  ExampleSeeds stream(uint64_t which) const {
    return {ExampleRng::mix(key + 0x632be59bd9b4e019ull * (which + 1)), first_example};
  }
};

} // namespace hkfac::kfac
