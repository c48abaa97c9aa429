// kiln-partitioner: the partitioner service process. Answers the common verbs and
// `partition` (forward graph + requires_grad mask -> forward and backward graphs)
// through libs/autograd (train.h); see docs/services.md.
#include "kiln/autograd/train.h"
#include "kiln/common/error.h"
#include "kiln/ir/wire.h"
#include "kiln/rpc/service_main.h"
#include "kiln/schema/partitioner.capnp.h"
#include "kiln/sym/symbol_table.h"

namespace {

using kiln::schema::PartitionerReply;
using kiln::schema::PartitionerRequest;

template <class List> void setList(List list, const std::vector<size_t>& values) {
  for (size_t i = 0; i < values.size(); ++i) list.set(i, static_cast<uint32_t>(values[i]));
}

void partition(kiln::schema::PartitionRequest::Reader in,
               kiln::schema::PartitionReply::Builder out) {
  kiln::sym::SymbolTable table; // one per request: symbols are the graph's own
  kiln::ir::Graph graph = kiln::ir::fromWire(in.getGraph(), table);
  std::vector<bool> requiresGrad;
  for (bool flag : in.getRequiresGrad()) requiresGrad.push_back(flag);
  kiln::autograd::TrainingGraphs t = kiln::autograd::partitionForTraining(
      graph, requiresGrad, {in.getOptions().getMemoryBudget()});
  kiln::ir::toWire(t.partition.forward, out.initForward());
  kiln::ir::toWire(t.partition.backward, out.initBackward());
  out.setUserOutputs(static_cast<uint32_t>(t.userOutputs));
  setList(out.initMutatedInputs(t.mutatedInputs.size()), t.mutatedInputs);
  out.setSaved(static_cast<uint32_t>(t.partition.saved.size()));
  setList(out.initTangentOf(t.partition.tangentOf.size()), t.partition.tangentOf);
  setList(out.initGradOf(t.partition.gradOf.size()), t.partition.gradOf);
  out.setRecomputed(static_cast<uint32_t>(t.partition.recomputed.size()));
}

class PartitionerWorker : public kiln::rpc::Worker {
public:
  using Worker::Worker;

protected:
  void handle(kiln::rpc::Message& request, capnp::MessageBuilder& reply) override {
    auto in = request.root<PartitionerRequest>();
    auto out = reply.initRoot<PartitionerReply>();
    switch (in.which()) {
    case PartitionerRequest::PING: out.setPong(in.getPing()); return;
    case PartitionerRequest::INFO: kiln::rpc::fillInfo(out.initInfo(), options().service); return;
    case PartitionerRequest::PARTITION: return partition(in.getPartition(), out.initPartition());
    }
    throw kiln::Error(kiln::ErrorCode::Unsupported,
                      "unknown verb " + std::to_string(int(in.which())));
  }
};

} // namespace

int main(int argc, char** argv) {
  return kiln::rpc::serviceMain<PartitionerWorker>("partitioner", argc, argv);
}
