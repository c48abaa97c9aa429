#include "kiln/rpc/broker.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "kiln/common/log.h"
#include "kiln/rpc/errors.h"
#include "kiln/schema/broker.capnp.h"

namespace kiln::rpc {

static constexpr size_t kLatencyWindow = 1024;
static constexpr size_t kMaxServiceName = 128;
static constexpr int kMaxReadsPerPoll = 256; // fairness between the two sockets
// Deadlines and silences are checked this often, not on every poll: the scan
// is linear in queued requests, and a few ms is finer than any timeout.
static constexpr Millis kExpiryScan{5};
// Headers are a few words: a small first segment spares allocating and zeroing
// Cap'n Proto's default one (8 KiB) for every message.
static constexpr unsigned kHeaderWords = 64;

struct Broker::Request {
  std::string client;
  uint64_t requestId = 0;
  zmq::message_t body;
  Clock::time_point arrived;
  Clock::time_point deadline;
  int attempts = 0;
  uint64_t dispatchId = 0;
};

struct Broker::Worker {
  std::string identity;
  WorkerView view;
  Clock::time_point lastSeen;
  std::unique_ptr<Request> inFlight; // null when idle, or when the request expired while held
  uint64_t dispatchId = 0;           // of the request it holds, expired or not; 0 when idle
};

struct Broker::Service {
  std::string name;
  std::deque<std::unique_ptr<Request>> queue;
  std::deque<std::string> idle; // least recently used first; may hold stale ids
  std::string unavailable;
  uint64_t served = 0;
  uint64_t errors = 0;
  std::vector<int64_t> latencies; // ring of the last kLatencyWindow, in µs
  size_t nextLatency = 0;

  void recordLatency(int64_t micros) {
    if (latencies.size() < kLatencyWindow)
      latencies.push_back(micros);
    else
      latencies[nextLatency] = micros;
    nextLatency = (nextLatency + 1) % kLatencyWindow;
  }
};

static std::vector<zmq::message_t> receiveAll(zmq::socket_t& socket) {
  std::vector<zmq::message_t> frames;
  frames.reserve(3); // identity, header, body
  (void)zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait);
  return frames;
}

static zmq::socket_t bindRouter(zmq::context_t& context, const std::string& endpoint) {
  zmq::socket_t socket(context, zmq::socket_type::router);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  try {
    socket.bind(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::Io, fmt::format("cannot bind {}: {}", endpoint, e.what()));
  }
  return socket;
}

Broker::Broker(BrokerOptions options)
    : options_(std::move(options)), context_(1),
      clients_(bindRouter(context_, options_.clientEndpoint)),
      workersSocket_(bindRouter(context_, options_.workerEndpoint)),
      nextHeartbeat_(Clock::now() + options_.heartbeat) {}

Broker::~Broker() = default;

Broker::Service& Broker::serviceFor(const std::string& name) {
  auto& slot = services_[name];
  if (!slot) {
    slot = std::make_unique<Service>();
    slot->name = name;
  }
  return *slot;
}

void Broker::declareService(const std::string& service) {
  serviceFor(service);
}

bool Broker::knowsService(const std::string& service) const {
  return services_.count(service) > 0 || internal_.count(service) > 0;
}

void Broker::setUnavailable(const std::string& name, const std::string& reason) {
  auto& service = serviceFor(name);
  service.unavailable = reason;
  if (reason.empty()) return;
  const Error error(ErrorCode::Unavailable,
                    fmt::format("service '{}' is unavailable: {}", name, reason));
  while (!service.queue.empty()) {
    auto request = std::move(service.queue.front());
    service.queue.pop_front();
    fail(service, *request, error);
  }
}

void Broker::addInternalService(const std::string& service, InternalHandler handler) {
  internal_[service] = std::move(handler);
}

