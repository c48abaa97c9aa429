// kiln-tracer: the tracer service process. Answers the common verbs; its own verbs
// come with its issue (see docs/services/tracer.md).
#include "kiln/rpc/service_main.h"
#include "kiln/schema/tracer.capnp.h"

int main(int argc, char** argv) {
  using Worker =
      kiln::rpc::CommonVerbsWorker<kiln::schema::TracerRequest, kiln::schema::TracerReply>;
  return kiln::rpc::serviceMain<Worker>("tracer", argc, argv);
}
