// kiln: the command line of the launcher. `kiln up` starts a stack (the
// launcher process: broker + supervisor), the other commands talk to it.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "kiln/client/stack.h"
#include "kiln/common/log.h"
#include "kiln/common/process.h"
#include "kiln/launcher/launcher.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

struct Where {
  std::string config;
  std::string runDir;

  client::StackPaths paths() const {
    const auto stack = launcher::StackConfig::load(config);
    return client::resolveStack(runDir.empty() ? stack.runDir : runDir, stack.name);
  }
};

void onStop(int) {
  launcher::Launcher::requestStop();
}

void installSignals() {
  struct sigaction stop {};
  stop.sa_handler = onStop;
  sigaction(SIGTERM, &stop, nullptr);
  sigaction(SIGINT, &stop, nullptr);
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
}

void printStatus(const client::StackPaths& paths) {
  auto stack = client::Stack::connect(paths.runDir);
  std::cout << client::formatStatus(stack.status()) << std::flush;
}

// The launcher runs in a detached child; the parent returns once it reports
// ready (every service registered) or a problem.
int up(const Where& where, bool foreground) {
  const auto config = launcher::StackConfig::load(where.config);
  const auto paths =
      client::resolveStack(where.runDir.empty() ? config.runDir : where.runDir, config.name);
  launcher::sweepStaleRunDirs(client::stacksRoot());

  if (foreground) {
    installSignals();
    launcher::Launcher stack(config, launcher::RunDir::acquire(paths));
    stack.run([&](const std::string& problem) {
      if (problem.empty())
        log().info("stack ready run_dir={}", paths.runDir);
      else
        log().warn("stack not ready: {}", problem);
    });
    return 0;
  }

  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) throwSystemError("pipe2");
  const pid_t pid = fork();
  if (pid < 0) throwSystemError("fork");
  if (pid == 0) {
    close(ready[0]);
    setsid();
    auto report = [&](const std::string& line) {
      (void)!write(ready[1], line.data(), line.size());
      close(ready[1]);
      ready[1] = -1;
    };
    try {
      auto runDir = launcher::RunDir::acquire(paths);
      const int logFd =
          open(paths.logFile("launcher").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      const int devNull = open("/dev/null", O_RDWR);
      dup2(devNull, 0);
      dup2(logFd, 1);
      dup2(logFd, 2);
      close(logFd);
      close(devNull);
      installSignals();
      launcher::Launcher stack(config, std::move(runDir));
      stack.run([&](const std::string& problem) { report(problem.empty() ? "ok" : problem); });
    } catch (const std::exception& e) {
      if (ready[1] >= 0) report(std::string("error: ") + e.what());
      log().error("launcher failed: {}", e.what());
      _exit(1);
    }
    _exit(0);
  }

  close(ready[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = read(ready[0], buffer, sizeof(buffer))) > 0;) message.append(buffer, n);
  close(ready[0]);
  if (message.empty()) {
    std::cerr << "kiln: the launcher exited during start-up; see " << paths.logFile("launcher")
              << "\n";
    return 1;
  }
  if (message.rfind("error: ", 0) == 0) {
    std::cerr << "kiln: " << message.substr(7) << "\n";
    return 1;
  }
  printStatus(paths);
  if (message != "ok") {
    std::cerr << "kiln: stack started but not ready: " << message << "\n";
    return 1;
  }
  return 0;
}

int down(const Where& where, int timeoutMs) {
  const auto paths = where.paths();
  if (!fs::exists(paths.lockFile())) {
    std::cout << "no kiln stack runs at " << paths.runDir << "\n";
    return 0;
  }
  if (launcher::removeIfStale(paths)) {
    std::cout << "removed the run dir of a dead stack at " << paths.runDir << "\n";
    return 0;
  }
  const int pid = launcher::launcherPid(paths);
  const auto deadline = Clock::now() + Millis(timeoutMs);
  if (pid > 0 && !processAlive(pid)) {
    // A killed launcher's services hold the run dir's lock until they notice
    // and exit: wait for them rather than call the stack live.
    while (Clock::now() < deadline) {
      if (launcher::removeIfStale(paths)) {
        std::cout << "removed the run dir of a dead stack at " << paths.runDir << "\n";
        return 0;
      }
      std::this_thread::sleep_for(Millis(20));
    }
    std::cerr << "kiln: the launcher (pid " << pid << ") is gone but its services still hold "
              << paths.runDir << " after " << timeoutMs << " ms\n";
    return 1;
  }
  client::Stack::connect(paths.runDir).down();
  while (Clock::now() < deadline) {
    if (!processAlive(pid) && !fs::exists(paths.runDir)) {
      std::cout << "stack at " << paths.runDir << " stopped\n";
      return 0;
    }
    std::this_thread::sleep_for(Millis(20));
  }
  std::cerr << "kiln: the launcher (pid " << pid << ") did not stop within " << timeoutMs
            << " ms\n";
  return 1;
}

