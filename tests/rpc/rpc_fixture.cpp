#include "rpc_fixture.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "kiln/common/process.h"
#include "kiln/schema/broker.capnp.h"

namespace kiln::rpc::test {

// ---- TempDir ------------------------------------------------------------------

TempDir::TempDir() {
  char pattern[] = "/tmp/kiln-rpc-XXXXXX";
  if (!mkdtemp(pattern)) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

// ---- ChildProcesses -----------------------------------------------------------

ChildProcesses::~ChildProcesses() {
  for (const pid_t pid : std::vector<pid_t>(pids_)) kill(pid);
}

pid_t ChildProcesses::spawn(const std::vector<std::string>& argv) {
  const pid_t pid = spawnProcess(argv);
  pids_.push_back(pid);
  return pid;
}

void ChildProcesses::kill(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
}

std::optional<int> ChildProcesses::waitExit(pid_t pid, Millis timeout) {
  std::optional<int> result;
  waitUntil(
      [&] {
        int status = 0;
        if (waitpid(pid, &status, WNOHANG) != pid) return false;
        result = status;
        return true;
      },
      timeout);
  if (result) pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
  return result;
}

bool ChildProcesses::alive(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) == 0) return true;
  // Reaped (or not ours): forget it, so the pid is never signalled after it is reused.
  pids_.erase(std::remove(pids_.begin(), pids_.end(), pid), pids_.end());
  return false;
}

// ---- BrokerThread -------------------------------------------------------------

BrokerThread::BrokerThread(BrokerOptions options)
    : broker_(std::move(options)), thread_([this] { loop(); }) {}

BrokerThread::~BrokerThread() {
  stop_ = true;
  thread_.join();
}

void BrokerThread::loop() {
  bool polling = true;
  while (!stop_) {
    if (polling) {
      try {
        broker_.poll(Millis(2));
      } catch (const std::exception& e) {
        // The test fails on it (RpcTest::TearDown); tasks still run so no caller hangs.
        std::lock_guard<std::mutex> lock(mutex_);
        failure_ = e.what();
        polling = false;
      }
    } else {
      std::this_thread::sleep_for(Millis(2));
    }
    std::vector<std::function<void()>> tasks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks.swap(tasks_);
    }
    for (auto& task : tasks) task();
  }
}

std::vector<WorkerView> BrokerThread::workers(const std::string& service) {
  return onBroker([&](Broker& broker) { return broker.workers(service); });
}

std::string BrokerThread::failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_;
}

// ---- RawPeer ------------------------------------------------------------------

RawPeer::RawPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.connect(endpoint);
}

void RawPeer::send(const std::vector<std::string>& frames) {
  for (size_t i = 0; i < frames.size(); ++i)
    socket_.send(zmq::buffer(frames[i]),
                 i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
}

std::optional<std::vector<zmq::message_t>> RawPeer::receive(Millis timeout) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  std::vector<zmq::message_t> frames;
  (void)zmq::recv_multipart(socket_, std::back_inserter(frames));
  return frames;
}

// ---- helpers ------------------------------------------------------------------

bool waitUntil(const std::function<bool()>& done, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    if (done()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Millis(5));
  }
}

std::string frameBytes(capnp::MessageBuilder& message) {
  return toFrame(message).to_string();
}

std::string readyFrame(const std::string& service, int pid) {
  capnp::MallocMessageBuilder message;
  auto ready = message.initRoot<schema::WorkerMessage>().initReady();
  ready.setService(service);
  ready.setPid(pid);
  return frameBytes(message);
}

std::string heartbeatFrame() {
  capnp::MallocMessageBuilder message;
  message.initRoot<schema::WorkerMessage>().setHeartbeat();
  return frameBytes(message);
}

std::string workerReplyFrame(uint64_t dispatchId) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<schema::WorkerMessage>().initReply();
  reply.setDispatchId(dispatchId);
  reply.setOk();
  return frameBytes(message);
}

