// Strides checked against torch on concrete sizes.
#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/graph.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

struct View : testing::GraphTest {
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  sym::Expr one = table.integer(1);

  TensorMeta apply(std::string_view op, ValueId x, std::vector<Attr> attrs) {
    return graph.meta(graph.call(op, {x}, std::move(attrs)));
  }
  ValueId input(Shape sizes) {
    return graph.placeholder("x", tensorOf(table, DType::Float32, sizes));
  }
};

TEST_F(View, ViewInfersMinusOneSymbolically) {
  ValueId x = input({s0, table.integer(12), table.integer(64)});
  const TensorMeta& m = apply("view", x, {{"size", std::vector<sym::Expr>{s0, table.integer(-1)}}});
  EXPECT_EQ(m.sizes, Shape({s0, table.integer(768)}));
  EXPECT_EQ(m.strides, Shape({table.integer(768), one}));
  const TensorMeta& r = apply("reshape", x, {{"size", std::vector<int64_t>{-1, 64}}});
  EXPECT_EQ(r.sizes, Shape({s0 * 12, table.integer(64)}));
  EXPECT_THROW(apply("view", x, {{"size", std::vector<int64_t>{-1, 5}}}), Error);
  EXPECT_THROW(apply("view", x, {{"size", std::vector<int64_t>{-1, -1}}}), Error);
}

TEST_F(View, PermuteTransposeUnsqueezeMoveStrides) {
  ValueId x = input(ints(table, {2, 3, 4}));
  EXPECT_EQ(apply("permute", x, {{"dims", std::vector<int64_t>{2, 0, 1}}}).strides,
            ints(table, {1, 12, 4}));
  EXPECT_EQ(apply("transpose", x, {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}}).strides,
            ints(table, {1, 4, 12}));
  EXPECT_EQ(apply("unsqueeze", x, {{"dim", int64_t{1}}}).strides, ints(table, {12, 12, 4, 1}));
  EXPECT_EQ(apply("unsqueeze", x, {{"dim", int64_t{3}}}).strides, ints(table, {12, 4, 1, 1}));
  EXPECT_THROW(apply("permute", x, {{"dims", std::vector<int64_t>{0, 0, 1}}}), Error);
}

TEST_F(View, ExpandAndSqueezeUseSizeOneDims) {
  ValueId x = input({s0, one});
  const TensorMeta& e = apply(
      "expand", x, {{"size", std::vector<sym::Expr>{table.integer(5), table.integer(-1), s0}}});
  EXPECT_EQ(e.sizes, Shape({table.integer(5), s0, s0}));
  EXPECT_EQ(e.strides, Shape({table.integer(0), one, table.integer(0)}));
  EXPECT_FALSE(e.isContiguous());
  EXPECT_EQ(apply("squeeze", x, {{"dim", std::vector<int64_t>{1}}}).sizes, Shape({s0}));
  EXPECT_EQ(apply("squeeze", x, {}).sizes, Shape({s0}));
  sym::Expr maybeOne = table.createBacked(3);
  ValueId y = input({maybeOne});
  try {
    apply("squeeze", y, {});
    FAIL();
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::Unsupported);
  }
}

