// Small builders shared by the libs/ir tests, and the round trip every test
// graph goes through.
#pragma once

#include <gtest/gtest.h>

#include "kiln/ir/graph.h"
#include "kiln/ir/hash.h"
#include "kiln/ir/wire.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir::testing {

inline TensorMeta tensorOf(sym::SymbolTable& table, DType dtype, Shape sizes) {
  return TensorMeta::contiguous(dtype, std::move(sizes), table);
}

inline Shape ints(sym::SymbolTable& table, std::initializer_list<int64_t> xs) {
  Shape out;
  for (int64_t x : xs) out.push_back(table.integer(x));
  return out;
}

// The graph survives the Cap'n Proto round trip without the printer's help:
// read back over its own table it is node for node the same graph; over a
// fresh table it hashes the same.
inline void expectRoundTrip(const Graph& graph) {
  std::string bytes = toBytes(graph);
  Graph same = fromBytes(bytes, graph.symbols());
  ASSERT_EQ(same.size(), graph.size());
  for (size_t i = 0; i < graph.size(); ++i) {
    const Node& a = graph.nodes()[i];
    const Node& b = same.nodes()[i];
    EXPECT_TRUE(a.kind == b.kind && a.target == b.target && a.inputs == b.inputs &&
                a.attrs == b.attrs && a.value == b.value)
        << "node %" << i << " (" << a.target << ") changed in the round trip";
  }
  EXPECT_EQ(same.outputs(), graph.outputs());
  sym::SymbolTable fresh;
  EXPECT_EQ(structuralHash(fromBytes(bytes, fresh)), structuralHash(graph));
}

// A test with a graph over its own table; whatever the test built in it must
// survive the round trip.
struct GraphTest : ::testing::Test {
  sym::SymbolTable table;
  Graph graph{table};
  void TearDown() override { expectRoundTrip(graph); }
};

} // namespace kiln::ir::testing
