// Seeded random graphs: whatever the builder accepts verifies, survives the wire
// round trip with an equal hash and text, and stays valid through DCE and CSE;
// whatever it refuses is refused with a typed error, never Internal; and the
// reference interpreter gives the same values before and after CSE and DCE
// (and close ones after decomposition).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"
#include "kiln/ir/wire.h"
#include "kiln/sym/eval.h"

namespace kiln::ir {
namespace {

struct Gen {
  sym::SymbolTable& table;
  std::mt19937 rng;
  sym::Expr s0 = table.createBacked(6, {2, sym::kInf});
  sym::Expr s1 = table.createBacked(4, {2, sym::kInf});

  size_t pick(size_t n) { return rng() % n; }

  Shape shape() {
    sym::Expr one = table.integer(1);
    std::vector<Shape> shapes = {{s0, s1}, {s1}, {one, s1}, {}, {s0, one}, {table.integer(3), s0}};
    return shapes[pick(shapes.size())];
  }
  DType dtype() {
    DType ts[] = {DType::Float32, DType::Float16, DType::Int64, DType::Bool, DType::Int32};
    return ts[pick(5)];
  }
  std::vector<Attr> attrs(const std::string& op) {
    if (op == "sum" || op == "mean" || op == "amax")
      return {{"dim", std::vector<int64_t>{static_cast<int64_t>(pick(2))}},
              {"keepdim", pick(2) == 0}};
    if (op == "argmax") return {{"dim", int64_t{-1}}};
    if (op == "div" && pick(2)) return {{"rounding_mode", std::string("trunc")}};
    if (op == "transpose") return {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}};
    if (op == "unsqueeze") return {{"dim", int64_t{0}}};
    if (op == "reshape") return {{"size", std::vector<int64_t>{-1}}};
    if (op == "clamp") return {{"min", int64_t{0}}};
    if (op == "to_dtype") return {{"dtype", dtype()}};
    if (op == "slice") return {{"start", int64_t{1}}};
    if (op == "softmax") return {{"dim", int64_t{-1}}};
    if (op == "mul" && pick(3) == 0) return {{"other", 0.5}};
    return {};
  }
  // Concrete inputs for the placeholders, at the symbols' hints: small values
  // of both signs (zeros included).
  std::vector<HostTensor> inputs(const Graph& g) {
    std::vector<HostTensor> out;
    for (const Node& n : g.nodes()) {
      if (n.kind != NodeKind::Placeholder) continue;
      const TensorMeta& m = n.value.tensor();
      std::vector<int64_t> sizes;
      int64_t count = 1;
      for (sym::Expr e : m.sizes) count *= sizes.emplace_back(sym::evaluateWithHints(e));
      std::vector<double> values;
      for (int64_t k = 0; k < count; ++k)
        values.push_back((static_cast<double>(pick(9)) - 4) * 0.5);
      out.push_back(HostTensor::fromDoubles(m.dtype, sizes, values));
    }
    return out;
  }
};

// Equal element for element within `tolerance` (relative, at least absolute),
// NaN equal to NaN.
bool sameValues(const HostTensor& a, const HostTensor& b, double tolerance = 0) {
  std::vector<double> x = a.toDoubles(), y = b.toDoubles();
  if (a.sizes != b.sizes || a.dtype != b.dtype || x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    bool close = std::fabs(x[i] - y[i]) <= tolerance * std::max(1.0, std::fabs(x[i]));
    if (!(x[i] == y[i] || close || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  }
  return true;
}

TEST(Property, RandomGraphsVerifyRoundTripAndSurvivePasses) {
  const std::vector<std::string> ops = {"add",        "sub",     "mul",     "div",    "exp",
                                        "neg",        "relu",    "sigmoid", "lt",     "logical_and",
                                        "bitwise_or", "maximum", "where",   "clamp",  "to_dtype",
                                        "sum",        "mean",    "amax",    "argmax", "transpose",
                                        "unsqueeze",  "reshape", "isnan",   "abs"};
  int built = 0, interpreted = 0;
  for (uint32_t seed = 0; seed < 150; ++seed) {
    sym::SymbolTable table;
    Gen gen{table, std::mt19937(seed)};
    Graph g(table);
    for (int i = 0; i < 3; ++i)
      g.placeholder("p" + std::to_string(i), testing::tensorOf(table, gen.dtype(), gen.shape()));
    for (int i = 0; i < 25; ++i) {
      const std::string& op = ops[gen.pick(ops.size())];
      std::vector<Attr> attrs = gen.attrs(op);
      size_t arity = 0; // the required tensor and scalar arguments not given as attributes
      for (const ArgSpec& a : getOp(op).args)
        arity += a.kind == ArgKind::TensorList
                     ? 2
                     : (a.kind == ArgKind::Tensor || a.kind == ArgKind::Scalar) && !a.optional;
      if (op == "mul" && !attrs.empty()) --arity;
      std::vector<ValueId> inputs;
      for (size_t k = 0; k < arity; ++k) inputs.push_back(static_cast<ValueId>(gen.pick(g.size())));
      try {
        g.call(op, inputs, attrs);
        ++built;
      } catch (const Error& e) {
        ASSERT_TRUE(e.code() == ErrorCode::InvalidArgument || e.code() == ErrorCode::Unsupported)
            << op << ": " << e.message();
      }
    }
    g.setOutputs({static_cast<ValueId>(g.size() - 1), static_cast<ValueId>(gen.pick(g.size()))});
    ASSERT_NO_THROW(verify(g)) << print(g);
    testing::expectRoundTrip(g);
    Graph cse = eliminateCommonSubexpressions(g);
    ASSERT_NO_THROW(verify(cse)) << print(cse);
    Graph dce = eliminateDeadCode(cse);
    ASSERT_NO_THROW(verify(dce)) << print(dce);
    testing::expectRoundTrip(dce);
    EXPECT_LE(dce.size(), g.size());
    EXPECT_EQ(structuralHash(eliminateCommonSubexpressions(dce)), structuralHash(dce));
    std::vector<HostTensor> in = gen.inputs(g);
    try {
      std::vector<HostTensor> before = interpret(g, in), after = interpret(dce, in);
      for (size_t k = 0; k < before.size(); ++k)
        EXPECT_TRUE(sameValues(before[k], after[k])) << "output " << k << "\n" << print(g);
      ++interpreted;
    } catch (const Error& e) { // integer division by zero
      ASSERT_EQ(e.code(), ErrorCode::InvalidArgument) << e.message() << "\n" << print(g);
    }
    Graph core = decompose(g);
    ASSERT_NO_THROW(verify(core)) << print(core);
    testing::expectRoundTrip(core);
    for (ValueId k = 0; k < g.outputs().size(); ++k)
      EXPECT_EQ(core.value(core.outputs()[k]), g.value(g.outputs()[k]));
    try {
      std::vector<HostTensor> before = interpret(g, in), after = interpret(core, in);
      for (size_t k = 0; k < before.size(); ++k) // f16 decompositions round in between
        EXPECT_TRUE(sameValues(before[k], after[k], 1e-2)) << "output " << k << "\n" << print(g);
    } catch (const Error& e) {
      ASSERT_EQ(e.code(), ErrorCode::InvalidArgument) << e.message() << "\n" << print(g);
    }
  }
  EXPECT_GT(built, 1000); // the generator mostly builds valid calls
  EXPECT_GT(interpreted, 75);
}

} // namespace
} // namespace kiln::ir
