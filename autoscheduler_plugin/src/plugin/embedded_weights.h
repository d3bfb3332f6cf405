// The baseline weights compiled into the plugin (weights/baseline.weights at build time).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hkfac::sched {

const uint8_t *embedded_baseline_weights();
size_t embedded_baseline_weights_size();

} // namespace hkfac::sched
