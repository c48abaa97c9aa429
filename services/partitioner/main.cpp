// kiln-partitioner: the partitioner service process. Answers the common verbs; its own verbs
// come with its issue (see docs/services/partitioner.md).
#include "kiln/rpc/service_main.h"
#include "kiln/schema/partitioner.capnp.h"

int main(int argc, char** argv) {
  using Worker = kiln::rpc::CommonVerbsWorker<kiln::schema::PartitionerRequest,
                                              kiln::schema::PartitionerReply>;
  return kiln::rpc::serviceMain<Worker>("partitioner", argc, argv);
}
