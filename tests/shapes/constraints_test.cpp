#include "kiln/shapes/constraints.h"

#include <gtest/gtest.h>

#include "kiln/common/error.h"

using namespace kiln;
using namespace kiln::sym;
using kiln::shapes::checkConstraints;
using kiln::shapes::ConstraintReport;
using kiln::shapes::DimSpec;
using kiln::shapes::ViolationKind;

namespace {

// x: [s0, s1], y: [s2], as a trace of f(x, y) would name them.
struct Constraints : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(8, {2, kInf});
  Expr s1 = table.createBacked(8, {2, kInf});
  Expr s2 = table.createBacked(64, {2, kInf});
  Expr s3 = table.createBacked(17, {2, kInf});
  Expr s4 = table.createBacked(4, {2, kInf});
  DimSpec batch{"x.size(0)", s0, "batch"};
  DimSpec seq{"x.size(1)", s1, "seq"};
  DimSpec n{"y.size(0)", s2, "n"};

  ConstraintReport check(const std::vector<DimSpec>& spec, const std::vector<Expr>& guards) {
    return checkConstraints(table, spec, guards);
  }
};

} // namespace

TEST_F(Constraints, AcceptsGuardsTheSpecImplies) {
  EXPECT_TRUE(check({batch, seq}, {}).ok());
  EXPECT_TRUE(check({batch, seq}, {ge(s0, 2), ge(s1, 2)}).ok());
  DimSpec seqIsBatch = seq;
  seqIsBatch.dim = "batch"; // one Dim for both
  EXPECT_TRUE(check({batch, seqIsBatch}, {eq(s0, s1)}).ok());
  DimSpec small = batch;
  small.range = {2, 512};
  EXPECT_TRUE(check({small}, {le(s0, 1024)}).ok()) << "a narrower user range is fine";
  DimSpec derived = n;
  derived.derived = s0 * s1;
  EXPECT_TRUE(check({batch, seq, derived}, {eq(s2, s0 * s1)}).ok());
  EXPECT_TRUE(check({batch}, {eq(mod(s2, 2), 0)}).ok())
      << "guards over dims the user did not declare";
}

TEST_F(Constraints, DimsTheGuardsMakeEqualShouldBeOneDim) {
  ConstraintReport r = check({batch, seq}, {eq(s0, s1)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].kind, ViolationKind::Equal);
  EXPECT_EQ(r.violations[0].dims, (std::vector<std::string>{"batch", "seq"}));
  EXPECT_EQ(
      r.violations[0].message,
      "x.size(0) (batch) and x.size(1) (seq) must be equal: the traced code needs batch == seq");
  EXPECT_EQ(r.violations[0].fix, "seq = batch");
  EXPECT_EQ(r.text(), "Constraints violated (batch, seq)!\n"
                      "  - x.size(0) (batch) and x.size(1) (seq) must be equal: the traced code "
                      "needs batch == seq\n"
                      "Suggested fixes:\n"
                      "  seq = batch\n");
}

TEST_F(Constraints, OneSymbolForTwoDims) { // duck sizing gave both sources one symbol
  DimSpec other{"y.size(0)", s0, "m"};
  ConstraintReport r = check({batch, other}, {});
  ASSERT_EQ(r.violations.size(), 1u);
  EXPECT_EQ(r.violations[0].fix, "m = batch");
}

TEST_F(Constraints, ADimSpecializedToAConstantShouldBeStatic) {
  SymbolTable t;
  Expr s = t.createBacked(1);
  ConstraintReport r = checkConstraints(t, {{"x.size(0)", s, "batch"}}, {eq(s, 1)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].kind, ViolationKind::Static);
  EXPECT_EQ(r.violations[0].message,
            "x.size(0) (batch) was specialized to 1: the traced code is valid only for batch == 1");
  EXPECT_EQ(r.violations[0].fix, "batch = None  # static: x.size(0) is always 1");
  r = check({batch, seq}, {eq(s1, 8)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].kind, ViolationKind::Static);
  EXPECT_EQ(r.violations[0].dims, std::vector<std::string>{"seq"});
}

TEST_F(Constraints, ARangeNarrowerThanDeclaredSuggestsTheRange) {
  ConstraintReport r = check({batch}, {le(s0, 1024)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].kind, ViolationKind::Range);
  EXPECT_EQ(r.violations[0].message, "not all values of x.size(0) (batch) in [2, inf] are valid: "
                                     "the traced code needs batch <= 1024");
  EXPECT_EQ(r.violations[0].fix, "batch = Dim('batch', max=1024)");
  DimSpec wide = batch;
  wide.range = {0, 4096};
  r = check({wide}, {ge(s0, 3), le(s0, 1024)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].fix, "batch = Dim('batch', min=3, max=1024)");
}

