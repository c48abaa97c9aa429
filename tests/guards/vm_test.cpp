// Each guard kind passes and fails on the right inputs through the C++ front
// end, with the failure naming its source.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/guards/input_frontend.h"
#include "kiln/guards/wire.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::guards {
namespace {

CallInput callOf(std::vector<Input> args) {
  CallInput call = CallInput::of(std::move(args));
  call.scope = 7;
  return call;
}

// The set as the VM runs it, also after a trip over the wire.
std::optional<std::string> failure(const GuardSet& set, const CallInput& call) {
  auto direct = firstFailure(compile(set), call);
  auto wired = firstFailure(compile(guardSetFromBytes(toBytes(set))), callInputFromBytes(toBytes(call)));
  EXPECT_EQ(direct, wired);
  return direct;
}

GuardSet oneArg(const std::string& name = "x") {
  GuardSet set;
  set.call.positional = 1;
  set.node(-1, arg(0, name));
  return set;
}

TEST(Vm, TheValueOfA0dTensorIsReadThroughItem) {
  auto scalar = [](std::variant<std::monostate, int64_t, double> value, DType dtype) {
    TensorInput t = contiguousTensor(dtype, {});
    t.value = value;
    return callOf({Input::of(t)});
  };
  GuardSet ints = oneArg("n");
  uint32_t item = ints.node(0, value());
  EXPECT_EQ(ints.source(item), "L['n'].item()");
  sym::Expr s0 = ints.symbol("s0", item);
  ints.shapeGuard(sym::gt(s0, 3));
  EXPECT_EQ(failure(ints, scalar(int64_t{5}, DType::Int64)), std::nullopt);
  EXPECT_EQ(failure(ints, scalar(int64_t{2}, DType::Int64)), "4 <= s0 failed: got s0 = 2 (L['n'].item())");
  EXPECT_NE(failure(ints, scalar({}, DType::Int64)), std::nullopt); // no value described: no match

  GuardSet floats = oneArg("t");
  uint32_t number = floats.node(0, value());
  floats.check(number, typeIs({"builtins", "float"}));
  floats.check(number, equals(Constant{0.5}));
  EXPECT_EQ(failure(floats, scalar(0.5, DType::Float32)), std::nullopt);
  EXPECT_EQ(failure(floats, scalar(0.25, DType::Float32)), "L['t'].item() == 0.5 failed: got 0.25");
  EXPECT_NE(failure(floats, scalar(int64_t{1}, DType::Int64)), std::nullopt);
}

TEST(Vm, CallShapeCountsArgumentsAndKeywords) {
  GuardSet set;
  set.call.positional = 1;
  set.call.keywords = {"scale"};
  CallInput call = callOf({Input::of(int64_t{1})});
  call.kwargs = {{"scale", Input::of(2.0)}};
  EXPECT_EQ(failure(set, call), std::nullopt);
  call.kwargs.clear();
  EXPECT_EQ(failure(set, call), "call with 1 positional, keywords [scale] failed: got 1 positional, keywords []");
  call.args.push_back(Input::none());
  call.kwargs = {{"scale", Input::of(2.0)}};
  EXPECT_NE(failure(set, call), std::nullopt);
}

TEST(Vm, TypeIdentityAndConstants) {
  GuardSet set = oneArg("n");
  set.check(0, typeIs({"builtins", "int"}));
  set.check(0, equals(Constant{int64_t{3}}));
  EXPECT_EQ(failure(set, callOf({Input::of(3)})), std::nullopt);
  EXPECT_EQ(failure(set, callOf({Input::of(4)})), "L['n'] == 3 failed: got 4");
  EXPECT_EQ(failure(set, callOf({Input::of(3.0)})), "type(L['n']) is builtins.int failed: got builtins.float");
  EXPECT_EQ(failure(set, callOf({Input::of(true)})), "type(L['n']) is builtins.int failed: got builtins.bool");

  GuardSet tuple = oneArg("t");
  tuple.check(0, equals(Constant{Constant::Tuple{Constant{int64_t{1}}, Constant{std::string("a")}, Constant{}}}));
  EXPECT_EQ(failure(tuple, callOf({Input::tuple({Input::of(1), Input::of("a"), Input::none()})})), std::nullopt);
  EXPECT_EQ(failure(tuple, callOf({Input::tuple({Input::of(1), Input::of("b"), Input::none()})})),
            "L['t'] == (1, 'a', None) failed: got (1, 'b', None)");

  GuardSet nan = oneArg("f");
  nan.check(0, equals(Constant{std::nan("")}));
  EXPECT_EQ(failure(nan, callOf({Input::of(std::nan(""))})), std::nullopt);
  EXPECT_NE(failure(nan, callOf({Input::of(0.0)})), std::nullopt);

  GuardSet same = oneArg("m");
  same.check(0, identityIs({42, 7, "<Block>"}));
  Input obj = Input::object({"mymodel", "Block"}, 42, {});
  EXPECT_EQ(failure(same, callOf({obj})), std::nullopt);
  obj.id = 43;
  EXPECT_EQ(failure(same, callOf({obj})), "L['m'] is <Block> (id 0x2a) failed: got another object, a mymodel.Block");
  obj.id = 42;
  CallInput elsewhere = callOf({obj});
  elsewhere.scope = 8; // the same id in another process is another object
  EXPECT_NE(failure(same, elsewhere), std::nullopt);
}

TEST(Vm, LengthsDictKeysAndItems) {
  GuardSet set = oneArg("xs");
  set.check(0, typeIs({"builtins", "list"}));
  set.check(0, lengthIs(2));
  set.check(set.path({arg(0, "xs"), item(1)}), equals(Constant{std::string("b")}));
  EXPECT_EQ(failure(set, callOf({Input::list({Input::of("a"), Input::of("b")})})), std::nullopt);
  EXPECT_EQ(failure(set, callOf({Input::list({Input::of("a")})})), "len(L['xs']) == 2 failed: got 1");
  EXPECT_EQ(failure(set, callOf({Input::tuple({Input::of("a"), Input::of("b")})})),
            "type(L['xs']) is builtins.list failed: got builtins.tuple");

  GuardSet keys = oneArg("d");
  keys.check(0, dictKeysAre({Constant{std::string("a")}, Constant{std::string("b")}}, false));
  Input ab = Input::dict({{Input::of("a"), Input::of(1)}, {Input::of("b"), Input::of(2)}});
  Input ba = Input::dict({{Input::of("b"), Input::of(2)}, {Input::of("a"), Input::of(1)}});
  EXPECT_EQ(failure(keys, callOf({ab})), std::nullopt);
  EXPECT_EQ(failure(keys, callOf({ba})), std::nullopt); // order not guarded
  GuardSet ordered = oneArg("d");
  ordered.check(0, dictKeysAre({Constant{std::string("a")}, Constant{std::string("b")}}, true));
  EXPECT_EQ(failure(ordered, callOf({ab})), std::nullopt);
  EXPECT_EQ(failure(ordered, callOf({ba})), "list(L['d'].keys()) == ['a', 'b'] failed: got ['b', 'a']");

  GuardSet value = oneArg("d");
  value.check(value.path({arg(0, "d"), key("a")}), equals(Constant{int64_t{1}}));
  EXPECT_EQ(failure(value, callOf({ab})), std::nullopt);
  EXPECT_EQ(failure(value, callOf({Input::dict({{Input::of("b"), Input::of(2)}})})),
            "L['d']['a'] could not be read (L['d'] is builtins.dict of length 1)");
}

TEST(Vm, AttributesGlobalsAndClosures) {
  GuardSet set;
  set.call.positional = 1;
  uint32_t attn = set.path({arg(0, "self"), attr("blocks"), item(3), attr("attn")});
  set.check(attn, typeIs({"mymodel", "Attention"}));
  uint32_t heads = set.path({arg(0, "self"), attr("blocks"), item(3), attr("attn"), attr("heads")});
  set.check(heads, equals(Constant{int64_t{8}}));
  set.check(set.node(-1, global("SCALE")), equals(Constant{0.5}));
  set.check(set.node(-1, closure(0, "eps")), equals(Constant{1e-5}));

  auto model = [](int64_t heads) {
    Input attnObj = Input::object({"mymodel", "Attention"}, 1, {{"heads", Input::of(heads)}});
    std::vector<Input> blocks;
    for (int k = 0; k < 4; ++k) blocks.push_back(Input::object({"mymodel", "Block"}, 10 + k, {{"attn", attnObj}}));
    return Input::object({"mymodel", "Model"}, 2, {{"blocks", Input::list(blocks)}});
  };
  CallInput call = callOf({model(8)});
  call.globals = {{"SCALE", Input::of(0.5)}};
  call.closure = {Input::of(1e-5)};
  EXPECT_EQ(failure(set, call), std::nullopt);
  call.args = {model(4)};
  EXPECT_EQ(failure(set, call), "L['self'].blocks[3].attn.heads == 8 failed: got 4");
  call.args = {model(8)};
  call.globals = {{"SCALE", Input::of(0.25)}};
  EXPECT_EQ(failure(set, call), "G['SCALE'] == 0.5 failed: got 0.25");
  call.globals = {{"SCALE", Input::of(0.5)}};
  call.closure = {Input::of(1e-6)};
  EXPECT_EQ(failure(set, call), "C['eps'] == 1.0000000000000001e-05 failed: got 9.9999999999999995e-07");
}

TEST(Vm, TensorMatchNamesTheProperty) {
  GuardSet set = oneArg();
  TensorCheck t;
  t.dtype = DType::Float32;
  t.sizes = {8, 4};
  t.strides = {4, 1};
  set.check(0, tensorMatches(t));
  Input x = Input::of(contiguousTensor(DType::Float32, {8, 4}));
  EXPECT_EQ(failure(set, callOf({x})), std::nullopt);
  Input y = Input::of(contiguousTensor(DType::Float32, {16, 4}));
  EXPECT_EQ(failure(set, callOf({y})), "L['x'].size()[0] == 8 failed: got 16");
  y = Input::of(contiguousTensor(DType::Float16, {8, 4}));
  EXPECT_EQ(failure(set, callOf({y})), "L['x'].dtype == torch.float32 failed: got torch.float16");
  y = Input::of(contiguousTensor(DType::Float32, {8, 4}, true));
  EXPECT_EQ(failure(set, callOf({y})), "L['x'].requires_grad == False failed: got True");
  y = Input::of(contiguousTensor(DType::Float32, {8, 4, 1}));
  EXPECT_EQ(failure(set, callOf({y})), "L['x'].dim() == 2 failed: got 3");
  TensorInput transposed = contiguousTensor(DType::Float32, {8, 4});
  transposed.strides = {1, 8};
  EXPECT_EQ(failure(set, callOf({Input::of(transposed)})), "L['x'].stride()[0] == 4 failed: got 1");
  TensorInput shifted = contiguousTensor(DType::Float32, {8, 4});
  shifted.storageOffset = 4;
  EXPECT_EQ(failure(set, callOf({Input::of(shifted)})), "L['x'].storage_offset() == 0 failed: got 4");
  TensorInput cuda = contiguousTensor(DType::Float32, {8, 4});
  cuda.device = {ir::DeviceType::Cuda, 0};
  EXPECT_EQ(failure(set, callOf({Input::of(cuda)})), "L['x'].device == cpu failed: got cuda:0");
  EXPECT_EQ(failure(set, callOf({Input::of(3)})), "L['x'] is a tensor failed: got builtins.int");
}

TEST(Vm, GlobalState) {
  GuardSet set;
  set.globals.gradEnabled = true;
  set.globals.defaultDtype = DType::Float32;
  set.globals.autocast = {{ir::DeviceType::Cuda, false, DType::Float16}};
  CallInput call = callOf({});
  EXPECT_EQ(failure(set, call), std::nullopt);
  call.state.gradEnabled = false;
  EXPECT_EQ(failure(set, call), "torch.is_grad_enabled() == True failed: got False");
  call.state = defaultGlobalState();
  call.state.defaultDtype = DType::Float64;
  EXPECT_EQ(failure(set, call), "torch.get_default_dtype() == torch.float32 failed: got torch.float64");
  call.state = defaultGlobalState();
  call.state.autocast[1].enabled = true;
  EXPECT_EQ(failure(set, call), "autocast(cuda) == off failed: got on float16");
  call.state = defaultGlobalState();
  call.state.deterministic = true; // not guarded
  EXPECT_EQ(failure(set, call), std::nullopt);
}

TEST(Vm, AutocastDtypeGuardedOnlyWhereOn) {
  GuardSet set;
  set.globals.autocast = {{ir::DeviceType::Cpu, true, DType::BFloat16},
                          {ir::DeviceType::Cuda, false, DType::Float16}};
  CallInput call = callOf({});
  call.state.autocast[0] = {ir::DeviceType::Cpu, true, DType::BFloat16};
  call.state.autocast[1] = {ir::DeviceType::Cuda, false, DType::BFloat16}; // off: any dtype
  EXPECT_EQ(failure(set, call), std::nullopt);
  call.state.autocast[0].dtype = DType::Float16;
  EXPECT_EQ(failure(set, call), "autocast(cpu) == on bfloat16 failed: got on float16");
}

TEST(Vm, ShapeGuardsOverSymbols) {
  GuardSet set;
  set.call.positional = 2;
  TensorCheck t;
  t.sizes = {std::nullopt, 4};
  t.strides = {4, 1};
  set.check(set.node(-1, arg(0, "x")), tensorMatches(t));
  set.check(set.node(-1, arg(1, "y")), tensorMatches(t));
  sym::Expr s0 = set.symbol("s0", set.path({arg(0, "x"), size(0)}));
  sym::Expr s1 = set.symbol("s1", set.path({arg(1, "y"), size(0)}));
  set.shapeGuard(sym::eq(s0, s1));
  set.shapeGuard(sym::ge(s0, 2));
  set.shapeGuard(sym::eq(sym::mod(s0, 8), 0));
  auto call = [](int64_t a, int64_t b) {
    return callOf({Input::of(contiguousTensor(DType::Float32, {a, 4})), Input::of(contiguousTensor(DType::Float32, {b, 4}))});
  };
  EXPECT_EQ(failure(set, call(16, 16)), std::nullopt);
  EXPECT_EQ(failure(set, call(64, 64)), std::nullopt);
  EXPECT_EQ(failure(set, call(16, 24)), "s0 == s1 failed: got s0 = 16 (L['x'].size()[0]), s1 = 24 (L['y'].size()[0])");
  EXPECT_NE(failure(set, call(12, 12)), std::nullopt);
  EXPECT_NE(failure(set, call(0, 0)), std::nullopt);
}

TEST(Vm, IntArgumentsAsSymbols) {
  GuardSet set = oneArg("n");
  set.check(0, typeIs({"builtins", "int"}));
  sym::Expr n = set.symbol("s0", 0);
  set.shapeGuard(sym::lt(sym::floorDiv(n * 3, 2), 100));
  EXPECT_EQ(failure(set, callOf({Input::of(10)})), std::nullopt);
  EXPECT_NE(failure(set, callOf({Input::of(70)})), std::nullopt);
  EXPECT_NE(failure(set, callOf({Input::of(std::numeric_limits<int64_t>::max())})), std::nullopt); // overflow fails
}

TEST(Vm, ChecksRunCheapestFirst) {
  GuardSet set = oneArg();
  TensorCheck t;
  t.sizes = {8};
  t.strides = {1};
  set.check(0, tensorMatches(t));
  set.check(0, typeIs({"torch", "Tensor"}));
  Program p = compile(set);
  ASSERT_EQ(p.code.size(), 5u); // call, globals, load, type, tensor
  EXPECT_EQ(p.code[2].op, Op::Load);
  EXPECT_EQ(p.nodes[p.code[3].node].checks[p.code[3].operand].kind, Check::Kind::Type);
  EXPECT_EQ(p.nodes[p.code[4].node].checks[p.code[4].operand].kind, Check::Kind::Tensor);
}

} // namespace
} // namespace kiln::guards
