// Broker: routes requests from clients to workers by service name
// (Majordomo / Paranoid Pirate). Workers register by name; idle workers of a
// service are dispatched least-recently-used; heartbeats run both ways; a
// request held by a worker that dies is requeued (bounded attempts), then
// answered Error{unavailable}; every request carries a deadline. Services
// hosted in the broker's own process ("kiln.launcher") are internal handlers.
//
// Single-threaded: the owner calls poll() in its loop and may call the other
// methods between polls (the launcher's supervisor does).
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/common/clock.h"
#include "kiln/rpc/message.h"

namespace kiln::rpc {

struct BrokerOptions {
  std::string clientEndpoint; // ROUTER for clients
  std::string workerEndpoint; // ROUTER for workers
  Millis heartbeat{250};
  int liveness = 4;        // a worker silent for liveness * heartbeat is dead
  int maxAttempts = 3;     // dispatches of one request before Error{unavailable}
  size_t maxQueue = 10000; // per service; beyond it Error{resource_exhausted}
  Limits limits;
};

// Where to send a deferred reply of an internal service.
struct ReplyTo {
  std::string client;
  uint64_t requestId = 0;
};

enum class WorkerPhase { Idle, Busy, Draining };

struct WorkerView {
  std::string service;
  int pid = 0;
  WorkerPhase phase = WorkerPhase::Idle;
  uint64_t served = 0;
  Clock::time_point registeredAt;
  // Set while it still works on a request whose deadline passed (a hang, or a
  // client that asked too little time); the launcher kills it past a grace.
  std::optional<Clock::time_point> overdueSince;
};

struct ServiceView {
  size_t queueDepth = 0;
  size_t inFlight = 0;
  uint64_t served = 0;
  uint64_t errors = 0; // answered by the broker with an error
  int64_t p50Us = 0;   // arrival -> reply, over the recent window
  int64_t p99Us = 0;
};

class Broker {
public:
  using InternalHandler = std::function<void(Message& body, const ReplyTo& replyTo)>;
  using WorkerEvent = std::function<void(const WorkerView& worker)>;

  explicit Broker(BrokerOptions options);
  ~Broker();
  Broker(const Broker&) = delete;
  Broker& operator=(const Broker&) = delete;

  // Declares a service name as known: requests for it wait for a worker
  // (one may be restarting) instead of failing with Error{unknown_service}.
  void declareService(const std::string& service);
  // A service that cannot be served now: queued and new requests get
  // Error{unavailable} with `reason` at once. Empty reason makes it available again.
  void setUnavailable(const std::string& service, const std::string& reason);
  void addInternalService(const std::string& service, InternalHandler handler);

  // Waits up to `timeout` for traffic, routes it, sends due heartbeats and
  // expires deadlines and silent workers.
  void poll(Millis timeout);

  void reply(const ReplyTo& to, capnp::MessageBuilder& body);
  void replyError(const ReplyTo& to, const Error& error);

  // Stops dispatching to the worker of `pid` and tells it to drain.
  void drain(int pid);
  // The supervisor saw process `pid` exit: forget its workers now (requeueing
  // what they held) rather than after missed heartbeats.
  void processDied(int pid);

  std::vector<WorkerView> workers(const std::string& service) const;
  ServiceView service(const std::string& service) const;
  bool knowsService(const std::string& service) const;

  // Called when a worker registers / is forgotten (left, died, went silent).
  void onWorkerRegistered(WorkerEvent callback) { onRegistered_ = std::move(callback); }
  void onWorkerGone(WorkerEvent callback) { onGone_ = std::move(callback); }

private:
  struct Request;
  struct Worker;
  struct Service;

  bool readClientOnce();
  bool readWorkerOnce();
  void handleWorkerMessage(const std::string& identity, Message& header, zmq::message_t body);
  void route(const std::string& service, std::unique_ptr<Request> request);
  void dispatch(Service& service);
  void finish(Service& service, Request& request, zmq::message_t body);
  void fail(Service& service, Request& request, const Error& error);
  void forgetWorker(const std::string& identity, const std::string& why);
  void sendToWorker(const std::string& identity, capnp::MessageBuilder& header,
                    zmq::message_t* body = nullptr);
  void sendReply(const std::string& client, uint64_t requestId, const std::optional<Error>& error,
                 zmq::message_t* body);
  void heartbeatAndExpire();
  Service& serviceFor(const std::string& name);

  BrokerOptions options_;
  zmq::context_t context_;
  zmq::socket_t clients_;
  zmq::socket_t workersSocket_;
  std::map<std::string, std::unique_ptr<Service>> services_;
  std::unordered_map<std::string, std::unique_ptr<Worker>> workers_; // by routing id
  std::unordered_map<std::string, InternalHandler> internal_;
  uint64_t nextDispatchId_ = 1;
  Clock::time_point nextHeartbeat_;
  Clock::time_point nextExpiryScan_;
  WorkerEvent onRegistered_;
  WorkerEvent onGone_;
};

} // namespace kiln::rpc
