// What `kiln status` shows: the launcher's view of every service and worker.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::client {

struct WorkerStatus {
  int pid = 0;
  std::string state; // starting idle busy draining backoff failed
  uint64_t served = 0;
  uint32_t restarts = 0;
  uint64_t uptimeMs = 0;
  std::string lastExit;
};

struct ServiceStatus {
  std::string name;
  std::string binary;
  std::string state; // starting running degraded failed stopped
  std::string failureReason;
  uint32_t restarts = 0;
  uint32_t queueDepth = 0;
  uint32_t inFlight = 0;
  uint64_t served = 0;
  uint64_t errors = 0;
  uint64_t p50Us = 0;
  uint64_t p99Us = 0;
  std::vector<WorkerStatus> workers;
};

struct StackStatus {
  std::string name;
  std::string runDir;
  int launcherPid = 0;
  uint64_t uptimeMs = 0;
  std::string version;
  std::vector<ServiceStatus> services;

  const ServiceStatus* service(const std::string& name) const;
};

// The human table printed by `kiln status`.
std::string formatStatus(const StackStatus& status);

} // namespace kiln::client
