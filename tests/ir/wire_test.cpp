#include "kiln/ir/wire.h"

#include <gtest/gtest.h>

#include <cmath>

#include <random>

#include <capnp/message.h>

#include "kiln/common/error.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/print.h"
#include "kiln/sym/symbol_table.h"
#include "sample_graph.h"

namespace kiln::ir {
namespace {

TEST(Wire, RoundTripKeepsHashAndText) {
  sym::SymbolTable table;
  Graph g = testing::sampleGraph(table);
  std::string bytes = toBytes(g);
  sym::SymbolTable other;
  Graph back = fromBytes(bytes, other);
  EXPECT_EQ(structuralHash(back), structuralHash(g));
  EXPECT_EQ(print(back), print(g));
  ASSERT_TRUE(other.lookup("s0"));
  EXPECT_EQ(other.hint(*other.lookup("s0")), 8);
  EXPECT_EQ(structuralHash(fromBytes(bytes, table)), structuralHash(g)); // into the same table
}

TEST(Wire, RoundTripsUnbackedSymbolsAndEveryAttributeKind) {
  sym::SymbolTable table;
  sym::Expr u0 = table.createUnbacked({1, 64});
  Graph g(table);
  ValueId x = g.placeholder("x", testing::tensorOf(table, DType::BFloat16, {u0, u0 * 2}));
  ValueId n = g.placeholder("n", Value(u0 + 1));
  ValueId a =
      g.call("expand", {x}, {{"size", std::vector<sym::Expr>{table.integer(3), u0, u0 * 2}}});
  ValueId b = g.call("add", {a}, {{"other", u0}});
  ValueId c = g.call("to_dtype", {b}, {{"dtype", DType::Float64}});
  ValueId d = g.call("clamp", {c, n}, {{"max", true}});
  ValueId e = g.call("gelu", {d}, {{"approximate", std::string("tanh")}});
  ValueId f = g.call("amax", {e}, {{"dim", std::vector<int64_t>{0, 2}}});
  g.setOutputs({f});
  sym::SymbolTable other;
  Graph back = fromBytes(toBytes(g), other);
  EXPECT_EQ(structuralHash(back), structuralHash(g));
  EXPECT_EQ(print(back), print(g));
}

ErrorCode readCode(std::string_view bytes) {
  sym::SymbolTable table;
  try {
    fromBytes(bytes, table);
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::Internal; // accepted
}

TEST(Wire, MalformedInputIsAnErrorNotACrash) {
  EXPECT_EQ(readCode("abc"), ErrorCode::Malformed);
  sym::SymbolTable table;
  std::string good = toBytes(testing::sampleGraph(table));
  std::mt19937 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string bad = good;
    for (int k = 0; k < 1 + i % 4; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());
    ErrorCode code = readCode(bad);
    EXPECT_TRUE(code == ErrorCode::Malformed || code == ErrorCode::TooLarge ||
                code == ErrorCode::Internal)
        << errorCodeName(code);
  }
  EXPECT_EQ(readCode(good.substr(0, good.size() / 2)), ErrorCode::Malformed);
}

TEST(Wire, RejectsWrongMetasAndBadIds) {
  sym::SymbolTable table;
  Graph g = testing::sampleGraph(table);
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::Graph>();
  toWire(g, root);
  root.getValues()[2].getTensor().setDtype(schema::DType::INT8); // the first add's result
  sym::SymbolTable other;
  try {
    fromWire(root.asReader(), other);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Malformed);
    EXPECT_NE(e.message().find("%2 (add)"), std::string::npos) << e.message();
  }
  toWire(g, root);
  root.getNodes()[0].getInputs().set(0, 99);
  EXPECT_THROW(fromWire(root.asReader(), other), Error);
  toWire(g, root);
  root.getOutputs().set(0, 1000);
  EXPECT_THROW(fromWire(root.asReader(), other), Error);
}

TEST(Wire, NaNAttributesRoundTrip) {
  sym::SymbolTable table;
  Graph g(table);
  g.setOutputs({g.call("full", {}, {{"size", std::vector<int64_t>{2}}, {"fill_value", std::nan("")}})});
  testing::expectRoundTrip(g); // verified on reading: NaN equals NaN as an attribute
}

} // namespace
} // namespace kiln::ir
