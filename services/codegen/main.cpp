// kiln-codegen: the codegen service process. Answers the common verbs; its own verbs
// come with its issue (see docs/services/codegen.md).
#include "kiln/rpc/service_main.h"
#include "kiln/schema/codegen.capnp.h"

int main(int argc, char** argv) {
  using Worker =
      kiln::rpc::CommonVerbsWorker<kiln::schema::CodegenRequest, kiln::schema::CodegenReply>;
  return kiln::rpc::serviceMain<Worker>("codegen", argc, argv);
}
