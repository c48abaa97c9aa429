#include "kiln/launcher/launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "kiln/common/log.h"
#include "kiln/common/version.h"
#include "kiln/rpc/service_main.h"
#include "kiln/schema/launcher.capnp.h"

namespace kiln::launcher {

static constexpr const char* kLauncherService = "kiln.launcher";
static constexpr Millis kLoopTick{20};
static constexpr Millis kSwapRegisterTimeout{30000};
static constexpr Millis kLeaseSweep{1000};

std::atomic<bool> Launcher::stopRequested_{false};

struct Launcher::Swap {
  rpc::ReplyTo replyTo;
  std::string service;
  std::vector<int> oldPids;
  std::vector<int> newPids;
  Clock::time_point deadline;
  bool draining = false;
};

Launcher::Launcher(StackConfig config, RunDir runDir)
    : config_(std::move(config)), runDir_(std::move(runDir)),
      store_(shm::Store::create(runDir_.paths().segmentName(), config_.shmBytes)),
      startedAt_(Clock::now()) {
  const client::StackPaths& paths = runDir_.paths();
  rpc::BrokerOptions brokerOptions;
  brokerOptions.clientEndpoint = paths.clientEndpoint();
  brokerOptions.workerEndpoint = paths.workerEndpoint();
  brokerOptions.heartbeat = config_.heartbeat;
  brokerOptions.liveness = config_.liveness;
  brokerOptions.maxAttempts = config_.maxAttempts;
  brokerOptions.maxQueue = config_.maxQueue;
  broker_ = std::make_unique<rpc::Broker>(brokerOptions);
  broker_->addInternalService(
      kLauncherService, [this](rpc::Message& body, const rpc::ReplyTo& to) { handle(body, to); });

  SupervisorOptions supervisorOptions;
  supervisorOptions.backoffInitial = config_.backoffInitial;
  supervisorOptions.backoffMax = config_.backoffMax;
  supervisorOptions.crashBudget = config_.crashBudget;
  supervisorOptions.crashWindow = config_.crashWindow;
  supervisorOptions.logDir = paths.logDir();
  supervisorOptions.serviceArgs = {"--broker",       paths.workerEndpoint(),
                                   "--heartbeat-ms", std::to_string(config_.heartbeat.count()),
                                   "--liveness",     std::to_string(config_.liveness)};
  supervisor_ = std::make_unique<Supervisor>(supervisorOptions);
  for (const auto& service : config_.services) {
    broker_->declareService(service.name);
    supervisor_->start(service);
  }
  log().info("stack up name={} run_dir={} services={}", config_.name, paths.runDir,
             config_.services.size());
}

Launcher::~Launcher() = default;

void Launcher::run(const std::function<void(const std::string&)>& onReady) {
  bool readyReported = false;
  auto nextLeaseSweep = Clock::now() + kLeaseSweep;
  while (!stopRequested_.load() && !downRequested_) {
    broker_->poll(kLoopTick);
    afterExits(supervisor_->reap());
    if (Clock::now() >= nextLeaseSweep) {
      // Clients die too, not only our children: their shm leases go back here.
      if (const size_t dropped = store_.reclaimDeadLeases())
        log().info("reclaimed shm leases of dead processes count={}", dropped);
      nextLeaseSweep = Clock::now() + kLeaseSweep;
    }
    supervisor_->restartDue();
    killHungWorkers();
    advanceSwaps();
    if (!readyReported) {
      std::string problem = readiness();
      const bool timedOut = Clock::now() - startedAt_ > config_.readyTimeout;
      if (problem.empty() || timedOut || problem.rfind("failed", 0) == 0) {
        readyReported = true;
        if (onReady) onReady(problem);
      }
    }
  }
  shutdown();
}

// Empty when every configured worker has registered; else what is missing.
std::string Launcher::readiness() const {
  std::string waiting;
  for (const auto& service : config_.services) {
    if (supervisor_->failed(service.name))
      return fmt::format("failed: service {}: {}", service.name,
                         supervisor_->failureReason(service.name));
    const size_t registered = broker_->workers(service.name).size();
    if (registered < static_cast<size_t>(service.workers))
      waiting += fmt::format("{}{} ({}/{} registered)", waiting.empty() ? "" : ", ", service.name,
                             registered, service.workers);
  }
  return waiting.empty() ? "" : "waiting for " + waiting;
}

void Launcher::afterExits(const std::vector<ProcessExit>& exits) {
  for (const auto& exit : exits) {
    broker_->processDied(exit.pid);
    if (supervisor_->failed(exit.service))
      broker_->setUnavailable(exit.service, supervisor_->failureReason(exit.service));
  }
}

// A worker still busy long after its request's deadline is hung (or looping):
// nobody waits for its answer, so it is killed and restarted like a crash.
void Launcher::killHungWorkers() {
  if (config_.hangGrace.count() == 0) return;
  const auto now = Clock::now();
  for (const auto& service : config_.services)
    for (const auto& worker : broker_->workers(service.name)) {
      if (!worker.overdueSince || now - *worker.overdueSince < config_.hangGrace) continue;
      const auto overdue = std::chrono::duration_cast<Millis>(now - *worker.overdueSince);
      supervisor_->kill(worker.pid, fmt::format("hung: still busy {} ms after its request's "
                                                "deadline (hang_grace_ms {})",
                                                overdue.count(), config_.hangGrace.count()));
    }
}

// ---- kiln.launcher verbs ---------------------------------------------------

void Launcher::handle(rpc::Message& body, const rpc::ReplyTo& to) {
  auto request = body.root<schema::LauncherRequest>();
  capnp::MallocMessageBuilder reply;
  auto out = reply.initRoot<schema::LauncherReply>();
  switch (request.which()) {
  case schema::LauncherRequest::PING: out.setPong(request.getPing()); break;
  case schema::LauncherRequest::INFO: rpc::fillInfo(out.initInfo(), kLauncherService); break;
  case schema::LauncherRequest::STATUS: buildStatus(reply); break;
  case schema::LauncherRequest::DOWN:
    log().info("down requested");
    downRequested_ = true;
    out.setDown();
    break;
  case schema::LauncherRequest::SWAP:
    beginSwap(to, request.getSwap().getService(), request.getSwap().getBinary());
    return; // answered when the swap completes
  default: throw Error(ErrorCode::Unsupported, "unknown launcher verb");
  }
  broker_->reply(to, reply);
}

static schema::WorkerState workerState(const Slot& slot, const rpc::WorkerView* registered) {
  switch (slot.state) {
  case SlotState::Backoff: return schema::WorkerState::BACKOFF;
  case SlotState::Failed: return schema::WorkerState::FAILED;
  case SlotState::Retiring: return schema::WorkerState::DRAINING;
  case SlotState::Running: break;
  }
  if (!registered) return schema::WorkerState::STARTING;
  switch (registered->phase) {
  case rpc::WorkerPhase::Idle: return schema::WorkerState::IDLE;
  case rpc::WorkerPhase::Busy: return schema::WorkerState::BUSY;
  case rpc::WorkerPhase::Draining: return schema::WorkerState::DRAINING;
  }
  return schema::WorkerState::STARTING;
}

void Launcher::buildStatus(capnp::MessageBuilder& reply) const {
  auto status = reply.getRoot<schema::LauncherReply>().initStatus();
  status.setName(config_.name);
  status.setRunDir(runDir_.paths().runDir);
  status.setLauncherPid(getpid());
  status.setUptimeMs(static_cast<uint64_t>(millisSince(startedAt_)));
  status.setVersion(std::string(version()));
  auto services = status.initServices(static_cast<unsigned>(config_.services.size()));
  for (size_t i = 0; i < config_.services.size(); ++i) {
    const ServiceConfig& config = config_.services[i];
    auto out = services[static_cast<unsigned>(i)];
    const auto slots = supervisor_->slots(config.name);
    const auto registered = broker_->workers(config.name);
    const auto view = broker_->service(config.name);
    out.setName(config.name);
    out.setBinary(slots.empty() ? config.binary : slots.back()->binary);
    out.setQueueDepth(static_cast<uint32_t>(view.queueDepth));
    out.setInFlight(static_cast<uint32_t>(view.inFlight));
    out.setServed(view.served);
    out.setErrors(view.errors);
    out.setP50Us(static_cast<uint64_t>(view.p50Us));
    out.setP99Us(static_cast<uint64_t>(view.p99Us));

    uint32_t restarts = 0;
    size_t live = 0;
    auto workers = out.initWorkers(static_cast<unsigned>(slots.size()));
    for (size_t w = 0; w < slots.size(); ++w) {
      const Slot& slot = *slots[w];
      const rpc::WorkerView* match = nullptr;
      for (const auto& r : registered)
        if (r.pid == slot.pid && slot.pid > 0) match = &r;
      auto worker = workers[static_cast<unsigned>(w)];
      worker.setPid(slot.pid);
      worker.setState(workerState(slot, match));
      worker.setServed(match ? match->served : 0);
      worker.setRestarts(slot.restarts);
      worker.setUptimeMs(slot.pid ? static_cast<uint64_t>(millisSince(slot.startedAt)) : 0);
      worker.setLastExit(slot.lastExit);
      restarts += slot.restarts;
      if (match) ++live;
    }
    out.setRestarts(restarts);
    if (supervisor_->failed(config.name)) {
      out.setState(schema::ServiceState::FAILED);
      out.setFailureReason(supervisor_->failureReason(config.name));
    } else if (live >= static_cast<size_t>(config.workers)) {
      out.setState(schema::ServiceState::RUNNING);
    } else if (live == 0 && restarts == 0) {
      out.setState(schema::ServiceState::STARTING);
    } else {
      out.setState(schema::ServiceState::DEGRADED);
    }
  }
}

// ---- swap ------------------------------------------------------------------
// Start the new binary beside the old workers, wait until every new worker
// has registered, then drain the old ones: they finish what they hold and
// leave, and the queue moves to the new ones, so no request is lost.

void Launcher::beginSwap(const rpc::ReplyTo& to, const std::string& service,
                         const std::string& binary) {
  const ServiceConfig* config = config_.service(service);
  if (!config) {
    broker_->replyError(to,
                        Error(ErrorCode::NotFound, fmt::format("no service named '{}'", service)));
    return;
  }
  for (const auto& swap : swaps_)
    if (swap->service == service) {
      broker_->replyError(to, Error(ErrorCode::AlreadyExists,
                                    fmt::format("a swap of '{}' is already in progress", service)));
      return;
    }
  auto swap = std::make_unique<Swap>();
  swap->replyTo = to;
  swap->service = service;
  for (const Slot* slot : supervisor_->slots(service))
    if (slot->pid > 0) swap->oldPids.push_back(slot->pid);
  swap->newPids = supervisor_->startExtra(service, binary, std::max(config->workers, 1));
  swap->deadline = Clock::now() + kSwapRegisterTimeout;
  log().info("swap started service={} binary={}", service, binary);
  swaps_.push_back(std::move(swap));
}

void Launcher::advanceSwaps() {
  for (auto it = swaps_.begin(); it != swaps_.end();) {
    Swap& swap = **it;
    const auto registered = broker_->workers(swap.service);
    auto isRegistered = [&](int pid) {
      return std::any_of(registered.begin(), registered.end(),
                         [&](const auto& w) { return w.pid == pid; });
    };
    auto isAlive = [&](int pid) {
      return supervisor_->slotOf(pid) && supervisor_->slotOf(pid)->pid == pid;
    };

    if (!swap.draining) {
      const bool newDied = !std::all_of(swap.newPids.begin(), swap.newPids.end(), isAlive);
      if (newDied || Clock::now() > swap.deadline) {
        for (int pid : swap.newPids) {
          supervisor_->retire(pid);
          supervisor_->signal(pid, SIGKILL);
        }
        broker_->replyError(
            swap.replyTo,
            Error(ErrorCode::Unavailable,
                  newDied ? "the new binary exited before registering (see kiln logs)"
                          : "the new binary did not register in time; kept the old one"));
        it = swaps_.erase(it);
        continue;
      }
      if (!std::all_of(swap.newPids.begin(), swap.newPids.end(), isRegistered)) {
        ++it;
        continue;
      }
      for (int pid : swap.oldPids) {
        supervisor_->retire(pid);
        broker_->drain(pid);
      }
      swap.draining = true;
      swap.deadline = Clock::now() + config_.stopTimeout;
    }
    const bool oldGone = std::none_of(swap.oldPids.begin(), swap.oldPids.end(),
                                      [&](int pid) { return supervisor_->slotOf(pid) != nullptr; });
    if (!oldGone && Clock::now() > swap.deadline) {
      for (int pid : swap.oldPids) supervisor_->signal(pid, SIGKILL); // its request is requeued
      ++it;
      continue;
    }
    if (!oldGone) {
      ++it;
      continue;
    }
    capnp::MallocMessageBuilder reply;
    auto result = reply.initRoot<schema::LauncherReply>().initSwap();
    auto oldPids = result.initOldPids(static_cast<unsigned>(swap.oldPids.size()));
    for (size_t i = 0; i < swap.oldPids.size(); ++i)
      oldPids.set(static_cast<unsigned>(i), swap.oldPids[i]);
    auto newPids = result.initNewPids(static_cast<unsigned>(swap.newPids.size()));
    for (size_t i = 0; i < swap.newPids.size(); ++i)
      newPids.set(static_cast<unsigned>(i), swap.newPids[i]);
    broker_->reply(swap.replyTo, reply);
    log().info("swap done service={}", swap.service);
    it = swaps_.erase(it);
  }
}

// ---- shutdown --------------------------------------------------------------

void Launcher::shutdown() {
  log().info("stopping stack name={}", config_.name);
  for (const auto& swap : swaps_)
    broker_->replyError(swap->replyTo, Error(ErrorCode::Cancelled, "the stack is shutting down"));
  swaps_.clear();
  for (const auto& service : config_.services) {
    for (const Slot* slot : supervisor_->slots(service.name))
      if (slot->pid > 0) broker_->drain(slot->pid);
    broker_->setUnavailable(service.name, "the stack is shutting down");
  }
  supervisor_->retireAll(0);
  // Drained workers finish what they hold; unregistered ones get SIGTERM.
  for (const auto& service : config_.services)
    for (const Slot* slot : supervisor_->slots(service.name)) {
      const auto registered = broker_->workers(service.name);
      const bool known = std::any_of(registered.begin(), registered.end(),
                                     [&](const auto& w) { return w.pid == slot->pid; });
      if (!known && slot->pid > 0) supervisor_->signal(slot->pid, SIGTERM);
    }
  const auto deadline = Clock::now() + config_.stopTimeout;
  while (supervisor_->anyRunning() && Clock::now() < deadline) {
    broker_->poll(kLoopTick);
    afterExits(supervisor_->reap());
  }
  if (supervisor_->anyRunning()) {
    log().warn("services did not stop within {} ms; killing them", config_.stopTimeout.count());
    supervisor_->retireAll(SIGKILL);
    while (supervisor_->anyRunning()) {
      afterExits(supervisor_->reap());
      usleep(1000);
    }
  }
  broker_->poll(Millis(0)); // flush replies
  broker_.reset();
  runDir_.remove();
  log().info("stack stopped");
}

} // namespace kiln::launcher
