// The codegen service through a real stack: compile, the shared artifact
// cache (hits, a corrupted entry rebuilt), typed errors, and the artifact run
// in this process by libs/runtime.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "kiln_cli.h"
#include "kiln/client/stack.h"
#include "kiln/common/error.h"
#include "kiln/runtime/artifact.h"
#include "kiln/sym/symbol_table.h"

namespace fs = std::filesystem;
using namespace kiln;

namespace {

using kiln::testing::runKiln;

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class CompileTest : public ::testing::Test {
protected:
  void SetUp() override {
    base_ = fs::path("/tmp") / ("kct-" + std::to_string(getpid()));
    runDir_ = base_.string() + "-run";
    cache_ = base_.string() + "-cache";
    ::setenv("KILN_CACHE_DIR", cache_.c_str(), 1); // the stack's services inherit it
    std::string out = runKiln("--run-dir " + runDir_ + " up");
    ASSERT_NE(out.find("up"), std::string::npos) << out;
  }
  void TearDown() override {
    runKiln("--run-dir " + runDir_ + " down");
    fs::remove_all(runDir_);
    fs::remove_all(cache_);
    ::unsetenv("KILN_CACHE_DIR");
  }
  size_t compilations() { return count(runKiln("--run-dir " + runDir_ + " logs codegen -n 1000"), "compiling key="); }

  fs::path base_;
  std::string runDir_, cache_;
};

TEST_F(CompileTest, CompilesOnceThenHitsAndRebuildsACorruptEntry) {
  sym::SymbolTable table;
  ir::Graph graph(table);
  sym::Expr batch = table.createBacked(4, {1, sym::kInf});
  ir::ValueId x = graph.placeholder(
      "x", ir::Value(ir::TensorMeta::contiguous(ir::DType::Float32, {batch, table.integer(3)}, table)));
  graph.setOutputs({graph.call("relu", {graph.call("mul", {x}, {{"other", 2.0}})})});

  auto stack = client::Stack::connect(runDir_);
  client::Compiled first = stack.compile(graph);
  EXPECT_FALSE(first.cacheHit);
  client::Compiled second = stack.compile(graph);
  EXPECT_TRUE(second.cacheHit);
  EXPECT_EQ(second.artifact, first.artifact);
  EXPECT_EQ(compilations(), 1u) << "a hit ran the compiler";

  // The artifact runs here, for a batch it was not traced with.
  auto loaded = runtime::LoadedArtifact::load(second.artifact, cache_);
  std::vector<float> in = {-1, 2, -3, 4, 5, -6, 7, -8, 9, 10};
  in.resize(6);
  runtime::HostAllocator allocator;
  runtime::RunResult r = loaded->run({{ir::DType::Float32, in.data(), {2, 3}, {3, 1}}}, allocator);
  auto* out = static_cast<const float*>(r.outputs.at(0).data);
  EXPECT_EQ(std::vector<float>(out, out + 6), (std::vector<float>{0, 4, 0, 8, 10, 0}));
  for (void* b : r.buffers) allocator.release(b);

  // A corrupted entry is detected, removed and rebuilt, never loaded.
  bool corrupted = false;
  for (const auto& entry : fs::directory_iterator(cache_))
    if (entry.path().extension() == ".kart") {
      std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      f.write("garbage!", 8);
      corrupted = true;
    }
  ASSERT_TRUE(corrupted);
  client::Compiled third = stack.compile(graph);
  EXPECT_FALSE(third.cacheHit);
  EXPECT_EQ(compilations(), 2u);
  EXPECT_TRUE(stack.compile(graph).cacheHit);
}

TEST_F(CompileTest, WhatCannotBeCompiledIsATypedErrorAndTheServiceLives) {
  sym::SymbolTable table;
  ir::Graph graph(table);
  ir::ValueId x = graph.placeholder(
      "x", ir::Value(ir::TensorMeta::contiguous(ir::DType::Complex64, {table.integer(3)}, table)));
  graph.setOutputs({graph.call("neg", {x})}); // no stage computes with complex dtypes yet
  auto stack = client::Stack::connect(runDir_);
  try {
    stack.compile(graph);
    FAIL() << "compiled an op without a lowering";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
    EXPECT_EQ(e.service(), "codegen");
  }
  try {
    stack.compile(graph, "tpu");
    FAIL() << "compiled for an unknown target";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Unsupported) << e.what();
  }
  EXPECT_EQ(stack.ping("codegen", "still here"), "still here");
}

} // namespace
