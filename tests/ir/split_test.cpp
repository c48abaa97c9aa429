// Multi-output views (split, split_with_sizes, chunk, unbind) and getitem
// through every layer: inference (checked against torch on concrete
// sizes), printer, wire, passes and the reference interpreter.
#include <gtest/gtest.h>

#include <capnp/message.h>

#include "helpers.h"
#include "kiln/common/error.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/passes.h"
#include "kiln/ir/print.h"
#include "kiln/ir/verify.h"
#include "kiln/ir/wire.h"

namespace kiln::ir {
namespace {

using testing::ints;
using testing::tensorOf;

struct Split : ::testing::Test {
  sym::SymbolTable table;
  Graph graph{table};
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});

  ValueId input(Shape sizes) {
    return graph.placeholder("x" + std::to_string(graph.size()),
                             tensorOf(table, DType::Float32, sizes));
  }
  const Value::Tuple& apply(std::string_view op, ValueId x, std::vector<Attr> attrs) {
    return graph.value(graph.call(op, {x}, std::move(attrs))).tuple();
  }
  // The sizes along `dim`, and the storage offsets, of each piece.
  std::vector<int64_t> sizesAt(const Value::Tuple& t, size_t dim) {
    std::vector<int64_t> out;
    for (const TensorMeta& m : t) out.push_back(*m.sizes.at(dim).asInteger());
    return out;
  }
  std::vector<int64_t> offsets(const Value::Tuple& t) {
    std::vector<int64_t> out;
    for (const TensorMeta& m : t) out.push_back(*m.storageOffset.asInteger());
    return out;
  }
  // The code of the error `fn` throws (Internal when none).
  template <typename F> ErrorCode codeOf(F&& fn, std::string* message = nullptr) {
    try {
      fn();
    } catch (const Error& e) {
      if (message) *message = e.message();
      return e.code();
    }
    return ErrorCode::Internal;
  }
};

using V = std::vector<int64_t>;

TEST_F(Split, SplitGivesEqualPiecesAndASmallerLast) {
  ValueId x = input(ints(table, {5, 3})); // torch.split(x, 2): [2, 3] x2, [1, 3]; offsets 0 6 12
  const Value::Tuple& t = apply("split", x, {{"split_size", int64_t{2}}});
  EXPECT_EQ(sizesAt(t, 0), V({2, 2, 1}));
  EXPECT_EQ(offsets(t), V({0, 6, 12}));
  for (const TensorMeta& m : t) EXPECT_EQ(m.strides, ints(table, {3, 1}));
  EXPECT_EQ(sizesAt(apply("split", x, {{"split_size", int64_t{5}}}), 0), V({5}));
  EXPECT_EQ(sizesAt(apply("split", x, {{"split_size", int64_t{9}}}), 0), V({5}));
  const Value::Tuple& cols = apply("split", x, {{"split_size", int64_t{2}}, {"dim", int64_t{-1}}});
  EXPECT_EQ(sizesAt(cols, 1), V({2, 1}));
  EXPECT_EQ(offsets(cols), V({0, 2}));
}

TEST_F(Split, SplitWithSizesKeepsStridesOfANonContiguousInput) {
  ValueId x = input(ints(table, {5, 3}));
  ValueId xt = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  // torch.split(x.t(), [1, 4], dim=-1): [3, 1] and [3, 4], strides (1, 3), offsets 0 and 3.
  const Value::Tuple& t =
      apply("split_with_sizes", xt, {{"split_sizes", V{1, 4}}, {"dim", int64_t{-1}}});
  EXPECT_EQ(sizesAt(t, 1), V({1, 4}));
  EXPECT_EQ(offsets(t), V({0, 3}));
  for (const TensorMeta& m : t) EXPECT_EQ(m.strides, ints(table, {1, 3}));
  EXPECT_EQ(toString(graph.value(graph.size() - 1)),
            "(f32[3, 1], f32[3, 4] stride=[1, 3] offset=3)"); // size-1 dims take any stride
}

