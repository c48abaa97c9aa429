// kiln-test-worker: serves tests/rpc/testsvc.capnp as a real process, so the RPC
// tests can make it slow, make it crash, and SIGKILL it.
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "kiln/rpc/service_main.h"
#include "kiln/testsvc/testsvc.capnp.h"

namespace {

using kiln::Error;
using kiln::ErrorCode;
using kiln::testsvc::Request;

class TestWorker : public kiln::rpc::Worker {
public:
  using Worker::Worker;

protected:
  void handle(kiln::rpc::Message& message, capnp::MessageBuilder& builder) override {
    auto request = message.root<Request>();
    auto reply = builder.initRoot<kiln::testsvc::Reply>();
    reply.setPid(getpid());
    switch (request.which()) {
    case Request::ECHO: reply.setEcho(request.getEcho()); return;
    case Request::SLEEP:
      std::this_thread::sleep_for(std::chrono::milliseconds(request.getSleep()));
      reply.setSlept(request.getSleep());
      return;
    case Request::CRASH:
      if (request.getCrash() != kiln::testsvc::CRASH_TOKEN)
        throw Error(ErrorCode::InvalidArgument, "crash without the crash token");
      raise(SIGKILL);
      return;
    case Request::WHOAMI: reply.setWhoami(); return;
    case Request::NEST: {
      uint32_t depth = 0;
      for (auto nest = request.getNest(); nest.hasChild(); nest = nest.getChild()) ++depth;
      reply.setDepth(depth);
      return;
    }
    case Request::FAIL: throw Error(ErrorCode::InvalidArgument, request.getFail());
    }
    throw Error(ErrorCode::Unsupported, "unknown verb " + std::to_string(int(request.which())));
  }
};

} // namespace

int main(int argc, char** argv) {
  return kiln::rpc::serviceMain<TestWorker>("testsvc", argc, argv);
}
