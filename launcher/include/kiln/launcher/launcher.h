// Launcher: the microkernel. Owns the run dir, the shared-memory segment, the
// broker and the supervisor, and nothing else. Answers "kiln.launcher"
// (status, down, swap) through its own broker. Single-threaded: one loop
// polls the broker, reaps and restarts processes, and advances swaps.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/launcher/config.h"
#include "kiln/launcher/run_dir.h"
#include "kiln/launcher/supervisor.h"
#include "kiln/rpc/broker.h"
#include "kiln/shm/store.h"

namespace kiln::launcher {

class Launcher {
public:
  // Creates the segment in the (acquired) run dir, binds the broker, starts every service.
  Launcher(StackConfig config, RunDir runDir);
  ~Launcher();

  // Serves until `down` or requestStop(), then drains and stops every
  // service and removes the run dir. `onReady` is called once, when every
  // service has registered (problem empty) or the ready timeout passed or a
  // service failed (problem says which).
  void run(const std::function<void(const std::string& problem)>& onReady);

  // Async-signal-safe.
  static void requestStop() { stopRequested_.store(true); }

private:
  struct Swap;

  void handle(rpc::Message& body, const rpc::ReplyTo& to);
  void buildStatus(capnp::MessageBuilder& reply) const;
  void beginSwap(const rpc::ReplyTo& to, const std::string& service, const std::string& binary);
  void advanceSwaps();
  void afterExits(const std::vector<ProcessExit>& exits);
  void killHungWorkers();
  std::string readiness() const;
  void shutdown();

  StackConfig config_;
  RunDir runDir_;
  shm::Store store_;
  std::unique_ptr<rpc::Broker> broker_;
  std::unique_ptr<Supervisor> supervisor_;
  std::vector<std::unique_ptr<Swap>> swaps_;
  Clock::time_point startedAt_;
  bool downRequested_ = false;
  static std::atomic<bool> stopRequested_;
};

} // namespace kiln::launcher
