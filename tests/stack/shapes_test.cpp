// The shapes service through a real stack: its three verbs from the client SDK,
// and typed errors (never a crash) for requests it cannot read.
#include <unistd.h>

#include <filesystem>

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "kiln_cli.h"
#include "kiln/client/stack.h"
#include "kiln/common/error.h"
#include "kiln/schema/shapes.capnp.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

using kiln::testing::runKiln;

class ShapesService : public ::testing::Test {
protected:
  void SetUp() override {
    runDir_ = "/tmp/kst-" + std::to_string(getpid()) + "-run";
    std::string out = runKiln("--run-dir " + runDir_ + " up");
    ASSERT_NE(out.find("up"), std::string::npos) << out;
  }
  void TearDown() override {
    runKiln("--run-dir " + runDir_ + " down");
    fs::remove_all(runDir_);
  }
  std::string runDir_;
};

ErrorCode codeOf(client::Stack& stack, capnp::MallocMessageBuilder& request) {
  try {
    stack.rpc().call("shapes", request, Millis(10000));
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::Internal; // answered: not what a test expects
}

} // namespace

TEST_F(ShapesService, VerbsAndErrors) {
  auto stack = client::Stack::connect(runDir_);
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(8), s1 = table.createBacked(8);
  sym::Expr u0 = table.createUnbacked(sym::Range::size());

  // simplify: the examples.
  shapes::Simplified s =
      stack.simplify(table, {sym::gt(s0, 2), sym::gt(s0, 5), sym::eq(s0 * 2, s1 * 2)});
  EXPECT_EQ(s.checks, (std::vector<sym::Expr>{sym::eq(s1, s0), sym::gt(s0, 5)}));
  ASSERT_EQ(s.replacements.size(), 1u);
  EXPECT_EQ(s.replacements[0].symbol, s1);
  EXPECT_EQ(s.rangeOf(s0), (sym::Range{6, sym::kInf}));

  // decide: ranges, z3, and unknown on a 1 ms limit.
  EXPECT_EQ(stack.decide(sym::ge(u0, 0)).how, "ranges");
  shapes::Decision d = stack.decide(sym::le(u0, s0 + 1), {sym::le(u0, s1), sym::eq(s0, s1)});
  EXPECT_EQ(d.answer, shapes::Answer::True);
  auto cube = [](sym::Expr x) { return x * x * x; };
  d = stack.decide(sym::ne(cube(u0) + cube(s0), cube(s1)),
                   {sym::ge(u0, 1), sym::ge(s0, 1), sym::ge(s1, 1)}, {1, 1});
  EXPECT_EQ(d.answer, shapes::Answer::Unknown) << d.how;

  // checkConstraints: Dims the guards make equal.
  shapes::ConstraintReport r = stack.checkConstraints(
      table, {{"x.size(0)", s0, "batch"}, {"y.size(0)", s1, "seq"}}, {sym::eq(s0, s1)});
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].fix, "seq = batch");
  EXPECT_NE(r.text().find("Suggested fixes:"), std::string::npos);

  // Bad input: typed errors, and the service lives on.
  try {
    stack.simplify(table, {sym::lt(s0, 4)});
    FAIL() << "a guard false at the hints";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find("hints"), std::string::npos) << e.message();
  }
  capnp::MallocMessageBuilder undeclared;
  auto in = undeclared.initRoot<schema::ShapesRequest>().initSimplify();
  in.initGuards(1)[0].setSymbol("s9"); // a guard that is not even boolean, over nothing declared
  EXPECT_EQ(codeOf(stack, undeclared), ErrorCode::InvalidArgument);
  capnp::MallocMessageBuilder malformed;
  auto op = malformed.initRoot<schema::ShapesRequest>().initDecide().initQuestion().initOp();
  op.setKind(schema::SymOpKind::NOT);
  op.initArgs(3); // `not` of three arguments
  EXPECT_EQ(codeOf(stack, malformed), ErrorCode::Malformed);
  capnp::MallocMessageBuilder notBoolean;
  auto q = notBoolean.initRoot<schema::ShapesRequest>().initDecide();
  auto symbol = q.initSymbols(1)[0];
  symbol.setName("u0");
  symbol.getHint().setNone();
  symbol.setLoUnbounded(true);
  symbol.setHiUnbounded(true);
  q.initQuestion().setSymbol("u0");
  EXPECT_EQ(codeOf(stack, notBoolean), ErrorCode::InvalidArgument);
  EXPECT_EQ(stack.ping("shapes", "still here"), "still here");
}
