// kiln-shapes: the shapes service process. Answers the common verbs, `simplify`
// (guards -> ranges, replacements, minimal guards), `decide` (true / false /
// unknown under facts) and `checkConstraints` (a trace's guards against the user's
// dynamic_shapes) through libs/shapes; see docs/services.md.
#include "kiln/common/error.h"
#include "kiln/rpc/service_main.h"
#include "kiln/schema/shapes.capnp.h"
#include "kiln/shapes/constraints.h"
#include "kiln/shapes/decide.h"
#include "kiln/shapes/simplify.h"
#include "kiln/shapes/wire.h"
#include "kiln/sym/symbol_table.h"

namespace {

namespace shapes = kiln::shapes;
using kiln::schema::ShapesReply;
using kiln::schema::ShapesRequest;

// Each request gets a fresh symbol table: its own declared symbols, nothing kept.
void simplify(kiln::schema::SimplifyRequest::Reader in, kiln::schema::SimplifyReply::Builder out) {
  kiln::sym::SymbolTable table;
  shapes::readSymbols(in.getSymbols(), table);
  auto guards = shapes::readExprs(in.getGuards(), table, "guard");
  shapes::writeSimplified(shapes::simplify(table, guards, shapes::readOptions(in.getOptions())),
                          out);
}

void decide(kiln::schema::DecideRequest::Reader in, kiln::schema::DecideReply::Builder out) {
  kiln::sym::SymbolTable table;
  shapes::readSymbols(in.getSymbols(), table);
  auto question = shapes::readExpr(in.getQuestion(), table, "question");
  auto facts = shapes::readExprs(in.getFacts(), table, "fact");
  shapes::writeDecision(shapes::decide(question, facts, shapes::readOptions(in.getOptions())), out);
}

void checkConstraints(kiln::schema::CheckConstraintsRequest::Reader in,
                      kiln::schema::CheckConstraintsReply::Builder out) {
  kiln::sym::SymbolTable table;
  shapes::readSymbols(in.getSymbols(), table);
  std::vector<shapes::DimSpec> dims;
  for (auto d : in.getDims()) dims.push_back(shapes::readDim(d, table));
  auto guards = shapes::readExprs(in.getGuards(), table, "guard");
  shapes::writeReport(
      shapes::checkConstraints(table, dims, guards, shapes::readOptions(in.getOptions())), out);
}

class ShapesWorker : public kiln::rpc::Worker {
public:
  using Worker::Worker;

protected:
  void handle(kiln::rpc::Message& request, capnp::MessageBuilder& reply) override {
    auto in = request.root<ShapesRequest>();
    auto out = reply.initRoot<ShapesReply>();
    switch (in.which()) {
    case ShapesRequest::PING: out.setPong(in.getPing()); return;
    case ShapesRequest::INFO: kiln::rpc::fillInfo(out.initInfo(), options().service); return;
    case ShapesRequest::SIMPLIFY: return simplify(in.getSimplify(), out.initSimplify());
    case ShapesRequest::DECIDE: return decide(in.getDecide(), out.initDecide());
    case ShapesRequest::CHECK_CONSTRAINTS:
      return checkConstraints(in.getCheckConstraints(), out.initCheckConstraints());
    }
    throw kiln::Error(kiln::ErrorCode::Unsupported,
                      "unknown verb " + std::to_string(int(in.which())));
  }
};

} // namespace

int main(int argc, char** argv) {
  return kiln::rpc::serviceMain<ShapesWorker>("shapes", argc, argv);
}
