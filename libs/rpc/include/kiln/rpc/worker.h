// Worker: the serve loop of a service process. Registers with the broker,
// answers requests one at a time through handle(), heartbeats both ways
// (also while handle() runs), reconnects when the broker goes silent, and on
// `drain` (or stop()) finishes the request in hand, says goodbye and returns.
#pragma once

#include <atomic>
#include <string>

#include <capnp/message.h>

#include "kiln/common/clock.h"
#include "kiln/rpc/message.h"

namespace kiln::rpc {

struct WorkerOptions {
  std::string endpoint; // the broker's worker endpoint
  std::string service;  // the name clients call
  Millis heartbeat{250};
  int liveness = 4; // broker silent for liveness * heartbeat -> reconnect
  Limits limits;
};

class Worker {
public:
  explicit Worker(WorkerOptions options);
  virtual ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Serves until drained or stopped.
  void run();
  // Asks run() to finish the request in hand and return; safe from a signal handler.
  void stop() { stopping_.store(true); }

  const WorkerOptions& options() const { return options_; }
  uint64_t served() const { return served_; }

protected:
  // Reads the request body, builds the reply body. Throw kiln::Error for a
  // typed error reply; any other exception becomes Error{internal}.
  virtual void handle(Message& request, capnp::MessageBuilder& reply) = 0;

private:
  class Connection;
  void serveOne(Connection& connection, uint64_t dispatchId, zmq::message_t body);

  WorkerOptions options_;
  std::atomic<bool> stopping_{false};
  uint64_t served_ = 0;
};

} // namespace kiln::rpc
