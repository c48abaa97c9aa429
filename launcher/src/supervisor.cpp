#include "kiln/launcher/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "kiln/common/error.h"
#include "kiln/common/log.h"
#include "kiln/common/process.h"

namespace fs = std::filesystem;

namespace kiln::launcher {

std::string describeExit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("ended with wait status {}", status);
}

std::string Supervisor::resolveBinary(const std::string& binary) {
  auto executable = [](const fs::path& p) {
    return access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p);
  };
  if (binary.find('/') != std::string::npos) {
    const fs::path path = fs::absolute(binary);
    if (executable(path)) return path.string();
    throw Error(ErrorCode::NotFound, fmt::format("{} is not an executable file", path.string()));
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && executable(self.parent_path() / binary)) return (self.parent_path() / binary).string();
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    size_t start = 0;
    while (start <= dirs.size()) {
      const size_t end = std::min(dirs.find(':', start), dirs.size());
      const fs::path candidate = fs::path(dirs.substr(start, end - start)) / binary;
      if (end > start && executable(candidate)) return candidate.string();
      start = end + 1;
    }
  }
  throw Error(ErrorCode::NotFound,
              fmt::format("service binary '{}' is neither beside {} nor on PATH", binary,
                          self.parent_path().string()));
}

Supervisor::Supervisor(SupervisorOptions options) : options_(std::move(options)) {}

Supervisor::~Supervisor() {
  for (auto& slot : slots_)
    if (slot.pid > 0) {
      ::kill(slot.pid, SIGKILL);
      waitpid(slot.pid, nullptr, 0);
    }
}

void Supervisor::start(const ServiceConfig& service) {
  std::string binary;
  std::string problem;
  try {
    binary = resolveBinary(service.binary);
  } catch (const Error& e) {
    problem = e.message();
  }
  for (int i = 0; i < service.workers; ++i) {
    Slot& slot = slots_.emplace_back();
    slot.service = service.name;
    slot.binary = binary;
    if (!problem.empty()) {
      slot.state = SlotState::Failed;
      slot.lastExit = problem;
      continue;
    }
    launch(slot);
  }
}

std::vector<int> Supervisor::startExtra(const std::string& service, const std::string& binary,
                                        int count) {
  const std::string path = resolveBinary(binary);
  std::vector<int> pids;
  for (int i = 0; i < count; ++i) {
    Slot& slot = slots_.emplace_back();
    slot.service = service;
    slot.binary = path;
    launch(slot);
    if (slot.state == SlotState::Running) {
      pids.push_back(slot.pid);
      continue;
    }
    // All or nothing: a swap that cannot start every new worker starts none.
    const Error failure(ErrorCode::NotFound, slot.lastExit);
    slots_.pop_back();
    for (int pid : pids) {
      retire(pid);
      ::kill(pid, SIGKILL);
    }
    throw failure;
  }
  return pids;
}

// The service's log is its stdout/stderr. Children die with the launcher
// (spawnProcess), so a crashed launcher leaves no orphans; an exec failure
// fails the slot at once.
void Supervisor::launch(Slot& slot) {
  std::vector<std::string> argv = {slot.binary, "--service-name", slot.service};
  argv.insert(argv.end(), options_.serviceArgs.begin(), options_.serviceArgs.end());
  const std::string logPath = options_.logDir + "/" + slot.service + ".log";
  const int logFd = open(logPath.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (logFd < 0) throwSystemError("open " + logPath);
  SpawnOptions spawn;
  spawn.stdoutFd = logFd;
  spawn.ownProcessGroup = true; // a terminal's Ctrl-C goes to the launcher, which drains services
  try {
    slot.pid = spawnProcess(argv, spawn);
  } catch (const Error& e) {
    close(logFd);
    slot.pid = 0;
    slot.state = SlotState::Failed;
    slot.lastExit = e.message();
    log().error("service={} {}", slot.service, slot.lastExit);
    return;
  }
  close(logFd);
  slot.state = SlotState::Running;
  slot.startedAt = Clock::now();
  log().info("started service={} pid={} binary={}", slot.service, slot.pid, slot.binary);
}

std::vector<ProcessExit> Supervisor::reap() {
  std::vector<ProcessExit> exits;
  for (;;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) break;
    auto slot =
        std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.pid == pid; });
    if (slot == slots_.end()) continue;
    const std::string how = describeExit(status);
    const bool expected = slot->state == SlotState::Retiring;
    exits.push_back(ProcessExit{pid, slot->service, how, expected});
    if (expected) {
      log().info("stopped service={} pid={} {}", slot->service, pid, how);
      slots_.erase(slot);
    } else {
      crashed(*slot, how);
    }
  }
  return exits;
}

