#include "kiln/client/status.h"

#include <fmt/format.h>

namespace kiln::client {

const ServiceStatus* StackStatus::service(const std::string& name) const {
  for (const auto& s : services)
    if (s.name == name) return &s;
  return nullptr;
}

static std::string formatMicros(uint64_t micros) {
  if (micros == 0) return "-";
  if (micros < 10000) return fmt::format("{}µs", micros);
  return fmt::format("{:.1f}ms", micros / 1000.0);
}

std::string formatStatus(const StackStatus& status) {
  std::string out =
      fmt::format("stack {}  launcher pid {}  up {:.1f}s  version {}\nrun dir {}\n\n", status.name,
                  status.launcherPid, status.uptimeMs / 1000.0, status.version, status.runDir);
  out += fmt::format("{:<12} {:<9} {:<16} {:>8} {:>6} {:>8} {:>8} {:>7} {:>9} {:>9}\n", "SERVICE",
                     "STATE", "PIDS", "RESTARTS", "QUEUE", "INFLIGHT", "SERVED", "ERRORS", "P50",
                     "P99");
  for (const auto& s : status.services) {
    std::string pids;
    for (const auto& w : s.workers) {
      if (!pids.empty()) pids += ",";
      pids += w.pid ? std::to_string(w.pid) : "-";
    }
    out += fmt::format("{:<12} {:<9} {:<16} {:>8} {:>6} {:>8} {:>8} {:>7} {:>9} {:>9}\n", s.name,
                       s.state, pids, s.restarts, s.queueDepth, s.inFlight, s.served, s.errors,
                       formatMicros(s.p50Us), formatMicros(s.p99Us));
    if (!s.failureReason.empty()) out += fmt::format("  ! {}\n", s.failureReason);
  }
  return out;
}

} // namespace kiln::client
