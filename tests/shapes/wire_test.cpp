#include "kiln/shapes/wire.h"

#include <capnp/message.h>
#include <gtest/gtest.h>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/wire.h"

using namespace kiln;
using namespace kiln::sym;
namespace shapes = kiln::shapes;

namespace {

struct ShapesWire : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(8, {2, kInf});
  Expr u0 = table.createUnbacked({0, 100});

  // The request's symbols as a fresh service-side table would read them.
  void readInto(SymbolTable& fresh) {
    capnp::MallocMessageBuilder message;
    auto request = message.initRoot<schema::SimplifyRequest>();
    shapes::writeSymbols(table, request.initSymbols(2));
    shapes::readSymbols(request.asReader().getSymbols(), fresh);
  }
};

} // namespace

TEST_F(ShapesWire, SymbolsKeepHintsAndRanges) {
  SymbolTable fresh;
  readInto(fresh);
  Expr f0 = *fresh.lookup("s0"), fu = *fresh.lookup("u0");
  EXPECT_EQ(fresh.hint(f0), std::optional<int64_t>(8));
  EXPECT_EQ(range(f0), (Range{2, kInf}));
  EXPECT_FALSE(fresh.isBacked(fu));
  EXPECT_EQ(range(fu), (Range{0, 100}));
  EXPECT_THROW(readInto(fresh), Error) << "declared twice";
}

TEST_F(ShapesWire, AnExpressionMayNameOnlyDeclaredSymbols) {
  SymbolTable fresh;
  readInto(fresh);
  capnp::MallocMessageBuilder message;
  auto e = message.initRoot<schema::SymExpr>();
  auto op = e.initOp();
  op.setKind(schema::SymOpKind::LE);
  auto args = op.initArgs(2);
  args[0].setSymbol("s0");
  args[1].setSymbol("s7");
  try {
    shapes::readExpr(e.asReader(), fresh, "guard 0");
    FAIL() << "s7 is not declared";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::InvalidArgument);
    EXPECT_EQ(err.message(), "guard 0 names s7, which the request does not declare");
  }
  op.initArgs(1)[0].setSymbol("s0"); // `<=` of one argument
  try {
    shapes::readExpr(e.asReader(), fresh, "guard 0");
    FAIL() << "wrong arity";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::Malformed);
  }
}

TEST_F(ShapesWire, RepliesRoundTrip) {
  shapes::Simplified s;
  s.guards = {eq(mod(s0, 8), 0)};
  s.replacements = {{u0, s0 * 2}};
  s.ranges = {{s0, {8, kInf}}, {u0, {16, 100}}};
  s.checks = {eq(u0, s0 * 2), eq(mod(s0, 8), 0)};
  s.steps = {"one", "two"};
  capnp::MallocMessageBuilder message;
  auto reply = message.initRoot<schema::ShapesReply>();
  shapes::writeSimplified(s, reply.initSimplify());
  shapes::Simplified back = shapes::readSimplified(reply.asReader().getSimplify(), table);
  EXPECT_EQ(back.guards, s.guards);
  ASSERT_EQ(back.replacements.size(), 1u);
  EXPECT_EQ(back.replacements[0].symbol, u0);
  EXPECT_EQ(back.replacements[0].expr, s0 * 2);
  EXPECT_EQ(back.ranges, s.ranges);
  EXPECT_EQ(back.checks, s.checks);
  EXPECT_EQ(back.steps, s.steps);

  shapes::writeDecision({shapes::Answer::False, "z3"}, reply.initDecide());
  shapes::Decision d = shapes::readDecision(reply.asReader().getDecide());
  EXPECT_EQ(d.answer, shapes::Answer::False);
  EXPECT_EQ(d.how, "z3");

  shapes::ConstraintReport r;
  r.violations.push_back({shapes::ViolationKind::Divisible, {"batch"}, "message", "fix"});
  r.asserts.push_back({ne(s0, u0), {"batch"}, "the traced code needs batch != u0"});
  shapes::writeReport(r, reply.initCheckConstraints());
  EXPECT_EQ(reply.asReader().getCheckConstraints().getText(), r.text());
  shapes::ConstraintReport rb = shapes::readReport(reply.asReader().getCheckConstraints(), table);
  ASSERT_EQ(rb.asserts.size(), 1u);
  EXPECT_EQ(rb.asserts[0].condition, ne(s0, u0));
  EXPECT_EQ(rb.asserts[0].dims, std::vector<std::string>{"batch"});
  EXPECT_EQ(rb.asserts[0].message, "the traced code needs batch != u0");
  ASSERT_EQ(rb.violations.size(), 1u);
  EXPECT_EQ(rb.violations[0].kind, shapes::ViolationKind::Divisible);
  EXPECT_EQ(rb.violations[0].dims, std::vector<std::string>{"batch"});
  EXPECT_EQ(rb.text(), r.text());
}

TEST_F(ShapesWire, DimSpecsRoundTrip) {
  shapes::DimSpec d{"y.size(0)", u0, "n", {2, 64}, s0 * 2};
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::DimSpec>();
  shapes::writeDim(d, out);
  shapes::DimSpec back = shapes::readDim(out.asReader(), table);
  EXPECT_EQ(back.source, "y.size(0)");
  EXPECT_EQ(back.symbol, u0);
  EXPECT_EQ(back.dim, "n");
  EXPECT_EQ(back.range, (Range{2, 64}));
  EXPECT_EQ(back.derived, s0 * 2);
  out.setSymbol("s9");
  EXPECT_THROW(shapes::readDim(out.asReader(), table), Error);
}