void Broker::poll(Millis timeout) {
  const auto untilHeartbeat =
      std::chrono::duration_cast<Millis>(nextHeartbeat_ - Clock::now()) + Millis(1);
  const Millis wait = std::max(Millis(0), std::min(timeout, untilHeartbeat));
  zmq::pollitem_t items[] = {{clients_.handle(), 0, ZMQ_POLLIN, 0},
                             {workersSocket_.handle(), 0, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, 2, wait);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
  if (items[1].revents & ZMQ_POLLIN)
    for (int i = 0; i < kMaxReadsPerPoll && readWorkerOnce(); ++i) {
    }
  if (items[0].revents & ZMQ_POLLIN)
    for (int i = 0; i < kMaxReadsPerPoll && readClientOnce(); ++i) {
    }
  heartbeatAndExpire();
}

// ---- clients ---------------------------------------------------------------

bool Broker::readClientOnce() {
  auto frames = receiveAll(clients_);
  if (frames.empty()) return false;
  const std::string client = frames[0].to_string();
  if (frames.size() != 3) {
    sendReply(client, 0,
              Error(ErrorCode::Malformed,
                    fmt::format("expected 2 frames (envelope, body), got {}", frames.size() - 1)),
              nullptr);
    return true;
  }
  auto request = std::make_unique<Request>();
  request->client = client;
  request->arrived = Clock::now();
  std::string service;
  try {
    Message head(std::move(frames[1]), options_.limits);
    decoding([&] {
      auto envelope = head.root<schema::Envelope>();
      request->requestId = envelope.getRequestId();
      service = std::string(envelope.getService().cStr());
      const uint32_t timeoutMs = envelope.getTimeoutMs();
      request->deadline = request->arrived + Millis(timeoutMs ? timeoutMs : 30000);
    });
    if (service.empty() || service.size() > kMaxServiceName)
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("service name must be 1..{} bytes", kMaxServiceName));
    if (frames[2].size() > options_.limits.maxFrameBytes)
      throw Error(ErrorCode::TooLarge,
                  fmt::format("request body of {} bytes exceeds the {} byte limit",
                              frames[2].size(), options_.limits.maxFrameBytes));
  } catch (const Error& e) {
    sendReply(client, request->requestId, e.from("broker"), nullptr);
    return true;
  }
  request->body = std::move(frames[2]);
  route(service, std::move(request));
  return true;
}

void Broker::route(const std::string& name, std::unique_ptr<Request> request) {
  if (auto internal = internal_.find(name); internal != internal_.end()) {
    const ReplyTo to{request->client, request->requestId};
    try {
      Message body(std::move(request->body), options_.limits);
      decoding([&] { internal->second(body, to); });
    } catch (const Error& e) {
      replyError(to, e.from(name));
    } catch (const std::exception& e) {
      replyError(to, Error(ErrorCode::Internal, e.what(), name));
    }
    return;
  }
  auto found = services_.find(name);
  if (found == services_.end()) {
    sendReply(
        request->client, request->requestId,
        Error(ErrorCode::UnknownService, fmt::format("no service named '{}'", name), "broker"),
        nullptr);
    return;
  }
  Service& service = *found->second;
  if (!service.unavailable.empty()) {
    fail(service, *request,
         Error(ErrorCode::Unavailable,
               fmt::format("service '{}' is unavailable: {}", name, service.unavailable)));
    return;
  }
  if (service.queue.size() >= options_.maxQueue) {
    fail(service, *request,
         Error(ErrorCode::ResourceExhausted,
               fmt::format("service '{}' has {} requests queued", name, service.queue.size())));
    return;
  }
  service.queue.push_back(std::move(request));
  dispatch(service);
}

// ---- workers ---------------------------------------------------------------

