// The main of a service process: the flags every service takes
// (--broker, --heartbeat-ms, --liveness), SIGTERM/SIGINT handling (finish the
// request in hand, say goodbye, exit 0), and the verbs every service answers.
#pragma once

#include <memory>
#include <string>

#include "kiln/rpc/worker.h"
#include "kiln/schema/common.capnp.h"

namespace kiln::rpc {

// Fills `ping`/`info` answers the same way in every service.
void fillInfo(schema::ServiceInfo::Builder info, const std::string& service);

// A worker for a service whose Request/Reply unions have `ping` and `info`
// (and, until its own issue lands, nothing else).
template <class Request, class Reply> class CommonVerbsWorker : public Worker {
public:
  using Worker::Worker;

protected:
  void handle(Message& request, capnp::MessageBuilder& reply) override {
    auto in = request.root<Request>();
    auto out = reply.initRoot<Reply>();
    switch (in.which()) {
    case Request::PING: out.setPong(in.getPing()); return;
    case Request::INFO: fillInfo(out.initInfo(), options().service); return;
    }
    throw Error(ErrorCode::Unsupported, "unknown verb " + std::to_string(int(in.which())));
  }
};

using WorkerFactory = std::unique_ptr<Worker> (*)(WorkerOptions);

// Parses flags, runs the worker until drained or signalled; returns the exit status.
int serviceMain(const std::string& service, int argc, char** argv, WorkerFactory makeWorker);

template <class W> int serviceMain(const std::string& service, int argc, char** argv) {
  return serviceMain(service, argc, argv, [](WorkerOptions options) -> std::unique_ptr<Worker> {
    return std::make_unique<W>(std::move(options));
  });
}

} // namespace kiln::rpc