TEST_F(Split, PiecesStartAtTheInputsOffset) {
  ValueId x = input(ints(table, {6, 4}));
  ValueId row = graph.call("select", {x}, {{"dim", int64_t{0}}, {"index", int64_t{1}}});
  EXPECT_EQ(offsets(apply("chunk", row, {{"chunks", int64_t{2}}})), V({4, 6}));
}

TEST_F(Split, ChunkFollowsTorch) {
  EXPECT_EQ(sizesAt(apply("chunk", input(ints(table, {5})), {{"chunks", int64_t{3}}}), 0),
            V({2, 2, 1}));
  EXPECT_EQ(sizesAt(apply("chunk", input(ints(table, {6})), {{"chunks", int64_t{4}}}), 0),
            V({2, 2, 2})); // fewer than asked
  EXPECT_EQ(sizesAt(apply("chunk", input(ints(table, {2})), {{"chunks", int64_t{5}}}), 0),
            V({1, 1}));
  const Value::Tuple& t =
      apply("chunk", input(ints(table, {3, 7})), {{"chunks", int64_t{2}}, {"dim", int64_t{1}}});
  EXPECT_EQ(sizesAt(t, 1), V({4, 3}));
  EXPECT_EQ(offsets(t), V({0, 4}));
}

TEST_F(Split, SizeZeroDims) {
  ValueId x = input(ints(table, {0, 3}));
  EXPECT_EQ(sizesAt(apply("split", x, {{"split_size", int64_t{2}}}), 0), V({0}));
  EXPECT_EQ(sizesAt(apply("split", x, {{"split_size", int64_t{0}}}), 0), V({0}));
  EXPECT_EQ(sizesAt(apply("chunk", x, {{"chunks", int64_t{3}}}), 0), V({0, 0, 0}));
  EXPECT_TRUE(apply("unbind", x, {}).empty());
  EXPECT_EQ(toString(graph.value(graph.size() - 1)), "()");
}

TEST_F(Split, UnbindDropsTheDim) {
  ValueId x = input(ints(table, {5, 3}));
  ValueId xt = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  // torch.unbind(x.t(), 1): five [3] with stride 1 at offsets 0, 3, ..., 12.
  const Value::Tuple& t = apply("unbind", xt, {{"dim", int64_t{-1}}});
  ASSERT_EQ(t.size(), 5u);
  EXPECT_EQ(offsets(t), V({0, 3, 6, 9, 12}));
  for (const TensorMeta& m : t) {
    EXPECT_EQ(m.sizes, ints(table, {3}));
    EXPECT_EQ(m.strides, ints(table, {1}));
  }
}

TEST_F(Split, SymbolicSizesWithAKnownCount) {
  ValueId x = input({table.integer(6), s0});
  const Value::Tuple& t = apply("split", x, {{"split_size", int64_t{4}}});
  EXPECT_EQ(sizesAt(t, 0), V({4, 2}));
  EXPECT_EQ(t[1].storageOffset, s0 * 4);
  EXPECT_EQ(t[1].sizes[1], s0);
  const Value::Tuple& u = apply("unbind", x, {});
  ASSERT_EQ(u.size(), 6u);
  EXPECT_EQ(u[5].storageOffset, s0 * 5);
  const Value::Tuple& w =
      apply("split_with_sizes", input({s0}),
            {{"split_sizes", std::vector<sym::Expr>{s0 - 2, table.integer(2)}}});
  EXPECT_EQ(w[0].sizes[0], s0 - 2);
  EXPECT_EQ(w[1].storageOffset, s0 - 2);
}

TEST_F(Split, ChunkOfAMultipleOfASymbol) {
  ValueId x = input({s0 * 3});
  const Value::Tuple& t = apply("chunk", x, {{"chunks", int64_t{3}}});
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[2].sizes[0], s0);
  EXPECT_EQ(t[2].storageOffset, s0 * 2);
}

