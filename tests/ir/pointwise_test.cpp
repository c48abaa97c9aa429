#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"
#include "kiln/ir/op_registry.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

struct Pointwise : testing::GraphTest {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr s1 = table.createBacked(5, {2, sym::kInf});
  sym::Expr one = table.integer(1);

  ValueId input(DType dtype, Shape sizes) {
    return graph.placeholder("x" + std::to_string(graph.size()),
                             tensorOf(table, dtype, std::move(sizes)));
  }
  ErrorCode codeOf(std::string_view op, std::vector<ValueId> inputs, std::vector<Attr> attrs = {}) {
    try {
      graph.call(op, std::move(inputs), std::move(attrs));
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal; // no error
  }
};

TEST_F(Pointwise, UnaryKeepsShapeAndFollowsDTypeRules) {
  ValueId i = input(DType::Int64, {s0, table.integer(3)});
  ValueId b = input(DType::Bool, {s0});
  EXPECT_EQ(graph.meta(graph.call("exp", {i})).dtype, DType::Float32);
  EXPECT_EQ(graph.meta(graph.call("exp", {i})).sizes, Shape({s0, table.integer(3)}));
  EXPECT_EQ(graph.meta(graph.call("neg", {i})).dtype, DType::Int64);
  EXPECT_EQ(graph.meta(graph.call("floor", {i})).dtype, DType::Int64);
  EXPECT_EQ(graph.meta(graph.call("sign", {b})).dtype, DType::Bool);
  EXPECT_EQ(graph.meta(graph.call("isnan", {i})).dtype, DType::Bool);
  EXPECT_EQ(codeOf("neg", {b}), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf("gelu", {i}), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf("gelu", {input(DType::Float32, {s0})}, {{"approximate", std::string("erf")}}),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf("frobnicate", {i}), ErrorCode::NotFound);
}

TEST_F(Pointwise, BroadcastsSymbolicSizes) {
  ValueId a = input(DType::Float32, {s0, one, table.integer(768)});
  ValueId b = input(DType::Float32, {s1, table.integer(768)});
  const TensorMeta& m = graph.meta(graph.call("add", {a, b}));
  EXPECT_EQ(m.sizes, Shape({s0, s1, table.integer(768)}));
  EXPECT_EQ(m.strides, Shape({s1 * 768, table.integer(768), one}));
  ValueId c = input(DType::Float32, {s0, table.integer(768)});
  EXPECT_EQ(graph.meta(graph.call("mul", {c, c})).sizes, Shape({s0, table.integer(768)}));
}

TEST_F(Pointwise, ZeroDimTensorsAndScalarsBroadcastAndPromoteAsTorch) {
  ValueId h = input(DType::Float16, {s0});
  ValueId d0 = input(DType::Float64, {});
  const TensorMeta& m = graph.meta(graph.call("add", {h, d0}));
  EXPECT_EQ(m.dtype, DType::Float16);
  EXPECT_EQ(m.sizes, Shape({s0}));
  ValueId i = input(DType::Int32, {s0});
  EXPECT_EQ(graph.meta(graph.call("mul", {i}, {{"other", 2.0}})).dtype, DType::Float32);
  EXPECT_EQ(graph.meta(graph.call("mul", {i}, {{"other", int64_t{2}}})).dtype, DType::Int32);
  EXPECT_EQ(graph.meta(graph.call("div", {i}, {{"other", int64_t{2}}})).dtype, DType::Float32);
  EXPECT_EQ(graph.meta(graph.call("div", {i, i}, {{"rounding_mode", std::string("floor")}})).dtype,
            DType::Int32);
  EXPECT_EQ(graph.meta(graph.call("lt", {i, h})).dtype, DType::Bool);
  ValueId n = graph.call("sym_size", {i}, {{"dim", int64_t{0}}});
  EXPECT_EQ(graph.meta(graph.call("add", {h, n})).dtype, DType::Float16);
}

TEST_F(Pointwise, RefusesToGuessUndecidableBroadcasts) {
  sym::Expr u = table.createBacked(3); // range [0, inf]: may be 1
  ValueId a = input(DType::Float32, {s0});
  ValueId b = input(DType::Float32, {u});
  try {
    graph.call("add", {a, b});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
    EXPECT_NE(e.message().find("add: argument 'other'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("dim 0"), std::string::npos) << e.message();
  }
  ValueId c = input(DType::Float32, {table.integer(3)});
  ValueId d = input(DType::Float32, {table.integer(4)});
  EXPECT_EQ(codeOf("add", {c, d}), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf("add", {a, input(DType::Float32, {s1})}), ErrorCode::Unsupported);
}

TEST_F(Pointwise, ChecksDTypesOfBitwiseWhereAndClamp) {
  ValueId f = input(DType::Float32, {s0});
  ValueId i = input(DType::Int64, {s0});
  ValueId b = input(DType::Bool, {s0});
  EXPECT_EQ(codeOf("bitwise_and", {f, f}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("bitwise_xor", {b, b})).dtype, DType::Bool);
  EXPECT_EQ(codeOf("sub", {b, b}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("where", {b, i}, {{"other", 0.5}})).dtype, DType::Float32);
  EXPECT_EQ(codeOf("where", {i, i, i}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("clamp", {i}, {{"min", 0.5}})).dtype, DType::Float32);
  EXPECT_EQ(graph.meta(graph.call("clamp", {b}, {{"min", int64_t{0}}})).dtype, DType::Int64);
  EXPECT_EQ(codeOf("clamp", {i}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("to_dtype", {i}, {{"dtype", DType::BFloat16}})).dtype,
            DType::BFloat16);
}

TEST_F(Pointwise, RefusesBoolsAndNumbersWhereTorchDoes) {
  ValueId i = input(DType::Int64, {s0});
  ValueId b = input(DType::Bool, {s0});
  ValueId u = input(DType::UInt8, {s0});
  EXPECT_EQ(codeOf("sub", {i, b}), ErrorCode::InvalidArgument); // any bool operand
  EXPECT_EQ(codeOf("sub", {b}, {{"other", int64_t{1}}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf("sub", {i}, {{"other", true}}), ErrorCode::InvalidArgument);
  for (const char* op : {"pow", "fmod", "remainder"})
    EXPECT_EQ(codeOf(op, {b, b}), ErrorCode::InvalidArgument) << op;
  EXPECT_EQ(codeOf("div", {b, b}, {{"rounding_mode", std::string("floor")}}),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("div", {b, b})).dtype, DType::Float32);
  EXPECT_EQ(codeOf("pow", {i}, {{"other", int64_t{-1}}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("pow", {i, i})).dtype, DType::Int64); // values decide
  EXPECT_EQ(codeOf("clamp", {b}, {{"min", true}}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.meta(graph.call("clamp", {b, b})).dtype, DType::Bool); // tensor bounds
  EXPECT_EQ(codeOf("clamp", {i, i}, {{"max", 1.0}}), ErrorCode::InvalidArgument); // mixed
  EXPECT_EQ(graph.meta(graph.call("where", {u, i, i})).dtype, DType::Int64);
  EXPECT_EQ(codeOf("logical_and", {b}, {{"other", true}}), ErrorCode::InvalidArgument);
  for (const char* op : {"isnan_", "isinf_", "maximum_", "minimum_", "where_", "to_dtype_"})
    EXPECT_EQ(findOp(op), nullptr) << op; // torch has no such in-place form
  EXPECT_NE(findOp("logical_not_"), nullptr);
  EXPECT_EQ(graph.meta(graph.call("add", {b, b}, {{"alpha", true}})).dtype, DType::Bool);
  EXPECT_EQ(codeOf("add", {i, i}, {{"alpha", true}}), ErrorCode::InvalidArgument);
}

TEST_F(Pointwise, InPlaceRefusesAnExpandedSelf) {
  ValueId x = input(DType::Float32, {s0, table.integer(3)});
  ValueId row = input(DType::Float32, {one, table.integer(3)});
  ValueId wide = graph.call("expand", {row}, {{"size", Shape{s0, table.integer(3)}}});
  EXPECT_EQ(codeOf("add_", {wide, x}), ErrorCode::InvalidArgument); // s0 >= 2 rows, one place
  EXPECT_EQ(codeOf("neg_", {wide}), ErrorCode::InvalidArgument);
  EXPECT_EQ(graph.value(graph.call("neg_", {row})), graph.value(row));
}

TEST_F(Pointwise, ANoneKeepsALaterInputFromBindingToIt) {
  ValueId x = input(DType::Float32, {s0});
  ValueId hi = input(DType::Float32, {s0});
  const Node& n = graph.node(graph.call("clamp", {x, hi}, {{"min", std::monostate{}}}));
  ASSERT_EQ(n.attrs.size(), 1u); // clamp(x, max=hi), not clamp(x, min=hi)
  EXPECT_EQ(n.attrs[0].name, "min");
  EXPECT_EQ(
      graph.node(graph.call("clamp", {x}, {{"min", std::monostate{}}, {"max", 1.0}})).attrs.size(),
      1u); // no later input: the None goes
}

TEST_F(Pointwise, AlphaScalesOtherAndIsCanonicalWhenOne) {
  ValueId f = input(DType::Float32, {s0});
  ValueId i = input(DType::Int64, {s0});
  EXPECT_EQ(graph.node(graph.call("add", {f, f}, {{"alpha", int64_t{1}}})).attrs.size(), 0u);
  EXPECT_EQ(graph.node(graph.call("sub", {f, f}, {{"alpha", 0.5}})).attrs.size(), 1u);
  EXPECT_EQ(graph.meta(graph.call("add", {i, i}, {{"alpha", int64_t{2}}})).dtype, DType::Int64);
  EXPECT_EQ(codeOf("add", {i, i}, {{"alpha", 0.5}}), ErrorCode::InvalidArgument);
}

TEST_F(Pointwise, InPlaceFormsKeepSelfAndRefuseWhatTorchRefuses) {
  ValueId x = input(DType::Float32, {s0, table.integer(4)});
  ValueId row = input(DType::Float32, {table.integer(4)});
  ValueId i = input(DType::Int64, {s0, table.integer(4)});
  auto keepsSelf = [&](std::string_view op, std::vector<ValueId> in, std::vector<Attr> attrs) {
    Value self = graph.value(in[0]); // copied: call() may move the graph's nodes
    return graph.value(graph.call(op, in, std::move(attrs))) == self;
  };
  EXPECT_TRUE(keepsSelf("add_", {x, row}, {}));
  EXPECT_TRUE(keepsSelf("mul_", {i}, {{"other", int64_t{3}}}));
  EXPECT_TRUE(keepsSelf("lt_", {x, row}, {}));                     // a bool result casts to f32
  EXPECT_EQ(codeOf("add_", {row, x}), ErrorCode::InvalidArgument); // self cannot broadcast
  EXPECT_EQ(codeOf("mul_", {i}, {{"other", 0.5}}), ErrorCode::InvalidArgument); // f32 into i64
  EXPECT_EQ(codeOf("exp_", {i}), ErrorCode::InvalidArgument);
  EXPECT_EQ(getOp("sigmoid_").mutates, std::optional<size_t>(0)); // writes self
  EXPECT_FALSE(getOp("sigmoid").mutates);
}

TEST_F(Pointwise, NamesTheOpAndArgumentInSchemaErrors) {
  ValueId f = input(DType::Float32, {s0});
  auto message = [&](std::string_view op, std::vector<ValueId> in, std::vector<Attr> attrs) {
    try {
      graph.call(op, std::move(in), std::move(attrs));
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("add", {f}, {}), "add: argument 'other': missing");
  EXPECT_EQ(message("add", {f, f}, {{"alpah", int64_t{2}}}),
            "add: argument 'alpah': no such argument");
  EXPECT_EQ(message("to_dtype", {f}, {{"dtype", int64_t{3}}}),
            "to_dtype: argument 'dtype': expected dtype, got 3");
  EXPECT_EQ(message("neg", {f, f}, {}), "neg: takes at most 1 inputs here, got 2");
}

} // namespace
} // namespace kiln::ir
