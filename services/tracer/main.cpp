// kiln-tracer: the tracer service process. Answers the common verbs and
// `trace` (a function's bytecode and the objects it reads -> a graph, its
// guards and its output structure; or the objects it still needs; or why it
// cannot be traced) through libs/tracer (docs/tracer.md).
#include "kiln/common/error.h"
#include "kiln/rpc/service_main.h"
#include "kiln/schema/tracer.capnp.h"
#include "kiln/tracer/tracer.h"

namespace {

using kiln::schema::TracerReply;
using kiln::schema::TracerRequest;

class TracerWorker : public kiln::rpc::Worker {
public:
  using Worker::Worker;

protected:
  void handle(kiln::rpc::Message& request, capnp::MessageBuilder& reply) override {
    auto in = request.root<TracerRequest>();
    auto out = reply.initRoot<TracerReply>();
    switch (in.which()) {
    case TracerRequest::PING: out.setPong(in.getPing()); return;
    case TracerRequest::INFO: kiln::rpc::fillInfo(out.initInfo(), options().service); return;
    case TracerRequest::TRACE: return kiln::tracer::trace(in.getTrace(), out.initTrace());
    }
    throw kiln::Error(kiln::ErrorCode::Unsupported, "unknown verb " + std::to_string(int(in.which())));
  }
};

} // namespace

int main(int argc, char** argv) {
  return kiln::rpc::serviceMain<TracerWorker>("tracer", argc, argv);
}