bool Broker::readWorkerOnce() {
  auto frames = receiveAll(workersSocket_);
  if (frames.empty()) return false;
  const std::string identity = frames[0].to_string();
  if (frames.size() < 2 || frames.size() > 3) return true; // not ours: drop
  try {
    Message header(std::move(frames[1]), options_.limits);
    zmq::message_t body = frames.size() == 3 ? std::move(frames[2]) : zmq::message_t();
    handleWorkerMessage(identity, header, std::move(body));
  } catch (const Error& e) {
    log().warn("dropped a bad worker message error={}", e.what());
  }
  return true;
}

void Broker::handleWorkerMessage(const std::string& identity, Message& header,
                                 zmq::message_t body) {
  const auto message = decoding([&] { return header.root<schema::WorkerMessage>(); });
  const auto which = decoding([&] { return message.which(); });
  auto found = workers_.find(identity);

  if (which == schema::WorkerMessage::READY) {
    if (found != workers_.end()) return; // duplicate ready
    std::string service;
    int pid = 0;
    decoding([&] {
      service = message.getReady().getService().cStr();
      pid = message.getReady().getPid();
    });
    if (service.empty() || service.size() > kMaxServiceName || internal_.count(service)) {
      log().warn("refused worker registration service='{}' pid={}", service, pid);
      return;
    }
    auto worker = std::make_unique<Worker>();
    worker->identity = identity;
    worker->view.service = service;
    worker->view.pid = pid;
    worker->view.registeredAt = worker->lastSeen = Clock::now();
    Service& entry = serviceFor(service);
    entry.idle.push_back(identity);
    log().info("worker registered service={} pid={}", service, pid);
    const WorkerView view = worker->view;
    workers_[identity] = std::move(worker);
    if (onRegistered_) onRegistered_(view);
    dispatch(entry);
    return;
  }

  if (found == workers_.end()) {
    // Forgotten (went silent, or the broker restarted): ask it to register again.
    if (which != schema::WorkerMessage::DISCONNECT) {
      capnp::MallocMessageBuilder reregister(kHeaderWords);
      reregister.initRoot<schema::BrokerMessage>().setReregister();
      sendToWorker(identity, reregister);
    }
    return;
  }
  Worker& worker = *found->second;
  worker.lastSeen = Clock::now();

  if (which == schema::WorkerMessage::DISCONNECT) {
    forgetWorker(identity,
                 "left: " + std::string(decoding([&] { return message.getDisconnect().cStr(); })));
    return;
  }
  if (which != schema::WorkerMessage::REPLY) return; // heartbeat

  const auto reply = decoding([&] { return message.getReply(); });
  const uint64_t dispatchId = decoding([&] { return reply.getDispatchId(); });
  if (worker.dispatchId == 0 || dispatchId != worker.dispatchId) {
    // Not what it holds: taking it as the end of the dispatch would free the worker
    // while it still works, and the next dispatch would overwrite the request it holds.
    log().warn("dropped a reply for dispatch {} from pid {} (it holds {})", dispatchId,
               worker.view.pid, worker.dispatchId);
    return;
  }
  // Decoded before any state changes: a throw past this point would lose the request
  // and leave the worker busy forever.
  std::optional<Error> failure;
  if (decoding([&] { return reply.isError(); })) {
    try {
      failure = decoding([&] { return fromWire(reply.getError()); });
    } catch (const Error& e) {
      failure = Error(ErrorCode::Malformed, "the worker's error reply cannot be decoded",
                      worker.view.service, e.detail());
    }
  }
  worker.dispatchId = 0;
  worker.view.overdueSince.reset();
  Service& service = serviceFor(worker.view.service);
  if (worker.inFlight) {
    auto request = std::move(worker.inFlight);
    if (failure) {
      sendReply(request->client, request->requestId, *failure, nullptr);
      service.recordLatency(
          std::chrono::duration_cast<Micros>(Clock::now() - request->arrived).count());
      ++service.served;
    } else {
      finish(service, *request, std::move(body));
    }
    ++worker.view.served;
  }
  if (worker.view.phase == WorkerPhase::Busy) {
    worker.view.phase = WorkerPhase::Idle;
    service.idle.push_back(identity);
    dispatch(service);
  }
}

