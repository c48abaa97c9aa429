// Whole artifacts: compiled, serialized, loaded by the runtime and run for
// several bindings of a symbolic size.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <random>

#include "kiln/codegen/compile.h"
#include "kiln/common/error.h"
#include "kiln/ir/interpreter.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

using ir::DType;

std::string tempDir() {
  std::string dir = ::testing::TempDir() + "kiln_artifacts_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0700);
  return dir;
}

TEST(Artifact, OneArtifactServesEveryBatchSize) {
  sym::SymbolTable table;
  ir::Graph graph(table);
  sym::Expr batch = table.createBacked(8, {1, sym::kInf});
  auto meta = [&](ir::Shape s) { return ir::Value(ir::TensorMeta::contiguous(DType::Float32, s, table)); };
  ir::ValueId x = graph.placeholder("x", meta({batch, table.integer(32)}));
  ir::ValueId w = graph.placeholder("w", meta({table.integer(16), table.integer(32)}));
  ir::ValueId h = graph.call("linear", {x, w});
  graph.setOutputs({graph.call("softmax", {graph.call("gelu", {h})}, {{"dim", int64_t{-1}}})});

  std::string dir = tempDir();
  runtime::Artifact compiled = compileArtifact(graph, "cpu", dir);
  EXPECT_EQ(compiled.key, artifactKey(graph, "cpu"));
  EXPECT_NE(compiled.explain.find("extern"), std::string::npos) << compiled.explain;
  auto loaded = runtime::LoadedArtifact::load(runtime::toBytes(compiled), dir);
  std::mt19937 rng(3);
  std::normal_distribution<double> dist;
  for (int64_t n : {1, 7, 64, 1000}) {
    std::vector<double> xs(static_cast<size_t>(n * 32)), ws(16 * 32);
    for (double& v : xs) v = dist(rng);
    for (double& v : ws) v = dist(rng);
    ir::HostTensor hx = ir::HostTensor::fromDoubles(DType::Float32, {n, 32}, xs);
    ir::HostTensor hw = ir::HostTensor::fromDoubles(DType::Float32, {16, 32}, ws);
    std::vector<double> expected = ir::interpret(graph, {hx, hw}).at(0).toDoubles();
    runtime::HostAllocator allocator;
    runtime::RunResult result = loaded->run(
        {{DType::Float32, hx.storage->data(), {n, 32}, {32, 1}},
         {DType::Float32, hw.storage->data(), {16, 32}, {32, 1}}},
        allocator);
    ASSERT_EQ(result.outputs.at(0).sizes, (std::vector<int64_t>{n, 16}));
    auto* out = static_cast<const float*>(result.outputs[0].data);
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(out[i], expected[i], 1e-5) << n;
    for (void* b : result.buffers) allocator.release(b);
  }
}

TEST(Artifact, RenamedInputsShareAKeyOtherGraphsDoNot) {
  sym::SymbolTable table;
  auto build = [&](const char* name, const char* op) {
    ir::Graph g(table);
    ir::ValueId x = g.placeholder(name, ir::Value(ir::TensorMeta::contiguous(DType::Float32, {table.integer(4)}, table)));
    g.setOutputs({g.call(op, {x})});
    return artifactKey(g, "cpu");
  };
  EXPECT_EQ(build("x", "exp"), build("y", "exp"));
  EXPECT_NE(build("x", "exp"), build("x", "neg"));
  EXPECT_EQ(build("x", "exp").size(), 32u);
}

TEST(Artifact, SymbolHintsDoNotChangeTheKey) {
  auto build = [](int64_t hint) {
    sym::SymbolTable table;
    ir::Graph g(table);
    sym::Expr s0 = table.declare("s0", hint, {2, sym::kInf});
    ir::ValueId x = g.placeholder("x", ir::Value(ir::TensorMeta::contiguous(DType::Float32, {s0, table.integer(3)}, table)));
    g.setOutputs({g.call("relu", {x})});
    return artifactKey(g, "cpu");
  };
  EXPECT_EQ(build(4), build(8)) << "the ranks of a job with other batch sizes must share the artifact";
}

TEST(Artifact, CorruptBytesAreMalformedNeverLoaded) {
  sym::SymbolTable table;
  ir::Graph graph(table);
  ir::ValueId x = graph.placeholder("x", ir::Value(ir::TensorMeta::contiguous(DType::Float32, {table.integer(4)}, table)));
  graph.setOutputs({graph.call("exp", {x})});
  std::string bytes = runtime::toBytes(compileArtifact(graph, "cpu", tempDir()));
  for (size_t cut : {size_t{0}, size_t{8}, bytes.size() / 2}) {
    try {
      runtime::LoadedArtifact::load(std::string_view(bytes).substr(0, cut), tempDir());
      ADD_FAILURE() << "loaded a cut artifact of " << cut << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::Malformed) << e.message();
    }
  }
  try {
    compileArtifact(graph, "tpu", tempDir());
    ADD_FAILURE() << "compiled for an unknown target";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported);
  }
}

TEST(Artifact, ReductionsReadInTheirKernelOnlyAreNeverStored) {
  sym::SymbolTable table;
  ir::Graph graph(table);
  ir::ValueId x = graph.placeholder(
      "x", ir::Value(ir::TensorMeta::contiguous(DType::Float32, {table.integer(4), table.integer(8)}, table)));
  graph.setOutputs({graph.call("softmax", {x}, {{"dim", int64_t{-1}}})});
  runtime::Artifact a = compileArtifact(graph, "cpu", tempDir());
  ASSERT_EQ(a.plan.steps.size(), 1u) << a.explain;
  EXPECT_EQ(a.plan.steps[0].writes.size(), 1u) << "the max and the sum live in registers";
  EXPECT_EQ(a.plan.steps[0].writes[0], a.plan.outputs.at(0).buffer);
}

} // namespace
} // namespace kiln::codegen
