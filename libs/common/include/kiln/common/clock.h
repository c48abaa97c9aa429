// Time as the project measures it: a monotonic clock shared by every process
// on a host (CLOCK_MONOTONIC), in milliseconds and microseconds.
#pragma once

#include <chrono>
#include <cstdint>

namespace kiln {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

inline int64_t millisSince(Clock::time_point start) {
  return std::chrono::duration_cast<Millis>(Clock::now() - start).count();
}

} // namespace kiln
