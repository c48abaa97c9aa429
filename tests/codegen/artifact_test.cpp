// Whole artifacts: compiled, serialized, loaded by the runtime and run for
// several bindings of a symbolic size.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <random>

#include "kiln/codegen/compile.h"
#include "kiln/codegen/cuda_compiler.h"
#include "kiln/codegen/cuda_emitter.h"
#include "kiln/codegen/flash_kernels.h"
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

// A kernel that is an input's last reader, reading it only where it writes a
// buffer of the input's layout, may write that buffer over the input's memory
// when the caller gives the input up (a training backward's grad over a saved
// value): the plan says so (and keeps saying so through the wire), the kernel
// reads that input without __restrict__. An input read at other elements too
// (t + t^T) or by a later step is not offered; a plan reusing a non-input is
// malformed.
TEST(Artifact, AKernelMayWriteOverAnInputItReadsLast) {
  sym::SymbolTable table;
  ir::Graph graph(table);
  auto meta = [&](int64_t rows, int64_t cols) {
    return ir::Value(ir::TensorMeta::contiguous(DType::BFloat16, {table.integer(rows), table.integer(cols)}, table));
  };
  ir::ValueId s = graph.placeholder("s", meta(64, 32));
  ir::ValueId t = graph.placeholder("t", meta(32, 32));
  ir::ValueId w = graph.placeholder("w", meta(32, 16));
  ir::ValueId y = graph.call("add", {graph.call("mul", {s}, {{"other", 2.0}})}, {{"other", 1.0}});
  ir::ValueId z = graph.call(
      "add", {t, graph.call("transpose", {t}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})});
  graph.setOutputs({graph.call("matmul", {y, w}), graph.call("matmul", {z, w})});
  runtime::Artifact a = compileArtifact(graph, "cuda:sm_90", tempDir());
  auto inputBuffer = [&](int32_t input) {
    for (size_t k = 0; k < a.plan.buffers.size(); ++k)
      if (a.plan.buffers[k].input == input) return static_cast<int32_t>(k);
    return -1;
  };
  auto takers = [&](const runtime::Plan& plan, int32_t buffer) {
    int n = 0;
    for (const runtime::PlanBuffer& b : plan.buffers) n += b.reuses == buffer;
    return n;
  };
  int32_t sb = inputBuffer(0), tb = inputBuffer(1), wb = inputBuffer(2);
  EXPECT_EQ(takers(a.plan, sb), 1) << a.explain;
  EXPECT_EQ(takers(a.plan, tb), 0) << a.explain; // read transposed too
  EXPECT_EQ(takers(a.plan, wb), 0) << a.explain; // read by the products
  std::string sPointer = "const kiln_bf16* kiln_b" + std::to_string(sb) + ",";
  std::string tPointer = "const kiln_bf16* __restrict__ kiln_b" + std::to_string(tb);
  EXPECT_NE(a.source.find(sPointer), std::string::npos) << a.source;
  EXPECT_NE(a.source.find(tPointer), std::string::npos) << a.source;

  sym::SymbolTable again;
  runtime::Artifact back = runtime::fromBytes(runtime::toBytes(a), again);
  EXPECT_EQ(takers(back.plan, sb), 1);
  for (runtime::PlanBuffer& b : a.plan.buffers)
    if (b.reuses == sb) b.reuses = static_cast<int32_t>(a.plan.buffers.size() - 1); // no input
  try {
    runtime::fromBytes(runtime::toBytes(a), again);
    ADD_FAILURE() << "a plan reusing a buffer that is no input loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Malformed) << e.message();
  }
}

// Groups of about equal text, the largest units first; a unit to compile alone (a flash
// attention kernel's the build did not compile, CudaSource::flashUnits) weighs all of the
// text.
TEST(Artifact, FlashKernelsCompileInGroupsOfTheirOwn) {
  std::string flash = "#ifndef KILN_FLASH_HELPERS\n/* helpers */\n#endif\nvoid flash();\n";
  std::vector<std::string> units = {std::string(300, 'a'), flash + "1",
                                    std::string(200, 'b'), flash + "2",
                                    std::string(250, 'c'), std::string(100, 'd')};
  std::vector<std::string> groups = groupsOf(units, 4, {1, 3});
  ASSERT_EQ(groups.size(), 4u);
  size_t flashAlone = 0, plain = 0;
  for (const std::string& g : groups) {
    if (g.find("KILN_FLASH_HELPERS") != std::string::npos)
      flashAlone += g.size() == flash.size() + 1;
    else
      plain += g.size();
  }
  EXPECT_EQ(flashAlone, 2u);
  EXPECT_EQ(plain, 850u); // the four others share the two groups left
  // Without flash units: text alone, in the file's order within a group.
  std::vector<std::string> two = groupsOf({"x", std::string(5, 'y'), std::string(3, 'z')}, 2);
  EXPECT_EQ(two, (std::vector<std::string>{"yyyyy", "xzzz"}));
}

