// kiln-shapes: the shapes service process. Answers the common verbs; its own verbs
// come with its issue (see docs/services/shapes.md).
#include "kiln/rpc/service_main.h"
#include "kiln/schema/shapes.capnp.h"

int main(int argc, char** argv) {
  using Worker =
      kiln::rpc::CommonVerbsWorker<kiln::schema::ShapesRequest, kiln::schema::ShapesReply>;
  return kiln::rpc::serviceMain<Worker>("shapes", argc, argv);
}
