#include "kiln/sym/print.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/symbol_table.h"
#include "random_tree.h"

using namespace kiln;
using namespace kiln::sym;

namespace {

struct Print : ::testing::Test {
  SymbolTable table;
  Expr s0 = table.createBacked(4), s1 = table.createBacked(6);
  Expr u0 = table.createUnbacked();
};

} // namespace

TEST_F(Print, WritesPolynomials) {
  EXPECT_EQ(toString(s0 * s1 + 4), "s0*s1 + 4");
  EXPECT_EQ(toString(s1 - s0), "-s0 + s1");
  EXPECT_EQ(toString(2 * s0 - 3 * s1 * s1 + 1), "-3*s1^2 + 2*s0 + 1");
  EXPECT_EQ(toString(-u0 - 1), "-u0 - 1");
  EXPECT_EQ(toString(table.integer(-12)), "-12");
}

TEST_F(Print, WritesDivisionsWithTheParenthesesTheyNeed) {
  EXPECT_EQ(toString(floorDiv(s0 + 1, 2)), "(s0 + 1)//2");
  EXPECT_EQ(toString(mod(s0, 8)), "s0 % 8");
  EXPECT_EQ(toString(s1 * floorDiv(s0, 2)), "s1*(s0//2)");
  EXPECT_EQ(toString(s1 + floorDiv(s0, 2)), "s1 + s0//2");
  EXPECT_EQ(toString(floorDiv(s0, 2) - s1), "-s1 + s0//2");
  EXPECT_EQ(toString(-mod(s0, 8)), "-(s0 % 8)");
  EXPECT_EQ(toString(floorDiv(s0, 2) * floorDiv(s0, 2)), "(s0//2)^2");
  EXPECT_EQ(toString(floorDiv(s0 * s1, u0)), "(s0*s1)//u0");
  EXPECT_EQ(toString(mod(-u0, 8)), "(-u0) % 8");
}

TEST_F(Print, WritesMinMaxRelationsAndConnectives) {
  EXPECT_EQ(toString(min(s0, s1)), "min(s0, s1)");
  EXPECT_EQ(toString(max(u0, s1 + 1) * 2), "2*max(u0, s1 + 1)");
  EXPECT_EQ(toString(logicalAnd(eq(s0, 4), ne(s1, 0))), "s0 == 4 && s1 != 0");
  EXPECT_EQ(toString(logicalNot(logicalOr(lt(u0, s0), eq(u0, 1)))), "!(u0 == 1 || u0 < s0)");
  EXPECT_EQ(toString(table.boolean(false)), "false");
  std::ostringstream out;
  out << s0 + 1;
  EXPECT_EQ(out.str(), "s0 + 1");
}

TEST_F(Print, WritesCppWithFloorHelpersWhereOperandsMayBeNegative) {
  EXPECT_EQ(toCpp(floorDiv(u0, 3)), "kiln_floordiv(u0, 3)");
  EXPECT_EQ(toCpp(floorDiv(s0, 3)), "(s0 / 3)"); // s0 >= 0: plain division is floor
  EXPECT_EQ(toCpp(mod(s0 + 1, 8)), "((s0 + 1) % 8)");
  EXPECT_EQ(toCpp(mod(s0, u0)), "kiln_mod(s0, u0)");
  EXPECT_EQ(toCpp(s0 * s0 * s1 - 2), "(s0*s0*s1 - 2)");
  EXPECT_EQ(toCpp(min(min(s0, s1), u0)), "kiln_min(s0, kiln_min(s1, u0))");
  EXPECT_EQ(toCpp(logicalAnd(lt(s0, s1), logicalNot(logicalOr(eq(u0, 1), lt(u0, 0))))),
            "((s0 < s1) && (!((u0 == 1) || (u0 < 0))))");
  EXPECT_NE(cppPrelude().find("int64_t kiln_floordiv(int64_t a, int64_t b)"), std::string::npos);
}

// Compiles many expressions in one file with the system compiler and compares
// every value with evaluate(), for bindings that include negative values.
TEST(PrintCpp, AgreesWithEvaluateWhenCompiled) {
  if (std::system("c++ --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no c++ compiler";
  test::Universe u;
  std::mt19937_64 rng(7);
  std::vector<std::array<int64_t, 4>> bindings = {
      {0, 2, -20, 0}, {20, 10, 20, 6}, {7, 3, -1, 5}, {1, 2, -7, 0}, {13, 9, 11, 3}};
  for (int i = 0; i < 5; ++i) bindings.push_back(u.randomValues(rng));
  std::vector<Expr> exprs;
  std::vector<std::vector<int64_t>> expected;
  for (int i = 0; exprs.size() < 300 && i < 5000; ++i) {
    test::RawTree tree;
    const int root = i % 3 == 2 ? tree.randomBool(rng, 3) : tree.randomInt(rng, 4);
    try {
      const Expr e = tree.build(root, u);
      std::vector<int64_t> values;
      for (const auto& b : bindings) values.push_back(evaluate(e, u.binding(b)));
      exprs.push_back(e);
      expected.push_back(values);
    } catch (const Error&) { // division by zero somewhere: C++ would trap
    }
  }
  ASSERT_EQ(exprs.size(), 300u);

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kiln-sym-cpp-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  {
    std::ofstream source(dir / "exprs.cpp");
    source << cppPrelude() << "#include <cstdio>\nint main() {\n"
           << "  static const int64_t bindings[][4] = {";
    for (const auto& b : bindings)
      source << "{" << b[0] << ", " << b[1] << ", " << b[2] << ", " << b[3] << "}, ";
    source << "};\n  for (const auto& b : bindings) {\n"
           << "    const int64_t s0 = b[0], s1 = b[1], u0 = b[2], u1 = b[3];\n";
    for (const Expr& e : exprs)
      source << "    std::printf(\"%lld\\n\", (long long)(" << toCpp(e) << "));\n";
    source << "    (void)s0; (void)s1; (void)u0; (void)u1;\n  }\n}\n";
  }
  const std::string build =
      "c++ -std=c++17 -O0 -w -o " + (dir / "exprs").string() + " " + (dir / "exprs.cpp").string();
  ASSERT_EQ(std::system(build.c_str()), 0) << "see " << dir;
  FILE* run = popen((dir / "exprs").c_str(), "r");
  ASSERT_NE(run, nullptr);
  for (size_t b = 0; b < bindings.size(); ++b) {
    for (size_t i = 0; i < exprs.size(); ++i) {
      long long value = 0;
      ASSERT_EQ(std::fscanf(run, "%lld", &value), 1);
      ASSERT_EQ(value, expected[i][b]) << toString(exprs[i]) << "\n  C++: " << toCpp(exprs[i]);
    }
  }
  pclose(run);
  std::filesystem::remove_all(dir);
}

TEST(PrintCpp, PreludeIsAlsoValidC) {
  if (std::system("cc --version > /dev/null 2>&1") != 0) GTEST_SKIP() << "no c compiler";
  const std::filesystem::path file = std::filesystem::temp_directory_path() /
                                     ("kiln-sym-prelude-" + std::to_string(getpid()) + ".c");
  std::ofstream(file) << cppPrelude() << cppPrelude() // a second inclusion is harmless
                      << "int64_t f(int64_t s0) { return kiln_mod(kiln_floordiv(s0, -3), 4); }\n";
  const std::string check = "cc -std=c99 -Wall -Werror -fsyntax-only " + file.string();
  EXPECT_EQ(std::system(check.c_str()), 0);
  std::filesystem::remove(file);
}