void Supervisor::crashed(Slot& slot, const std::string& exit) {
  const auto now = Clock::now();
  const std::string how =
      slot.killedBecause.empty() ? exit : slot.killedBecause + " (" + exit + ")";
  slot.killedBecause.clear();
  slot.pid = 0;
  slot.lastExit = how;
  slot.crashes.push_back(now);
  while (!slot.crashes.empty() && now - slot.crashes.front() > options_.crashWindow)
    slot.crashes.pop_front();
  const int recent = static_cast<int>(slot.crashes.size());
  if (recent > options_.crashBudget) {
    slot.state = SlotState::Failed;
    slot.lastExit = fmt::format("{} crashed {} times within {} s (crash budget {}); last: {}",
                                fs::path(slot.binary).filename().string(), recent,
                                options_.crashWindow.count(), options_.crashBudget, how);
    log().error("service={} failed: {}", slot.service, slot.lastExit);
    return;
  }
  // Doubling backoff over the crashes in the window: a lone crash restarts fast.
  Millis delay = options_.backoffInitial;
  for (int i = 1; i < recent && delay < options_.backoffMax; ++i) delay *= 2;
  delay = std::min(delay, options_.backoffMax);
  slot.state = SlotState::Backoff;
  slot.restartAt = now + delay;
  log().warn("service={} crashed: {}; restarting in {} ms", slot.service, how, delay.count());
}

void Supervisor::restartDue() {
  const auto now = Clock::now();
  for (auto& slot : slots_) {
    if (slot.state != SlotState::Backoff || slot.restartAt > now) continue;
    ++slot.restarts;
    launch(slot);
  }
}

void Supervisor::retire(int pid) {
  for (auto& slot : slots_)
    if (slot.pid == pid) slot.state = SlotState::Retiring;
}

void Supervisor::signal(int pid, int sig) {
  if (slotOf(pid)) ::kill(pid, sig);
}

void Supervisor::kill(int pid, const std::string& why) {
  for (auto& slot : slots_) {
    if (slot.pid != pid || pid <= 0 || !slot.killedBecause.empty()) continue;
    slot.killedBecause = why;
    log().warn("killing service={} pid={}: {}", slot.service, pid, why);
    ::kill(pid, SIGKILL);
  }
}

void Supervisor::retireAll(int sig) {
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (it->pid <= 0) {
      it = slots_.erase(it);
      continue;
    }
    it->state = SlotState::Retiring;
    if (sig) ::kill(it->pid, sig);
    ++it;
  }
}

bool Supervisor::anyRunning() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pid > 0; });
}

bool Supervisor::failed(const std::string& service) const {
  bool any = false;
  for (const auto& slot : slots_) {
    if (slot.service != service || slot.state == SlotState::Retiring) continue;
    if (slot.state != SlotState::Failed) return false;
    any = true;
  }
  return any;
}

std::string Supervisor::failureReason(const std::string& service) const {
  for (const auto& slot : slots_)
    if (slot.service == service && slot.state == SlotState::Failed) return slot.lastExit;
  return {};
}

std::vector<const Slot*> Supervisor::slots(const std::string& service) const {
  std::vector<const Slot*> out;
  for (const auto& slot : slots_)
    if (slot.service == service) out.push_back(&slot);
  return out;
}

const Slot* Supervisor::slotOf(int pid) const {
  for (const auto& slot : slots_)
    if (slot.pid == pid && pid > 0) return &slot;
  return nullptr;
}

} // namespace kiln::launcher