TEST_F(Split, SplitByASymbolicSize) {
  ValueId n = graph.placeholder("n", Value(s0));
  EXPECT_EQ(graph.value(graph.call("split", {input({s0}), n})).tuple().size(), 1u);
  const Value::Tuple& t = graph.value(graph.call("split", {input({s0 * 2 + 1}), n})).tuple();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[2].sizes[0], table.integer(1));
  EXPECT_EQ(t[2].storageOffset, s0 * 2);
}

TEST_F(Split, CountsThatDependOnASymbolAreUnsupported) {
  ValueId x = input({s0, table.integer(3)});
  std::string message;
  EXPECT_EQ(codeOf(
                [&] {
                  graph.call("split", {x}, {{"split_size", int64_t{2}}});
                },
                &message),
            ErrorCode::Unsupported);
  EXPECT_EQ(message, "split: argument 'split_size': the number of chunks of " + s0.name() +
                         " depends on a symbol; guard on it first");
  EXPECT_EQ(codeOf([&] {
              graph.call("chunk", {x}, {{"chunks", int64_t{2}}});
            }),
            ErrorCode::Unsupported);
  EXPECT_EQ(codeOf([&] { graph.call("unbind", {x}, {}); }, &message), ErrorCode::Unsupported);
  EXPECT_NE(message.find("unbind: argument 'dim'"), std::string::npos) << message;
  // Along a constant dim the count is known.
  EXPECT_EQ(apply("unbind", x, {{"dim", int64_t{1}}}).size(), 3u);
  // A symbolic split_size input: one piece when it provably covers the dim.
  sym::Expr big = table.createBacked(9, {6, 100});
  ValueId n = graph.placeholder("n", Value(big));
  EXPECT_EQ(graph.value(graph.call("split", {input({table.integer(5)}), n})).tuple().size(), 1u);
  EXPECT_EQ(codeOf([&] {
              graph.call("split", {input({table.integer(7)}), n});
            }),
            ErrorCode::Unsupported);
}

TEST_F(Split, BadArgumentsNameTheArgument) {
  ValueId x = input(ints(table, {5, 3}));
  std::string message;
  EXPECT_EQ(codeOf(
                [&] {
                  graph.call("split_with_sizes", {x}, {{"split_sizes", V{2, 2}}});
                },
                &message),
            ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("split_with_sizes: argument 'split_sizes'"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] {
              graph.call("split_with_sizes", {x}, {{"split_sizes", V{6, -1}}});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] {
              graph.call("split", {x}, {{"split_size", int64_t{0}}});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] {
              graph.call("split", {x}, {{"split_size", int64_t{-1}}});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] {
              graph.call("split", {x}, {{"split_size", 1.5}});
            }),
            ErrorCode::InvalidArgument);
  for (int64_t chunks : {0, -2}) {
    EXPECT_EQ(codeOf(
                  [&] {
                    graph.call("chunk", {x}, {{"chunks", chunks}});
                  },
                  &message),
              ErrorCode::InvalidArgument);
    EXPECT_NE(message.find("chunk: argument 'chunks'"), std::string::npos) << message;
  }
  EXPECT_EQ(codeOf(
                [&] {
                  graph.call("unbind", {x}, {{"dim", int64_t{2}}});
                },
                &message),
            ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("unbind: argument 'dim'"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] {
              graph.call("chunk", {x}, {{"chunks", int64_t{2}}, {"dim", int64_t{-3}}});
            }),
            ErrorCode::InvalidArgument);
  ValueId scalar = input({});
  EXPECT_EQ(codeOf([&] {
              graph.call("split", {scalar}, {{"split_size", int64_t{1}}});
            }),
            ErrorCode::InvalidArgument);
}