TEST_F(Constraints, AnAffineRelationBetweenDimsSuggestsADerivedDim) {
  ConstraintReport r = check({batch, {"z.size(0)", s3, "m"}}, {eq(s3, 2 * s0 + 1)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].kind, ViolationKind::Derived);
  EXPECT_EQ(r.violations[0].dims, (std::vector<std::string>{"m", "batch"}));
  EXPECT_EQ(r.violations[0].message,
            "z.size(0) (m) is not independent: the traced code needs m == 2*batch + 1");
  EXPECT_EQ(r.violations[0].fix, "m = 2*batch + 1");
  EXPECT_TRUE(r.asserts.empty());
}

// Seed 000: x.reshape(-1) + y with x: [s0, s1], y: [s2] needs s0*s1 == s2, which no
// derived Dim spells (they are a*root + b): the program asserts it when it runs.
TEST_F(Constraints, ANonlinearRelationBecomesARuntimeAssert) {
  ConstraintReport r = check({batch, seq, n}, {eq(s2, s0 * s1)});
  EXPECT_TRUE(r.ok()) << r.text();
  ASSERT_EQ(r.asserts.size(), 1u);
  EXPECT_EQ(r.asserts[0].condition, eq(s2, s0 * s1));
  EXPECT_EQ(r.asserts[0].dims, (std::vector<std::string>{"batch", "seq", "n"}));
  EXPECT_NE(r.asserts[0].message.find("batch*seq"), std::string::npos) << r.asserts[0].message;
}

TEST_F(Constraints, ADivisibilityGuardSuggestsAMultipleOfANewDim) {
  ConstraintReport r = check({batch}, {eq(mod(s0, 8), 0)});
  ASSERT_EQ(r.violations.size(), 1u) << r.text();
  EXPECT_EQ(r.violations[0].kind, ViolationKind::Divisible);
  EXPECT_EQ(r.violations[0].fix, "_batch = Dim('_batch'); batch = 8*_batch");
  EXPECT_NE(r.violations[0].message.find("batch % 8 == 0"), std::string::npos)
      << r.violations[0].message;
}

TEST_F(Constraints, ConditionsNoDimSpellsBecomeRuntimeAsserts) {
  ConstraintReport r = check({batch, {"x.size(1)", s4, "seq"}}, {ne(s0, s4)});
  EXPECT_TRUE(r.ok()) << r.text();
  ASSERT_EQ(r.asserts.size(), 1u);
  EXPECT_EQ(r.asserts[0].condition, ne(s0, s4));
  EXPECT_EQ(r.asserts[0].message, "the traced code needs batch != seq");
  // Seed 000's three branches (x: [6], y: [12]): the negations of the first two, the
  // third as it is.
  SymbolTable t;
  Expr x = t.createBacked(6, {2, kInf}), y = t.createBacked(12, {2, kInf});
  r = checkConstraints(t, {{"x.size(0)", x, "a"}, {"y.size(0)", y, "b"}},
                       {ne(x, y), ne(x, y * y * y), eq(x * x, 3 * y)});
  EXPECT_TRUE(r.ok()) << r.text();
  ASSERT_GE(r.asserts.size(), 2u) << "Z3 may prove the second from the third";
  EXPECT_EQ(r.asserts.front().condition, ne(x, y));
  EXPECT_EQ(r.asserts.back().condition, eq(x * x, 3 * y));
}

TEST_F(Constraints, AnUndeclaredSymbolEqualToDimsIsNotTheUsersBusiness) {
  // A stride read as a symbol (x.stride(0) == seq) constrains only the stride.
  Expr stride = table.createBacked(8, {1, kInf});
  ConstraintReport r = check({batch, seq}, {eq(stride, s1)});
  EXPECT_TRUE(r.ok()) << r.text();
  EXPECT_TRUE(r.asserts.empty());
}


TEST_F(Constraints, RefusesABadSpec) {
  EXPECT_THROW(check({{"x.size(0)", Expr(), "batch"}}, {}), Error);
  EXPECT_THROW(check({{"x.size(0)", s0, ""}}, {}), Error);
  DimSpec bad = n;
  bad.derived = s0 * 2 + table.createBacked(3);
  EXPECT_THROW(check({batch, bad}, {}), Error) << "derived from a symbol no entry declares";
}
