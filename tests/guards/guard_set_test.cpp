// Guard sets: shared paths, source texts, the wire form and what reading it refuses.
#include <gtest/gtest.h>

#include <capnp/message.h>

#include "kiln/common/error.h"
#include "kiln/guards/wire.h"
#include "kiln/sym/print.h"

namespace kiln::guards {
namespace {

TEST(GuardSet, EqualPathsShareNodes) {
  GuardSet set;
  uint32_t a = set.path({arg(0, "self"), attr("blocks"), item(0), attr("w")});
  uint32_t b = set.path({arg(0, "self"), attr("blocks"), item(1), attr("w")});
  uint32_t c = set.path({arg(0, "self"), attr("blocks"), item(0), attr("w")});
  EXPECT_EQ(a, c);
  EXPECT_NE(a, b);
  EXPECT_EQ(set.nodes().size(), 6u); // self, blocks, [0], [0].w, [1], [1].w
  EXPECT_EQ(set.source(b), "L['self'].blocks[1].w");
  EXPECT_EQ(set.source(set.path({global("cfg"), key("it's")})), "G['cfg']['it\\'s']");
  EXPECT_EQ(set.source(set.path({kwarg("x"), size(2)})), "L['x'].size()[2]");
  set.check(a, typeIs({"torch", "Tensor"}));
  set.check(a, typeIs({"torch", "Tensor"})); // the same check once
  EXPECT_EQ(set.nodes()[a].checks.size(), 1u);
}

TEST(GuardSet, RefusesBadPathsAndGuards) {
  GuardSet set;
  EXPECT_THROW(set.node(-1, attr("x")), Error);
  uint32_t x = set.node(-1, arg(0, "x"));
  EXPECT_THROW(set.node(static_cast<int32_t>(x), arg(1, "y")), Error);
  EXPECT_THROW(set.node(5, attr("y")), Error);
  sym::Expr s0 = set.symbol("s0", set.node(static_cast<int32_t>(x), size(0)));
  EXPECT_THROW(set.symbol("s0", x), Error); // one source per symbol
  EXPECT_THROW(set.shapeGuard(s0 + 1), Error); // not a relation
  sym::Expr stray = set.table().declare("s9", std::nullopt, sym::Range::unbounded());
  EXPECT_THROW(set.shapeGuard(sym::eq(stray, 3)), Error);
  TensorCheck ragged;
  ragged.sizes = {1, 2};
  ragged.strides = {1};
  EXPECT_THROW(tensorMatches(ragged), Error);
}

TEST(GuardSet, ReplacesItsShapeGuardsOrNone) {
  GuardSet set;
  uint32_t x = set.node(-1, arg(0, "x"));
  sym::Expr s0 = set.symbol("s0", set.node(static_cast<int32_t>(x), size(0)));
  sym::Expr s1 = set.symbol("s1", set.node(static_cast<int32_t>(x), size(1)));
  set.shapeGuard(sym::ge(s0, 2));
  set.shapeGuard(sym::gt(s0, 5));
  set.replaceShapeGuards({sym::gt(s0, 5), sym::eq(s1, s0)});
  EXPECT_EQ(set.shapeGuards(), (std::vector<sym::Expr>{sym::gt(s0, 5), sym::eq(s1, s0)}));
  sym::Expr stray = set.table().declare("s9", std::nullopt, sym::Range::unbounded());
  EXPECT_THROW(set.replaceShapeGuards({sym::ge(s0, 3), sym::eq(stray, 1)}), Error);
  EXPECT_EQ(set.shapeGuards().size(), 2u) << "left as it was";
}

GuardSet sample() {
  GuardSet set;
  set.call.positional = 2;
  set.call.keywords = {"mode"};
  set.globals.gradEnabled = false;
  set.globals.autocast = {{ir::DeviceType::Cpu, true, DType::BFloat16}};
  uint32_t x = set.node(-1, arg(0, "x"));
  TensorCheck t;
  t.dtype = DType::BFloat16;
  t.device = {ir::DeviceType::Cuda, 1};
  t.requiresGrad = true;
  t.sizes = {std::nullopt, 3};
  t.strides = {3, 1};
  t.storageOffset = std::nullopt;
  set.check(x, typeIs({"torch", "Tensor"}));
  set.check(x, tensorMatches(t));
  set.check(set.node(-1, kwarg("mode")), equals(Constant{Constant::Tuple{Constant{std::string("a")}, Constant{true}, Constant{2.5}}}));
  uint32_t d = set.node(-1, arg(1, "d"));
  set.check(d, dictKeysAre({Constant{int64_t{1}}, Constant{std::string("k")}}, true));
  set.check(set.node(static_cast<int32_t>(d), intKey(1)), lengthIs(4));
  set.check(set.node(-1, global("g")), identityIs({99, 5, "<function g>"}));
  sym::Expr s0 = set.symbol("s0", set.node(static_cast<int32_t>(x), size(0)));
  set.shapeGuard(sym::ge(s0, 2));
  set.shapeGuard(sym::eq(sym::mod(s0, 8), 0));
  return set;
}

TEST(GuardSet, WireRoundTripKeepsEverything) {
  GuardSet set = sample();
  GuardSet back = guardSetFromBytes(toBytes(set));
  EXPECT_EQ(back.text(), set.text());
  EXPECT_EQ(toBytes(back), toBytes(set));
  EXPECT_NE(set.text().find("L['x'] is a tensor bfloat16 cuda:1 size [?, 3] stride [3, 1] offset ? requires_grad"),
            std::string::npos)
      << set.text();
}

TEST(GuardSet, MalformedWireIsATypedError) {
  auto expectMalformed = [](const std::function<void(schema::GuardSet::Builder)>& damage) {
    capnp::MallocMessageBuilder message;
    auto root = message.initRoot<schema::GuardSet>();
    toWire(sample(), root);
    damage(root);
    try {
      fromWire(root.asReader());
      ADD_FAILURE() << "accepted a damaged guard set";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Malformed) << e.what();
    }
  };
  expectMalformed([](auto r) { r.getNodes()[1].setParent(7); });
  expectMalformed([](auto r) { r.getNodes()[0].setParent(0); });
  expectMalformed([](auto r) { r.getNodes()[1].getStep().setAttr(); r.getNodes()[1].setParent(-1); });
  expectMalformed([](auto r) { r.getSymbols()[0].setNode(1000); });
  expectMalformed([](auto r) { r.getSymbols()[0].setSymbol("s7"); });
  expectMalformed([](auto r) { r.getShapeGuards()[0].setInteger(3); });
  expectMalformed([](auto r) { r.getCall().getKeywords().set(0, "z"); r.getCall().initKeywords(2).set(0, "z"); });
  expectMalformed([](auto r) { r.getNodes()[0].getChecks()[1].getTensor().initStrides(1); });
  EXPECT_THROW(guardSetFromBytes("not a message"), Error);
}

TEST(GuardSet, CallInputRoundTrip) {
  CallInput call;
  TensorInput t = contiguousTensor(DType::Int64, {2, 3});
  t.storageOffset = 5;
  call.args = {Input::of(t), Input::list({Input::of(1), Input::of(2.5), Input::of("s"), Input::none()}),
               Input::dict({{Input::of("a"), Input::tuple({Input::of(true)})}}),
               Input::object({"m", "Obj"}, 17, {{"w", Input::of(3)}})};
  call.kwargs = {{"k", Input::of(4)}};
  call.globals = {{"G", Input::of(1)}};
  call.closure = {Input::of(2)};
  call.state = defaultGlobalState();
  call.scope = 123;
  CallInput back = callInputFromBytes(toBytes(call));
  EXPECT_EQ(toBytes(back), toBytes(call));
  EXPECT_EQ(back.args[3].attrs[0].second.integer, 3);
  EXPECT_EQ(back.args[0].tensor.storageOffset, 5);
  // Too deep a description is refused when written, and when read.
  Input deep = Input::of(1);
  for (int k = 0; k < kMaxInputDepth + 2; ++k) deep = Input::list({deep});
  CallInput tooDeep;
  tooDeep.args = {deep};
  EXPECT_THROW(toBytes(tooDeep), Error);
}

} // namespace
} // namespace kiln::guards
