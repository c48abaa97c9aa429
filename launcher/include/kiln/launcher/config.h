// StackConfig: what a stack runs and how it is supervised, read from TOML
// (configs/stack.toml is the embedded default).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "kiln/common/clock.h"

namespace kiln::launcher {

struct ServiceConfig {
  std::string name;
  std::string binary;
  int workers = 1;
};

struct StackConfig {
  std::string name = "default";
  std::string runDir; // empty: resolved by client::resolveStack
  size_t shmBytes = size_t{1} << 30;
  Millis readyTimeout{20000};

  Millis heartbeat{250};
  int liveness = 4;
  int maxAttempts = 3;
  size_t maxQueue = 10000;

  Millis backoffInitial{100};
  Millis backoffMax{5000};
  int crashBudget = 5;
  std::chrono::seconds crashWindow{60};
  Millis stopTimeout{5000};
  Millis hangGrace{10000}; // 0: never kill a worker for holding an expired request

  std::vector<ServiceConfig> services; // in pipeline order

  // Throws Error{invalid_argument} naming `origin` and the offending key.
  static StackConfig parse(const std::string& toml, const std::string& origin);
  // `path` empty: the embedded configs/stack.toml.
  static StackConfig load(const std::string& path);
  static const std::string& embeddedDefault();

  const ServiceConfig* service(const std::string& name) const;
};

} // namespace kiln::launcher