void Broker::dispatch(Service& service) {
  while (!service.queue.empty() && !service.idle.empty()) {
    const std::string identity = std::move(service.idle.front());
    service.idle.pop_front();
    auto found = workers_.find(identity);
    if (found == workers_.end() || found->second->view.phase != WorkerPhase::Idle) continue;
    Worker& worker = *found->second;

    auto request = std::move(service.queue.front());
    service.queue.pop_front();
    request->dispatchId = nextDispatchId_++;
    ++request->attempts;

    capnp::MallocMessageBuilder header(kHeaderWords);
    auto out = header.initRoot<schema::BrokerMessage>().initRequest();
    out.setDispatchId(request->dispatchId);
    out.setService(service.name);
    const auto left = std::chrono::duration_cast<Millis>(request->deadline - Clock::now()).count();
    out.setTimeoutMs(static_cast<uint32_t>(std::max<int64_t>(left, 1)));
    out.setAttempt(static_cast<uint8_t>(std::min(request->attempts, 255)));
    zmq::message_t body;
    body.copy(request->body); // shares the buffer: kept for a requeue
    sendToWorker(identity, header, &body);

    worker.view.phase = WorkerPhase::Busy;
    worker.dispatchId = request->dispatchId;
    worker.inFlight = std::move(request);
  }
}

void Broker::forgetWorker(const std::string& identity, const std::string& why) {
  auto found = workers_.find(identity);
  if (found == workers_.end()) return;
  std::unique_ptr<Worker> worker = std::move(found->second);
  workers_.erase(found);
  log().info("worker gone service={} pid={} reason=\"{}\"", worker->view.service, worker->view.pid,
             why);
  Service& service = serviceFor(worker->view.service);
  if (worker->inFlight) {
    auto request = std::move(worker->inFlight);
    if (request->attempts >= options_.maxAttempts) {
      fail(service, *request,
           Error(ErrorCode::Unavailable,
                 fmt::format("service '{}': {} workers died while handling this request (last: {})",
                             service.name, request->attempts, why),
                 "broker"));
    } else {
      log().info("requeued request service={} attempt={}", service.name, request->attempts);
      service.queue.push_front(std::move(request));
    }
  }
  if (onGone_) onGone_(worker->view);
  dispatch(service);
}

void Broker::drain(int pid) {
  for (auto& [identity, worker] : workers_) {
    if (worker->view.pid != pid || worker->view.phase == WorkerPhase::Draining) continue;
    worker->view.phase = WorkerPhase::Draining;
    capnp::MallocMessageBuilder message(kHeaderWords);
    message.initRoot<schema::BrokerMessage>().setDrain();
    sendToWorker(identity, message);
  }
}

void Broker::processDied(int pid) {
  std::vector<std::string> dead;
  for (const auto& [identity, worker] : workers_)
    if (worker->view.pid == pid) dead.push_back(identity);
  for (const auto& identity : dead) forgetWorker(identity, fmt::format("process {} exited", pid));
}

// ---- replies ---------------------------------------------------------------

void Broker::finish(Service& service, Request& request, zmq::message_t body) {
  sendReply(request.client, request.requestId, std::nullopt, &body);
  service.recordLatency(std::chrono::duration_cast<Micros>(Clock::now() - request.arrived).count());
  ++service.served;
}

void Broker::fail(Service& service, Request& request, const Error& error) {
  sendReply(request.client, request.requestId, error, nullptr);
  ++service.errors;
}

void Broker::reply(const ReplyTo& to, capnp::MessageBuilder& body) {
  zmq::message_t frame = toFrame(body);
  sendReply(to.client, to.requestId, std::nullopt, &frame);
}

void Broker::replyError(const ReplyTo& to, const Error& error) {
  sendReply(to.client, to.requestId, error, nullptr);
}

