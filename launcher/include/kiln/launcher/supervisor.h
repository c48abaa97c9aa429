// Supervisor: starts the service processes, reaps them, restarts the ones that
// crash with exponential backoff, and marks a service failed once it spends
// its crash budget (crashes within a window), saying why. Processes it is
// told to retire (drained, swapped out, shutting down) are not restarted.
#pragma once

#include <deque>
#include <string>
#include <vector>

#include "kiln/common/clock.h"
#include "kiln/launcher/config.h"

namespace kiln::launcher {

struct SupervisorOptions {
  Millis backoffInitial{100};
  Millis backoffMax{5000};
  int crashBudget = 5;
  std::chrono::seconds crashWindow{60};
  std::vector<std::string> serviceArgs; // appended to every service's command line
  std::string logDir;                   // <service>.log gets each process's stdout/stderr
};

enum class SlotState { Running, Backoff, Failed, Retiring };

// One supervised process position of a service (a service has `workers` slots).
struct Slot {
  std::string service;
  std::string binary; // resolved path
  SlotState state = SlotState::Backoff;
  int pid = 0;
  Clock::time_point startedAt;
  Clock::time_point restartAt;
  uint32_t restarts = 0;
  std::deque<Clock::time_point> crashes; // within the crash window
  std::string lastExit;
  std::string killedBecause; // set by Supervisor::kill until the exit is reaped
};

struct ProcessExit {
  int pid;
  std::string service;
  std::string how; // "exited with status 1", "killed by signal 9 (Killed)"
  bool expected;   // it was retiring
};

class Supervisor {
public:
  explicit Supervisor(SupervisorOptions options);
  ~Supervisor(); // kills what is still running

  // Adds `workers` slots for the service and starts them.
  void start(const ServiceConfig& service);
  // Adds `count` more slots running `binary` (a swap); returns their pids.
  // Throws Error{not_found} (and starts none) if the binary cannot be executed.
  std::vector<int> startExtra(const std::string& service, const std::string& binary, int count);

  // Collects exited children (never blocks), schedules restarts; returns the exits.
  std::vector<ProcessExit> reap();
  // Starts the slots whose backoff has passed.
  void restartDue();

  // The process of `pid` may exit: its slot is removed then, not restarted.
  void retire(int pid);
  void signal(int pid, int sig);
  // SIGKILLs a process we no longer trust; `why` becomes its slot's last exit.
  void kill(int pid, const std::string& why);
  // Retires every slot and sends `sig` to every live process.
  void retireAll(int sig);
  bool anyRunning() const;

  bool failed(const std::string& service) const;
  std::string failureReason(const std::string& service) const;
  std::vector<const Slot*> slots(const std::string& service) const;
  const Slot* slotOf(int pid) const;

  // Resolves a binary name: a path, or a name beside this executable, or on PATH.
  static std::string resolveBinary(const std::string& binary);

private:
  void launch(Slot& slot);
  void crashed(Slot& slot, const std::string& how);

  SupervisorOptions options_;
  std::deque<Slot> slots_; // deque: stable addresses
};

// "exited with status 1" / "killed by signal 9 (Killed)" for a waitpid status.
std::string describeExit(int status);

} // namespace kiln::launcher
