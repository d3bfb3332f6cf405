// An app's place in a data-parallel run (--multi_device under mpirun): the communicator and the
// rows of each global batch this rank reads.
#pragma once

#include <memory>

#include "hkfac/kfac/communicator.h"

namespace hkfac::apps {

// Rank r of p reads rows [first, first + rows) of every global batch of `batch_size` rows (the
// split is as even as it can be); without multi_device, one process reads them all. Ranks other
// than 0 have stdout silenced, so that an app's log is printed once; `leads` says which rank
// logs and writes files.
struct BatchShard {
  std::shared_ptr<kfac::Communicator> comm; // null without multi_device
  int first = 0, rows = 0;
  bool leads() const { return !comm || comm->rank() == 0; }
};

// Joins MPI_COMM_WORLD when `multi_device`; --batch_size must give every rank a row (an error
// naming the flag otherwise).
BatchShard shard_batches(int batch_size, bool multi_device);

} // namespace hkfac::apps
