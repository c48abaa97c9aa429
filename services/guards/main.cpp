// kiln-guards: the guards service process. Answers the common verbs; its own verbs
// come with its issue (see docs/services/guards.md).
#include "kiln/rpc/service_main.h"
#include "kiln/schema/guards.capnp.h"

int main(int argc, char** argv) {
  using Worker =
      kiln::rpc::CommonVerbsWorker<kiln::schema::GuardsRequest, kiln::schema::GuardsReply>;
  return kiln::rpc::serviceMain<Worker>("guards", argc, argv);
}