TEST_F(View, ViewOfNonContiguousFollowsTorchsChunks) {
  auto strided = [&](Shape sizes, Shape strides) {
    TensorMeta m = tensorOf(table, DType::Float32, sizes);
    m.strides = std::move(strides);
    return graph.placeholder("x", m);
  };
  auto viewStrides = [&](ValueId x, std::vector<int64_t> size) {
    return apply("view", x, {{"size", size}}).strides;
  };
  ValueId cut = strided(ints(table, {6, 4}), ints(table, {8, 1}));
  EXPECT_EQ(viewStrides(cut, {6, 2, 2}), ints(table, {8, 2, 1}));
  EXPECT_THROW(viewStrides(cut, {24}), Error);
  ValueId perm = strided(ints(table, {3, 2, 4}), ints(table, {4, 12, 1}));
  EXPECT_EQ(viewStrides(perm, {3, 2, 2, 2}), ints(table, {4, 12, 2, 1}));
  EXPECT_EQ(viewStrides(perm, {3, 2, 4, 1}), ints(table, {4, 12, 1, 1}));
  EXPECT_THROW(viewStrides(perm, {3, 8}), Error);
  EXPECT_EQ(apply("flatten", perm, {{"start_dim", int64_t{1}}}).strides, ints(table, {8, 1}));
  EXPECT_EQ(apply("flatten", perm, {{"end_dim", int64_t{1}}}).strides, ints(table, {4, 1}));
  ValueId expanded = strided(ints(table, {3, 4}), ints(table, {1, 0}));
  EXPECT_EQ(viewStrides(expanded, {3, 2, 2}), ints(table, {1, 0, 0}));
  EXPECT_THROW(viewStrides(expanded, {12}), Error);
  ValueId stepped = strided(ints(table, {4}), ints(table, {2}));
  EXPECT_EQ(viewStrides(stepped, {2, 2}), ints(table, {4, 2}));
  EXPECT_EQ(viewStrides(stepped, {1, 4, 1}), ints(table, {8, 2, 2}));
  ValueId sym = strided({s0, table.integer(4)}, {table.integer(8), one}); // x[:, :4] of [s0, 8]
  EXPECT_EQ(viewStrides(sym, {-1, 2, 2}), Shape({table.integer(8), table.integer(2), one}));
}

TEST_F(View, ViewOfNonContiguousIsRefusedButReshapeCopies) {
  ValueId x = input({s0, table.integer(4)});
  ValueId t = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  EXPECT_THROW(apply("view", t, {{"size", std::vector<int64_t>{-1}}}), Error);
  const TensorMeta& r = apply("reshape", t, {{"size", std::vector<int64_t>{-1}}});
  EXPECT_EQ(r.sizes, Shape({s0 * 4}));
  EXPECT_TRUE(r.isContiguous());
}

TEST_F(View, CatSkipsLegacyEmptyInputsAndStaysChannelsLast) {
  ValueId x = input(ints(table, {2, 3, 4, 5}));
  ValueId empty = graph.placeholder("e", tensorOf(table, DType::Float64, ints(table, {0})));
  const TensorMeta& m = graph.meta(graph.call("cat", {x, empty}, {{"dim", int64_t{1}}}));
  EXPECT_EQ(m.sizes, ints(table, {2, 3, 4, 5}));
  EXPECT_EQ(m.dtype, DType::Float64); // the skipped input's dtype still counts, as in torch
  TensorMeta last = tensorOf(table, DType::Float32, ints(table, {2, 3, 4, 5}));
  last.strides = ints(table, {60, 1, 15, 3});
  ValueId cl = graph.placeholder("cl", last);
  EXPECT_EQ(graph.meta(graph.call("cat", {cl, cl}, {{"dim", int64_t{1}}})).strides,
            ints(table, {120, 1, 30, 6}));
  EXPECT_EQ(graph.meta(graph.call("cat", {cl, x}, {{"dim", int64_t{1}}})).strides,
            ints(table, {120, 20, 5, 1}));
  // stack: torch views a cat along dim split in two
  EXPECT_EQ(graph.meta(graph.call("stack", {cl, cl}, {{"dim", int64_t{1}}})).strides,
            ints(table, {120, 3, 1, 30, 6}));
}

TEST_F(View, SizeOneDimsTakeTheStridesOfTorchsComputeStride) {
  TensorMeta t = tensorOf(table, DType::Float32, ints(table, {3, 1}));
  t.strides = ints(table, {1, 6}); // contiguous, with an odd stride at the size-1 dim
  ValueId x = graph.placeholder("x", t);
  EXPECT_EQ(apply("view", x, {{"size", std::vector<int64_t>{3, 1, 1}}}).strides,
            ints(table, {1, 6, 6}));
  EXPECT_EQ(apply("clone", x, {}).strides, t.strides); // dense: kept as they are
}

TEST_F(View, ContiguousOfAnEmptyTensorIsItself) {
  TensorMeta t = tensorOf(table, DType::Float32, ints(table, {0, 3}));
  t.strides = ints(table, {1, 1});
  ValueId x = graph.placeholder("x", t);
  EXPECT_EQ(apply("contiguous", x, {}).strides, t.strides);
  EXPECT_EQ(apply("clone", x, {}).strides, t.strides);
}

} // namespace
} // namespace kiln::ir