int swap(const Where& where, const std::string& service, const std::string& binary) {
  auto stack = client::Stack::connect(where.paths().runDir);
  const auto result = stack.swap(service, fs::absolute(binary).string());
  fmt::print("swapped {}: old pids {} -> new pids {}\n", service, fmt::join(result.oldPids, ","),
             fmt::join(result.newPids, ","));
  return 0;
}

int logs(const Where& where, const std::string& service, int lines, bool follow) {
  const auto path = where.paths().logFile(service);
  std::ifstream in(path);
  if (!in) throw Error(ErrorCode::NotFound, fmt::format("no log for '{}' at {}", service, path));
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    tail.push_back(std::move(line));
    if (lines > 0 && tail.size() > static_cast<size_t>(lines)) tail.pop_front();
  }
  for (const auto& line : tail) std::cout << line << "\n";
  std::cout << std::flush;
  while (follow && fs::exists(path)) {
    in.clear();
    for (std::string line; std::getline(in, line);) std::cout << line << "\n" << std::flush;
    std::this_thread::sleep_for(Millis(200));
  }
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app("kiln: the compiler stack's launcher", "kiln");
  app.require_subcommand(1);
  Where where;
  app.add_option("--config", where.config,
                 "stack config (default: the embedded configs/stack.toml)");
  app.add_option("--run-dir", where.runDir, "the stack's run directory (default: from the config)");

  auto* upCommand = app.add_subcommand("up", "start a stack and wait until it is ready");
  bool foreground = false;
  upCommand->add_flag("--foreground", foreground, "run the launcher in this process");
  auto* statusCommand =
      app.add_subcommand("status", "show services, pids, restarts, queues, latency");
  auto* downCommand =
      app.add_subcommand("down", "drain and stop every service, remove the run dir");
  int timeoutMs = 30000;
  downCommand->add_option("--timeout-ms", timeoutMs, "how long to wait for the stack to stop");
  auto* swapCommand = app.add_subcommand("swap", "replace a service's binary while the stack runs");
  std::string service, binary;
  swapCommand->add_option("service", service)->required();
  swapCommand->add_option("binary", binary)->required();
  auto* logsCommand =
      app.add_subcommand("logs", "print a service's log (launcher: the launcher's)");
  int lines = 0;
  bool follow = false;
  logsCommand->add_option("service", service)->required();
  logsCommand->add_option("-n,--lines", lines, "only the last N lines");
  logsCommand->add_flag("-f,--follow", follow, "keep printing new lines");
  auto* pingCommand = app.add_subcommand("ping", "round trip to a service; prints its info");
  pingCommand->add_option("service", service)->required();

  CLI11_PARSE(app, argc, argv);
  initLogger("launcher");
  try {
    if (*upCommand) return up(where, foreground);
    if (*statusCommand) {
      printStatus(where.paths());
      return 0;
    }
    if (*downCommand) return down(where, timeoutMs);
    if (*swapCommand) return swap(where, service, binary);
    if (*logsCommand) return logs(where, service, lines, follow);
    if (*pingCommand) {
      auto stack = client::Stack::connect(where.paths().runDir);
      const auto start = Clock::now();
      const auto info = stack.info(service);
      const auto micros = std::chrono::duration_cast<Micros>(Clock::now() - start).count();
      fmt::print("{} pid {} version {} build {} up {} ms: {} µs\n", info.service, info.pid,
                 info.version, info.buildId, info.uptimeMs, micros);
      return 0;
    }
  } catch (const Error& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    if (!e.detail().empty()) std::cerr << "  " << e.detail() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "kiln: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
