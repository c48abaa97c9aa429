// What the RPC tests share: a private run directory, child processes that never
// outlive a test, a broker polled by its own thread, raw ZeroMQ peers, and
// builders for testsvc requests.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "kiln/rpc/broker.h"
#include "kiln/rpc/client.h"
#include "kiln/rpc/message.h"
#include "kiln/testsvc/testsvc.capnp.h"

namespace kiln::rpc::test {

constexpr Millis kHeartbeat{50};
constexpr int kLiveness = 3;
constexpr Millis kSilence = kHeartbeat * kLiveness; // after this a worker is dead

// A directory for ipc:// endpoints (short: unix socket paths must stay under 100 bytes).
class TempDir {
public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string endpoint(const std::string& name) const { return "ipc://" + path_ + "/" + name; }

private:
  std::string path_;
};

// Child processes of one test: SIGKILLed and reaped when it ends, however it ends
// (and killed by the kernel if the test process itself dies).
class ChildProcesses {
public:
  ChildProcesses() = default;
  ~ChildProcesses();
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;

  pid_t spawn(const std::vector<std::string>& argv);
  // SIGKILLs and reaps `pid`.
  void kill(pid_t pid);
  // Reaps `pid` if it exits within `timeout`; returns its wait status.
  std::optional<int> waitExit(pid_t pid, Millis timeout);
  bool alive(pid_t pid);

private:
  std::vector<pid_t> pids_;
};

// A Broker owned by a thread that polls it until destroyed. The broker is
// single-threaded, so other threads reach it only through onBroker().
class BrokerThread {
public:
  explicit BrokerThread(BrokerOptions options);
  ~BrokerThread();

  // Runs fn(broker) on the broker's thread between two polls and returns its result.
  template <class Fn> auto onBroker(Fn fn) -> decltype(fn(std::declval<Broker&>())) {
    using Result = decltype(fn(std::declval<Broker&>()));
    std::packaged_task<Result()> task([&] { return fn(broker_); });
    auto result = task.get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!failure_.empty()) throw std::runtime_error("broker thread died: " + failure_);
      tasks_.push_back([&task] { task(); });
    }
    return result.get();
  }

  std::vector<WorkerView> workers(const std::string& service);
  // Why the poll loop stopped, or empty while it runs.
  std::string failure();

private:
  void loop();

  Broker broker_;
  std::mutex mutex_;
  std::vector<std::function<void()>> tasks_;
  std::string failure_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A DEALER socket with its own context: a fake client or worker speaking raw frames.
class RawPeer {
public:
  explicit RawPeer(const std::string& endpoint);
  void send(const std::vector<std::string>& frames);
  std::optional<std::vector<zmq::message_t>> receive(Millis timeout);

private:
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

bool waitUntil(const std::function<bool()>& done, Millis timeout);

// Frames of the broker protocol (schemas/broker.capnp), for raw peers.
std::string readyFrame(const std::string& service, int pid);
std::string heartbeatFrame();
std::string workerReplyFrame(uint64_t dispatchId); // `ok`: a body frame follows
std::string envelopeFrame(const std::string& service, uint64_t requestId, uint32_t timeoutMs);
std::string dispatchFrame(uint64_t dispatchId);
// A testsvc reply body from a pretend worker.
std::string whoamiReplyBody(int pid);

// Heartbeats through `worker` (a raw peer registered as a worker) until the broker
// dispatches a request to it; returns the dispatch id.
std::optional<uint64_t> awaitDispatch(RawPeer& worker, Millis timeout);
// Heartbeats through `worker` for `duration`; returns whether a request was dispatched to it.
bool dispatchedWithin(RawPeer& worker, Millis duration);

// The bytes of one serialized message, as sent in one frame.
std::string frameBytes(capnp::MessageBuilder& message);

using Request = std::unique_ptr<capnp::MallocMessageBuilder>;
Request echoRequest(const std::string& bytes);
Request sleepRequest(uint32_t ms);
Request whoamiRequest();
Request crashRequest();
Request nestRequest(uint32_t depth);
Request failRequest(const std::string& message);

// A broker on ipc endpoints in a private directory, workers spawned as
// kiln-test-worker processes, heartbeats of kHeartbeat and liveness kLiveness.
class RpcTest : public ::testing::Test {
protected:
  RpcTest();
  void TearDown() override;

  void startBroker();
  pid_t spawnWorker(const std::string& service = "testsvc", Millis heartbeat = kHeartbeat,
                    int liveness = kLiveness, const std::string& endpoint = {});
  // Waits until `count` workers of `service` are registered; returns their pids.
  std::vector<int> waitForWorkers(size_t count, const std::string& service = "testsvc");
  std::unique_ptr<Client> client() { return std::make_unique<Client>(options_.clientEndpoint); }
  // Calls testsvc and returns the pid of the worker that answered.
  int callPid(Client& client, capnp::MessageBuilder& request, Millis timeout = Millis(5000));

  TempDir dir_;
  BrokerOptions options_;
  std::unique_ptr<BrokerThread> broker_;
  ChildProcesses children_;
};

} // namespace kiln::rpc::test
