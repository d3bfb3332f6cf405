// How many vector registers a CPU target's register blocks may fill: the one fact the matmul and
// covariance schedules size their accumulator blocks by.
#pragma once

namespace hkfac::sched {

// x86-64 with AVX-512 (16 float lanes) has 32 vector registers; AVX2 and SSE have 16.
inline int vector_registers(int float_lanes) { return float_lanes >= 16 ? 32 : 16; }

} // namespace hkfac::sched
