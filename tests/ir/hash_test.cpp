#include "kiln/ir/hash.h"

#include <gtest/gtest.h>

#include "sample_graph.h"

namespace kiln::ir {
namespace {

TEST(Hash, SameGraphBuiltTwiceHashesTheSame) {
  sym::SymbolTable table;
  EXPECT_EQ(structuralHash(testing::sampleGraph(table)),
            structuralHash(testing::sampleGraph(table)));
}

TEST(Hash, PlaceholderNamesDoNotMatterButStructureDoes) {
  sym::SymbolTable table;
  Graph g = testing::sampleGraph(table);
  EXPECT_EQ(structuralHash(g), structuralHash(testing::sampleGraph(table, "renamed")));
  Graph other(table);
  ValueId x = other.placeholder("x", g.value(0));
  other.setOutputs({other.call("exp", {x})});
  Graph swapped(table);
  ValueId y = swapped.placeholder("x", g.value(0));
  swapped.setOutputs({swapped.call("exp2", {y})});
  EXPECT_NE(structuralHash(other), structuralHash(swapped));
  EXPECT_NE(structuralHash(g), structuralHash(other));
}

TEST(Hash, StableAcrossTables) {
  sym::SymbolTable a, b;
  EXPECT_EQ(structuralHash(testing::sampleGraph(a)), structuralHash(testing::sampleGraph(b)));
}

} // namespace
} // namespace kiln::ir