// Flash attention's kernels come compiled by the build for KILN_FLASH_PREBUILT_ARCHS
// (sm_90 by default): an artifact for sm_90 links those it calls (its cubin has them),
// one for another arch compiles them from their units as before.
TEST(Artifact, FlashKernelsComeCompiledByTheBuild) {
  if (!haveNvrtc() || !haveNvJitLink()) GTEST_SKIP() << "built without NVRTC and nvJitLink";
  std::vector<std::string> kernels = flashAttentionKernels();
  if (prebuiltFlashKernel(kernels.front(), "sm_90").empty()) // a build's failure fails the build
    GTEST_SKIP() << "KILN_FLASH_PREBUILT_ARCHS has no sm_90 in this build";
  EXPECT_EQ(kernels.size(), 72u); // 4 kinds x 2 masks + delta, of 4 head sizes and 2 dtypes
  for (const std::string& k : kernels) {
    std::string_view cubin = prebuiltFlashKernel(k, "sm_90");
    ASSERT_GT(cubin.size(), 4u) << k;
    EXPECT_EQ(cubin.substr(0, 4), "\x7f"
                                  "ELF")
        << k;
    EXPECT_NE(cubin.find(k), std::string_view::npos) << k;
    EXPECT_TRUE(prebuiltFlashKernel(k, "sm_80").empty()) << k;
  }
  EXPECT_TRUE(prebuiltFlashKernel("kiln_flash_fwd_d128_bf16", "sm_90").empty());

  sym::SymbolTable table;
  ir::Graph graph(table);
  ir::Shape shape = {table.integer(2), table.integer(3), table.integer(40), table.integer(16)};
  std::vector<ir::ValueId> qkv;
  for (const char* name : {"q", "k", "v"})
    qkv.push_back(graph.placeholder(
        name, ir::Value(ir::TensorMeta::contiguous(DType::Float16, shape, table))));
  ir::ValueId out = graph.call("attention_lse", qkv);
  graph.setOutputs({graph.call("mul", {out, out})});
  for (const char* target : {"cuda:sm_90", "cuda:sm_80"}) {
    runtime::Artifact a = compileArtifact(graph, target, tempDir());
    EXPECT_NE(a.plan.kernels.size(), 0u);
    for (const std::string& k : a.plan.kernels)
      EXPECT_NE(a.library.find(k), std::string::npos)
          << target << ": " << k << " is not in the cubin";
    EXPECT_NE(a.library.find("kiln_flash_lse_d16_f16"), std::string::npos) << target;
  }
}

// A file of several kernel functions compiles in groups on threads of their own (with
// nvJitLink and several CPUs), linked into one cubin: every function the plan launches
// is in it. A unit that does not compile fails the whole with NVRTC's log and its source.
TEST(Artifact, KernelsCompiledInGroupsLinkIntoOneCubin) {
  if (!haveNvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  sym::SymbolTable table;
  ir::Graph graph(table);
  auto meta = [&](ir::Shape s) { return ir::Value(ir::TensorMeta::contiguous(DType::Float32, s, table)); };
  ir::ValueId x = graph.placeholder("x", meta({table.integer(64), table.integer(256)}));
  std::vector<int64_t> last = {-1};
  ir::ValueId rows = graph.call("softmax", {x}, {{"dim", int64_t{-1}}});
  ir::ValueId sums = graph.call("sum", {graph.call("exp", {x})}, {{"dim", std::vector<int64_t>{0}}});
  graph.setOutputs({rows, sums, graph.call("amax", {graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})}, {{"dim", last}})});
  runtime::Artifact a = compileArtifact(graph, "cuda:sm_90", tempDir());
  ASSERT_GE(a.plan.kernels.size(), 2u) << a.explain;
  for (const std::string& k : a.plan.kernels)
    EXPECT_NE(a.library.find(k), std::string::npos) << k << " is not in the cubin";
  std::string prelude = cudaPrelude();
  std::vector<std::string> units = {
      "extern \"C\" __global__ void kiln_a(float* p) { p[threadIdx.x] = kiln_sigmoid(p[threadIdx.x]); }\n",
      "extern \"C\" __global__ void kiln_b(float* p) { p[threadIdx.x] += 1.0f; }\n"};
  std::string cubin = compileCuda(prelude, units, "sm_90");
  EXPECT_NE(cubin.find("kiln_a"), std::string::npos);
  EXPECT_NE(cubin.find("kiln_b"), std::string::npos);
  units.push_back("extern \"C\" __global__ void kiln_c(float* p) { p[0] = not_declared; }\n");
  try {
    compileCuda(prelude, units, "sm_90");
    ADD_FAILURE() << "a unit that does not compile compiled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Internal);
    EXPECT_NE(e.detail().find("not_declared"), std::string::npos) << e.detail().substr(0, 2000);
  }
}

} // namespace
} // namespace kiln::codegen