TEST_F(Split, GetitemChecksItsIndexAndInput) {
  ValueId x = input(ints(table, {5, 3}));
  ValueId s = graph.call("split", {x}, {{"split_size", int64_t{2}}});
  ValueId last = graph.call("getitem", {s}, {{"index", int64_t{2}}});
  EXPECT_EQ(graph.meta(last), graph.value(s).tuple()[2]);
  std::string message;
  for (int64_t bad : {3, -1}) {
    EXPECT_EQ(codeOf(
                  [&] {
                    graph.call("getitem", {s}, {{"index", bad}});
                  },
                  &message),
              ErrorCode::InvalidArgument);
    EXPECT_NE(message.find("getitem: argument 'index'"), std::string::npos) << message;
  }
  EXPECT_EQ(codeOf(
                [&] {
                  graph.call("getitem", {x}, {{"index", int64_t{0}}});
                },
                &message),
            ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("getitem: argument 'self': expected a tuple"), std::string::npos)
      << message;
}

TEST_F(Split, TuplesAreOnlyForGetitem) {
  ValueId x = input(ints(table, {4}));
  ValueId s = graph.call("chunk", {x}, {{"chunks", int64_t{2}}});
  std::string message;
  EXPECT_EQ(codeOf([&] { graph.call("add", {x, s}); }, &message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("add: argument 'other'"), std::string::npos) << message;
  EXPECT_NE(message.find("(f32[2], f32[2] offset=2)"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] { graph.call("exp", {s}); }, &message), ErrorCode::InvalidArgument);
  EXPECT_NE(message.find("exp: argument 'self': expected a tensor"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] { graph.call("cat", {x, s}); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] {
              graph.call("narrow", {x, s}, {{"dim", int64_t{0}}, {"start", int64_t{0}}});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_THROW(graph.meta(s), Error);
  EXPECT_EQ(codeOf([&] { graph.setOutputs({s}); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(codeOf([&] { graph.placeholder("t", graph.value(s)); }), ErrorCode::InvalidArgument);
}

// x: f32[5, 3]; out = split(x, 2)[0] + split(x, 2)[2] (broadcast rows), with an
// identical second split and a dead one.
Graph splitGraph(sym::SymbolTable& table) {
  Graph g(table);
  ValueId x = g.placeholder("x", tensorOf(table, DType::Float32, ints(table, {5, 3})));
  ValueId a = g.call("split", {x}, {{"split_size", int64_t{2}}});
  ValueId b = g.call("split", {x}, {{"split_size", int64_t{2}}});
  g.call("unbind", {x});
  ValueId a0 = g.call("getitem", {a}, {{"index", int64_t{0}}});
  ValueId b2 = g.call("getitem", {b}, {{"index", int64_t{2}}});
  g.setOutputs({g.call("add", {a0, b2})});
  return g;
}

TEST(SplitGraph, PrintsTuplesAndGetitems) {
  sym::SymbolTable table;
  Graph g = splitGraph(table);
  EXPECT_EQ(print(g), R"(%0 : f32[5, 3] = placeholder("x")
%1 : (f32[2, 3], f32[2, 3] offset=6, f32[1, 3] offset=12) = split(%0, split_size=2)
%2 : (f32[2, 3], f32[2, 3] offset=6, f32[1, 3] offset=12) = split(%0, split_size=2)
%3 : (f32[3], f32[3] offset=3, f32[3] offset=6, f32[3] offset=9, f32[3] offset=12) = unbind(%0)
%4 : f32[2, 3] = getitem(%1, index=0)
%5 : f32[1, 3] offset=12 = getitem(%2, index=2)
%6 : f32[2, 3] = add(%4, %5)
return (%6)
)");
}

TEST(SplitGraph, DceKeepsUsedSplitsAndCseMergesThem) {
  sym::SymbolTable table;
  Graph g = splitGraph(table);
  Graph d = eliminateDeadCode(g);
  EXPECT_NO_THROW(verify(d));
  ASSERT_EQ(d.size(), 6u); // the unbind is gone, both splits stay
  EXPECT_EQ(d.node(1).target, "split");
  EXPECT_EQ(d.node(2).target, "split");
  Graph c = eliminateCommonSubexpressions(d);
  EXPECT_NO_THROW(verify(c));
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c.node(2).target, "getitem");
  EXPECT_EQ(c.node(2).inputs, std::vector<ValueId>{1});
  EXPECT_EQ(c.node(3).inputs, std::vector<ValueId>{1});
  // Equal getitems of one split merge too.
  Graph h(table);
  ValueId x = h.placeholder("x", tensorOf(table, DType::Float32, ints(table, {4})));
  ValueId s = h.call("chunk", {x}, {{"chunks", int64_t{2}}});
  ValueId p = h.call("getitem", {s}, {{"index", int64_t{1}}});
  ValueId q = h.call("getitem", {s}, {{"index", int64_t{1}}});
  h.setOutputs({h.call("mul", {p, q})});
  Graph merged = eliminateCommonSubexpressions(h);
  EXPECT_EQ(merged.size(), 4u);
  EXPECT_EQ(merged.node(3).inputs, std::vector<ValueId>({2, 2}));
}

TEST(SplitGraph, WireRoundTripKeepsHash) {
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(8, {2, sym::kInf});
  Graph g = splitGraph(table);
  std::string bytes = toBytes(g);
  sym::SymbolTable other;
  Graph back = fromBytes(bytes, other);
  EXPECT_EQ(structuralHash(back), structuralHash(g));
  EXPECT_EQ(print(back), print(g));
  // Symbols mentioned only inside a tuple travel too.
  Graph h(table);
  ValueId x = h.placeholder("x", tensorOf(table, DType::Float32, {table.integer(4), s0}));
  ValueId u = h.call("unbind", {x});
  h.setOutputs({h.call("getitem", {u}, {{"index", int64_t{3}}})});
  EXPECT_EQ(mentionedSymbols(h), std::vector<sym::Expr>{s0});
  sym::SymbolTable third;
  EXPECT_EQ(structuralHash(fromBytes(toBytes(h), third)), structuralHash(h));
  // A tuple hashes apart from its first element.
  Node n = h.node(u);
  Node first = n;
  first.value = Value(n.value.tuple()[0]);
  EXPECT_NE(nodeHash(n), nodeHash(first));
}

TEST(SplitGraph, WireRejectsBadTuples) {
  sym::SymbolTable table;
  Graph g = splitGraph(table);
  auto readCode = [](schema::Graph::Reader in) {
    sym::SymbolTable fresh;
    try {
      fromWire(in, fresh);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::Internal;
  };
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<schema::Graph>();
  toWire(g, root);
  root.getValues()[1].getTuple()[1].setDtype(schema::DType::INT8); // a piece's dtype
  EXPECT_EQ(readCode(root.asReader()), ErrorCode::Malformed);
  toWire(g, root);
  root.getValues()[1].initTuple(2); // one piece too few, of no sizes
  EXPECT_EQ(readCode(root.asReader()), ErrorCode::Malformed);
  toWire(g, root);
  root.getValues()[4].initTuple(0); // a getitem's result as a tuple
  EXPECT_EQ(readCode(root.asReader()), ErrorCode::Malformed);
  toWire(g, root);
  root.getOutputs().set(0, 1); // a tuple output
  EXPECT_EQ(readCode(root.asReader()), ErrorCode::Malformed);
  toWire(g, root);
  root.getValues()[0].initTuple(1); // a tuple placeholder
  EXPECT_EQ(readCode(root.asReader()), ErrorCode::Malformed);
  toWire(g, root);
  root.getNodes()[3].getAttributes()[0].setInt(7); // getitem out of range
  EXPECT_EQ(readCode(root.asReader()), ErrorCode::Malformed);
}

TEST(SplitGraph, VerifyRejectsBadGetitemsAndTupleSignatures) {
  sym::SymbolTable table;
  Graph g = splitGraph(table);
  Graph bad(table);
  for (const Node& n : g.nodes()) bad.append(n);
  bad.append(Node{NodeKind::Call, "getitem", {1}, {{"index", int64_t{3}}}, g.value(4)});
  EXPECT_THROW(verify(bad), Error);
  Graph tupleIn(table);
  tupleIn.append(Node{NodeKind::Placeholder, "t", {}, {}, g.value(1)});
  EXPECT_THROW(verify(tupleIn), Error);
}

struct SplitInterpret : ::testing::Test {
  sym::SymbolTable table;
  Graph graph{table};

  static HostTensor arange(std::vector<int64_t> sizes) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    std::vector<double> values;
    for (int64_t i = 0; i < n; ++i) values.push_back(double(i));
    return HostTensor::fromDoubles(DType::Float32, std::move(sizes), values);
  }
  std::vector<ValueId> items(ValueId tuple) {
    std::vector<ValueId> out;
    for (size_t i = 0; i < graph.value(tuple).tuple().size(); ++i)
      out.push_back(graph.call("getitem", {tuple}, {{"index", int64_t(i)}}));
    return out;
  }
};

using D = std::vector<double>;

TEST_F(SplitInterpret, PiecesHoldTheInputsElements) {
  ValueId x = graph.placeholder("x", tensorOf(table, DType::Float32, ints(table, {5, 3})));
  std::vector<ValueId> rows = items(graph.call("split", {x}, {{"split_size", int64_t{2}}}));
  std::vector<ValueId> cols =
      items(graph.call("chunk", {x}, {{"chunks", int64_t{2}}, {"dim", int64_t{1}}}));
  std::vector<ValueId> unbound = items(graph.call("unbind", {x}, {{"dim", int64_t{1}}}));
  graph.setOutputs({rows[0], rows[2], cols[0], cols[1], unbound[2]});
  std::vector<HostTensor> out = interpret(graph, {arange({5, 3})});
  EXPECT_EQ(out[0].toDoubles(), D({0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(out[1].toDoubles(), D({12, 13, 14}));
  EXPECT_EQ(out[1].storageOffset, 12);
  EXPECT_EQ(out[2].toDoubles(), D({0, 1, 3, 4, 6, 7, 9, 10, 12, 13}));
  EXPECT_EQ(out[3].sizes, V({5, 1}));
  EXPECT_EQ(out[3].toDoubles(), D({2, 5, 8, 11, 14}));
  EXPECT_EQ(out[4].toDoubles(), D({2, 5, 8, 11, 14}));
  for (const HostTensor& t : out) EXPECT_EQ(t.storage, out[0].storage); // all views
}

TEST_F(SplitInterpret, SymbolicPiecesOfAnOffsetInput) {
  sym::Expr s0 = table.createBacked(4, {1, sym::kInf});
  ValueId x = graph.placeholder("x", tensorOf(table, DType::Float32, {table.integer(4), s0}));
  std::vector<ValueId> parts =
      items(graph.call("split_with_sizes", {x}, {{"split_sizes", V{1, 3}}}));
  graph.setOutputs({parts[1]});
  HostTensor in = arange({6, 2}); // x is rows 1..4 of it: offset 2, s0 = 2
  in.sizes = {4, 2};
  in.storageOffset = 2;
  std::vector<HostTensor> out = interpret(graph, {in});
  EXPECT_EQ(out[0].storageOffset, 4);
  EXPECT_EQ(out[0].toDoubles(), D({4, 5, 6, 7, 8, 9}));
}

TEST_F(SplitInterpret, WritingAChunkInPlaceChangesTheInput) {
  ValueId x = graph.placeholder("x", tensorOf(table, DType::Float32, ints(table, {6})));
  std::vector<ValueId> parts = items(graph.call("chunk", {x}, {{"chunks", int64_t{3}}}));
  graph.call("add_", {parts[1]}, {{"other", 10.0}});
  graph.setOutputs({x, parts[1]});
  std::vector<HostTensor> out = interpret(graph, {arange({6})});
  EXPECT_EQ(out[0].toDoubles(), D({0, 1, 12, 13, 4, 5}));
  EXPECT_EQ(out[1].toDoubles(), D({12, 13}));
}

} // namespace
} // namespace kiln::ir
