// kiln-codegen: the codegen service process. Answers the common verbs and
// `compile` (graph -> artifact) through libs/codegen, with the artifact cache
// shared by every codegen worker of the host ($KILN_CACHE_DIR, see
// docs/services.md).
#include <capnp/serialize.h>

#include <thread>

#include "kiln/codegen/cache.h"
#include "kiln/codegen/cuda_compiler.h"
#include "kiln/common/error.h"
#include "kiln/ir/wire.h"
#include "kiln/rpc/service_main.h"
#include "kiln/schema/codegen.capnp.h"
#include "kiln/sym/symbol_table.h"

namespace {

using kiln::schema::CodegenReply;
using kiln::schema::CodegenRequest;

class CodegenWorker : public kiln::rpc::Worker {
public:
  explicit CodegenWorker(kiln::rpc::WorkerOptions options)
      : Worker(std::move(options)), cache_(kiln::codegen::defaultCacheDir()),
        warmUp_(kiln::codegen::warmUpCudaCompiler) {}
  ~CodegenWorker() override { warmUp_.join(); }

protected:
  void handle(kiln::rpc::Message& request, capnp::MessageBuilder& reply) override {
    auto in = request.root<CodegenRequest>();
    auto out = reply.initRoot<CodegenReply>();
    switch (in.which()) {
    case CodegenRequest::PING: out.setPong(in.getPing()); return;
    case CodegenRequest::INFO: kiln::rpc::fillInfo(out.initInfo(), options().service); return;
    case CodegenRequest::COMPILE: return compile(in.getCompile(), out.initCompile());
    }
    throw kiln::Error(kiln::ErrorCode::Unsupported,
                      "unknown verb " + std::to_string(int(in.which())));
  }

private:
  void compile(kiln::schema::CompileRequest::Reader in, kiln::schema::CompileReply::Builder out) {
    kiln::sym::SymbolTable table; // one per request: symbols are the graph's own
    kiln::ir::Graph graph = kiln::ir::fromWire(in.getGraph(), table);
    kiln::codegen::CompileResult result =
        kiln::codegen::compileCached(graph, in.getTarget(), cache_);
    kj::ArrayPtr<const capnp::word> words(
        reinterpret_cast<const capnp::word*>(result.artifact.data()),
        result.artifact.size() / sizeof(capnp::word));
    capnp::FlatArrayMessageReader artifact(words, {uint64_t{1} << 30, 64});
    out.setArtifact(artifact.getRoot<kiln::schema::Artifact>());
    out.setCacheHit(result.cacheHit);
  }

  kiln::codegen::ArtifactCache cache_;
  std::thread warmUp_; // NVRTC's first compile, off the first request's time
};

} // namespace

int main(int argc, char** argv) {
  return kiln::rpc::serviceMain<CodegenWorker>("codegen", argc, argv);
}
