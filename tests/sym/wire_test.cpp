#include "kiln/sym/wire.h"

#include <gtest/gtest.h>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/serialize.h>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

using namespace kiln;
using namespace kiln::sym;
using schema::SymOpKind;

namespace {

struct Wire : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(4), s1 = table.createBacked(6, {2, 64});
  Expr u0 = table.createUnbacked();

  // Through bytes, as another process would read it.
  Expr roundTrip(Expr e, SymbolTable& into) {
    capnp::MallocMessageBuilder message;
    toWire(e, message.initRoot<schema::SymExpr>());
    const auto words = capnp::messageToFlatArray(message);
    capnp::FlatArrayMessageReader reader(words);
    return fromWire(reader.getRoot<schema::SymExpr>(), into);
  }

  ErrorCode codeOf(capnp::MallocMessageBuilder& message) {
    try {
      fromWire(message.getRoot<schema::SymExpr>().asReader(), table);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  }

  static schema::SymOp::Builder op(schema::SymExpr::Builder out, SymOpKind kind) {
    auto o = out.initOp();
    o.setKind(kind);
    return o;
  }
};

} // namespace

TEST_F(Wire, RoundTripsEveryKind) {
  const std::vector<Expr> exprs = {
      table.integer(-5),
      table.boolean(true),
      s0,
      3 * s0 * s0 * s1 - 2 * u0 + 7,
      s0 * s1 * u0,
      floorDiv(u0 + 1, 4),
      mod(s0 * u0, s1),
      min(s0, max(u0, s1 - 1)),
      logicalOr(logicalAnd(lt(s0, u0), eq(s1, 8)), logicalNot(logicalAnd(le(u0, 3), ne(s0, 1)))),
  };
  for (const Expr& e : exprs) EXPECT_EQ(roundTrip(e, table), e) << e;
}

TEST_F(Wire, RecanonicalisesWhatItReads) {
  capnp::MallocMessageBuilder message;
  auto add = op(message.initRoot<schema::SymExpr>(), SymOpKind::ADD).initArgs(4);
  add[0].setSymbol("s0");
  add[1].setInteger(1);
  add[2].setSymbol("s0");
  auto quotient = op(add[3], SymOpKind::FLOOR_DIV).initArgs(2);
  quotient[0].setSymbol("u0");
  quotient[1].setInteger(1);
  EXPECT_EQ(fromWire(message.getRoot<schema::SymExpr>().asReader(), table), 2 * s0 + u0 + 1);

  capnp::MallocMessageBuilder greater;
  auto args = op(greater.initRoot<schema::SymExpr>(), SymOpKind::GE).initArgs(2);
  args[0].setSymbol("s0");
  args[1].setSymbol("u0");
  EXPECT_EQ(fromWire(greater.getRoot<schema::SymExpr>().asReader(), table), le(u0, s0));
}

TEST_F(Wire, DeclaresUnknownSymbolsWithoutHintOrRange) {
  SymbolTable other;
  const Expr e = roundTrip(floorDiv(s1 * u0, 8), other);
  const auto s1There = other.lookup("s1");
  ASSERT_TRUE(s1There);
  EXPECT_FALSE(other.isBacked(*s1There));
  EXPECT_EQ(range(*s1There), Range::unbounded());
  EXPECT_EQ(toString(e), "(s1*u0)//8");
}

TEST_F(Wire, RefusesMalformedTrees) {
  {
    capnp::MallocMessageBuilder m; // an op this version does not know
    op(m.initRoot<schema::SymExpr>(), static_cast<SymOpKind>(99)).initArgs(1)[0].setInteger(1);
    EXPECT_EQ(codeOf(m), ErrorCode::Malformed);
  }
  {
    capnp::MallocMessageBuilder m; // a union member this version does not know
    m.initRoot<schema::SymExpr>().setInteger(3);
    capnp::AnyStruct::Builder any = m.getRoot<capnp::AnyStruct>();
    any.getDataSection()[8] = 9; // the discriminant: the uint16 after the Int64
    EXPECT_EQ(codeOf(m), ErrorCode::Malformed);
  }
  for (const auto& [kind, arity] :
       std::vector<std::pair<SymOpKind, unsigned>>{{SymOpKind::FLOOR_DIV, 1},
                                                   {SymOpKind::MOD, 3},
                                                   {SymOpKind::NOT, 2},
                                                   {SymOpKind::LT, 0},
                                                   {SymOpKind::ADD, 0},
                                                   {SymOpKind::MIN, 0}}) {
    capnp::MallocMessageBuilder m;
    auto args = op(m.initRoot<schema::SymExpr>(), kind).initArgs(arity);
    for (auto arg : args) arg.setInteger(2);
    EXPECT_EQ(codeOf(m), ErrorCode::Malformed) << static_cast<int>(kind) << " " << arity;
  }
  for (const char* name : {"", "2x", "a b", "s0;"}) {
    capnp::MallocMessageBuilder m;
    m.initRoot<schema::SymExpr>().setSymbol(name);
    EXPECT_EQ(codeOf(m), ErrorCode::Malformed) << name;
  }
  {
    capnp::MallocMessageBuilder m; // a boolean where an integer belongs
    auto args = op(m.initRoot<schema::SymExpr>(), SymOpKind::MUL).initArgs(1);
    args[0].setBoolean(true);
    EXPECT_EQ(codeOf(m), ErrorCode::Malformed);
  }
  {
    capnp::MallocMessageBuilder m; // division by a constant zero
    auto args = op(m.initRoot<schema::SymExpr>(), SymOpKind::MOD).initArgs(2);
    args[0].setSymbol("s0");
    args[1].setInteger(0);
    EXPECT_EQ(codeOf(m), ErrorCode::Malformed);
  }
}

TEST_F(Wire, RefusesNestingTooDeep) {
  capnp::MallocMessageBuilder m;
  auto at = m.initRoot<schema::SymExpr>();
  for (int i = 0; i < kMaxWireDepth + 1; ++i) at = op(at, SymOpKind::NOT).initArgs(1)[0];
  at.setBoolean(true);
  EXPECT_EQ(codeOf(m), ErrorCode::Malformed);
}

TEST_F(Wire, TurnsCapnpDecodingFailuresIntoMalformed) {
  capnp::MallocMessageBuilder message;
  Expr deep = u0;
  for (int i = 0; i < 20; ++i) deep = floorDiv(deep + s0, 3);
  toWire(deep, message.initRoot<schema::SymExpr>());
  const auto words = capnp::messageToFlatArray(message);
  capnp::ReaderOptions options;
  options.nestingLimit = 8;
  capnp::FlatArrayMessageReader reader(words, options);
  try {
    fromWire(reader.getRoot<schema::SymExpr>(), table);
    FAIL() << "decoded past the nesting limit";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Malformed);
  }
}

TEST_F(Wire, RefusesToWriteHugeExponents) {
  Expr power = s0;
  for (int i = 0; i < kMaxWireExponent; ++i) power = power * s0;
  capnp::MallocMessageBuilder message;
  EXPECT_THROW(toWire(power, message.initRoot<schema::SymExpr>()), Error);
}
