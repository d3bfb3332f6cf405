// Passes over whole parameter lists, split into fixed chunks and run on the Halide runtime's
// thread pool.
//
// The optimizer's vector arithmetic (dots, norms, the update itself) reads every parameter
// several times a step. Run serially it left the second core idle for a fifth of a K-FAC step on
// the Fashion-MNIST autoencoder (2.8M parameters, 11 MB per list). The generated kernels already
// own a worker pool; handing it these loops too avoids a second pool competing for the cores.
//
// Chunks do not depend on the thread count, and every reduction sums its chunks' partial sums
// in chunk order, so results are the same bit for bit however many workers run them.
#pragma once

#include <HalideRuntime.h>

#include <algorithm>
#include <vector>

#include "hkfac/kfac/types.h"

namespace hkfac::kfac::detail {

struct Chunk {
  size_t tensor = 0;
  Eigen::Index begin = 0;
  Eigen::Index end = 0;
};

// 32K floats: 128 KB per list, so a pass over three or four lists keeps its chunk in L2 while
// it forms several sums, and a 2.8M-parameter list makes ~90 tasks to balance.
constexpr Eigen::Index kChunkElements = Eigen::Index{1} << 15;
// Below this many elements in all, waking workers costs more than the pass.
constexpr Eigen::Index kParallelMinElements = Eigen::Index{1} << 16;

inline std::vector<Chunk> chunks_of(const Params &shape) {
  std::vector<Chunk> out;
  for (size_t t = 0; t < shape.size(); ++t) {
    const Eigen::Index n = shape[t].size();
    for (Eigen::Index b = 0; b < n; b += kChunkElements)
      out.push_back({t, b, std::min(n, b + kChunkElements)});
  }
  return out;
}

inline Eigen::Index total_elements(const Params &shape) {
  Eigen::Index n = 0;
  for (const Matrix &m : shape)
    n += m.size();
  return n;
}

// Calls body(chunk_index) for every index in [0, count), in parallel when `parallel`. The body
// must not throw (arithmetic only): a worker thread has nowhere to send an exception.
template <class Body> void run_chunks(int count, bool parallel, Body &body) {
  if (!parallel || count <= 1) {
    for (int i = 0; i < count; ++i)
      body(i);
    return;
  }
  auto task = [](void *, int i, uint8_t *closure) -> int {
    (*reinterpret_cast<Body *>(closure))(i);
    return 0;
  };
  halide_do_par_for(nullptr, task, 0, count, reinterpret_cast<uint8_t *>(&body));
}

// Calls body(first, end) over consecutive ranges of `rows` independent rows of `cols` values
// each, about kChunkElements values per range, in parallel when there are enough in all.
template <class Body> void for_row_ranges(Eigen::Index rows, Eigen::Index cols, Body body) {
  const Eigen::Index per =
      std::max<Eigen::Index>(1, kChunkElements / std::max<Eigen::Index>(1, cols));
  const int count = static_cast<int>((rows + per - 1) / per);
  auto one = [&](int i) { body(i * per, std::min(rows, (i + 1) * per)); };
  run_chunks(count, rows * cols >= kParallelMinElements, one);
}

// Runs body(chunk, sums) over the chunks of `shape`; body adds its chunk's contributions into
// sums[0..num_sums). Returns the num_sums totals, each summed over chunks in chunk order.
template <class Body>
std::vector<double> reduce_chunks(const Params &shape, int num_sums, Body body) {
  const std::vector<Chunk> chunks = chunks_of(shape);
  std::vector<double> partial(chunks.size() * static_cast<size_t>(num_sums), 0.0);
  auto one = [&](int i) { body(chunks[i], &partial[static_cast<size_t>(i) * num_sums]); };
  run_chunks(static_cast<int>(chunks.size()), total_elements(shape) >= kParallelMinElements, one);
  std::vector<double> total(static_cast<size_t>(num_sums), 0.0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    for (int s = 0; s < num_sums; ++s)
      total[s] += partial[c * num_sums + s];
  }
  return total;
}

// Runs body(chunk) over the chunks of `shape` (element-wise passes that write).
template <class Body> void for_chunks(const Params &shape, Body body) {
  const std::vector<Chunk> chunks = chunks_of(shape);
  auto one = [&](int i) { body(chunks[i]); };
  run_chunks(static_cast<int>(chunks.size()), total_elements(shape) >= kParallelMinElements, one);
}

} // namespace hkfac::kfac::detail