std::string envelopeFrame(const std::string& service, uint64_t requestId, uint32_t timeoutMs) {
  capnp::MallocMessageBuilder message;
  auto envelope = message.initRoot<schema::Envelope>();
  envelope.setService(service);
  envelope.setRequestId(requestId);
  envelope.setTimeoutMs(timeoutMs);
  envelope.setAttempt(1);
  return frameBytes(message);
}

std::string dispatchFrame(uint64_t dispatchId) {
  capnp::MallocMessageBuilder message;
  auto request = message.initRoot<schema::BrokerMessage>().initRequest();
  request.setDispatchId(dispatchId);
  request.setService("testsvc");
  request.setTimeoutMs(5000);
  request.setAttempt(1);
  return frameBytes(message);
}

std::string whoamiReplyBody(int pid) {
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<testsvc::Reply>();
  reply.setPid(pid);
  reply.setWhoami();
  return frameBytes(message);
}

std::optional<uint64_t> awaitDispatch(RawPeer& worker, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    worker.send({heartbeatFrame()});
    auto frames = worker.receive(Millis(10));
    if (!frames || frames->empty()) continue;
    Message header(std::move((*frames)[0]));
    auto message = header.root<schema::BrokerMessage>();
    if (message.isRequest()) return message.getRequest().getDispatchId();
  }
  return std::nullopt;
}

bool dispatchedWithin(RawPeer& worker, Millis duration) {
  return awaitDispatch(worker, duration).has_value();
}

static Request newRequest() {
  return std::make_unique<capnp::MallocMessageBuilder>();
}

Request echoRequest(const std::string& bytes) {
  auto request = newRequest();
  request->initRoot<testsvc::Request>().setEcho(
      kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  return request;
}

Request sleepRequest(uint32_t ms) {
  auto request = newRequest();
  request->initRoot<testsvc::Request>().setSleep(ms);
  return request;
}

Request whoamiRequest() {
  auto request = newRequest();
  request->initRoot<testsvc::Request>().setWhoami();
  return request;
}

Request crashRequest() {
  auto request = newRequest();
  request->initRoot<testsvc::Request>().setCrash(testsvc::CRASH_TOKEN);
  return request;
}

Request nestRequest(uint32_t depth) {
  auto request = newRequest();
  auto nest = request->initRoot<testsvc::Request>().initNest();
  for (uint32_t i = 0; i < depth; ++i) nest = nest.initChild();
  return request;
}

Request failRequest(const std::string& message) {
  auto request = newRequest();
  request->initRoot<testsvc::Request>().setFail(message);
  return request;
}

// ---- RpcTest ------------------------------------------------------------------

RpcTest::RpcTest() {
  options_.clientEndpoint = dir_.endpoint("clients");
  options_.workerEndpoint = dir_.endpoint("workers");
  options_.heartbeat = kHeartbeat;
  options_.liveness = kLiveness;
  options_.maxAttempts = 3;
}

void RpcTest::TearDown() {
  if (broker_) {
    EXPECT_EQ(broker_->failure(), "") << "the broker's poll threw";
  }
}

void RpcTest::startBroker() {
  broker_ = std::make_unique<BrokerThread>(options_);
}

pid_t RpcTest::spawnWorker(const std::string& service, Millis heartbeat, int liveness,
                           const std::string& endpoint) {
  return children_.spawn({KILN_TEST_WORKER, "--broker",
                          endpoint.empty() ? options_.workerEndpoint : endpoint, "--heartbeat-ms",
                          std::to_string(heartbeat.count()), "--liveness", std::to_string(liveness),
                          "--service-name", service});
}

std::vector<int> RpcTest::waitForWorkers(size_t count, const std::string& service) {
  std::vector<int> pids;
  waitUntil(
      [&] {
        pids.clear();
        for (const auto& worker : broker_->workers(service)) pids.push_back(worker.pid);
        return pids.size() >= count;
      },
      Millis(10000));
  std::sort(pids.begin(), pids.end());
  return pids;
}

int RpcTest::callPid(Client& client, capnp::MessageBuilder& request, Millis timeout) {
  auto reply = client.call("testsvc", request, timeout);
  return reply->root<testsvc::Reply>().getPid();
}

} // namespace kiln::rpc::test