void Broker::sendReply(const std::string& client, uint64_t requestId,
                       const std::optional<Error>& error, zmq::message_t* body) {
  capnp::MallocMessageBuilder message(kHeaderWords);
  auto header = message.initRoot<schema::ReplyHeader>();
  header.setRequestId(requestId);
  if (error)
    toWire(*error, header.initError());
  else
    header.setOk();
  try {
    clients_.send(zmq::buffer(client), zmq::send_flags::sndmore);
    clients_.send(toFrame(message), body ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (body) clients_.send(*body, zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    log().warn("reply not delivered request_id={} error={}", requestId, e.what());
  }
}

void Broker::sendToWorker(const std::string& identity, capnp::MessageBuilder& header,
                          zmq::message_t* body) {
  try {
    workersSocket_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    workersSocket_.send(toFrame(header), body ? zmq::send_flags::sndmore : zmq::send_flags::none);
    if (body) workersSocket_.send(*body, zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    log().warn("message to worker not delivered error={}", e.what());
  }
}

// ---- time ------------------------------------------------------------------

void Broker::heartbeatAndExpire() {
  const auto now = Clock::now();
  if (now >= nextHeartbeat_) {
    nextHeartbeat_ = now + options_.heartbeat;
    for (const auto& [identity, worker] : workers_) {
      capnp::MallocMessageBuilder message(kHeaderWords);
      message.initRoot<schema::BrokerMessage>().setHeartbeat();
      sendToWorker(identity, message);
    }
  }
  if (now < nextExpiryScan_) return;
  nextExpiryScan_ = now + kExpiryScan;

  std::vector<std::string> silent;
  for (const auto& [identity, worker] : workers_)
    if (now - worker->lastSeen > options_.heartbeat * options_.liveness) silent.push_back(identity);
  for (const auto& identity : silent)
    forgetWorker(identity, fmt::format("silent for more than {} heartbeats", options_.liveness));

  for (auto& [name, service] : services_) {
    auto& queue = service->queue;
    for (auto it = queue.begin(); it != queue.end();) {
      if ((*it)->deadline > now) {
        ++it;
        continue;
      }
      fail(*service, **it,
           Error(ErrorCode::DeadlineExceeded,
                 fmt::format("deadline passed while queued for '{}'", name), "broker"));
      it = queue.erase(it);
    }
  }
  for (auto& [identity, worker] : workers_) {
    if (!worker->inFlight || worker->inFlight->deadline > now) continue;
    // The worker keeps computing; its late reply finds no request and is dropped.
    fail(serviceFor(worker->view.service), *worker->inFlight,
         Error(ErrorCode::DeadlineExceeded,
               fmt::format("deadline passed while '{}' (pid {}) was handling it",
                           worker->view.service, worker->view.pid),
               "broker"));
    worker->inFlight.reset();
    worker->view.overdueSince = now;
  }
}

// ---- views -----------------------------------------------------------------

std::vector<WorkerView> Broker::workers(const std::string& service) const {
  std::vector<WorkerView> views;
  for (const auto& [identity, worker] : workers_)
    if (worker->view.service == service) views.push_back(worker->view);
  return views;
}

ServiceView Broker::service(const std::string& name) const {
  ServiceView view;
  auto found = services_.find(name);
  if (found == services_.end()) return view;
  const Service& service = *found->second;
  view.queueDepth = service.queue.size();
  view.served = service.served;
  view.errors = service.errors;
  for (const auto& [identity, worker] : workers_)
    if (worker->view.service == name && worker->inFlight) ++view.inFlight;
  if (!service.latencies.empty()) {
    std::vector<int64_t> sorted = service.latencies;
    std::sort(sorted.begin(), sorted.end());
    view.p50Us = sorted[sorted.size() / 2];
    view.p99Us = sorted[std::min(sorted.size() - 1, sorted.size() * 99 / 100)];
  }
  return view;
}

} // namespace kiln::rpc
