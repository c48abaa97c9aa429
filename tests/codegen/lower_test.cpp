// Lowering to the loop-level IR: every program must compute what the reference
// interpreter computes on the graph, and bodies must fuse as designed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

#include <unistd.h>

#include "kiln/codegen/compile.h"
#include "kiln/codegen/cpu_run.h"
#include "kiln/codegen/cuda_compiler.h"
#include "kiln/codegen/cuda_emitter.h"
#include "kiln/codegen/loop_eval.h"
#include "kiln/codegen/lower.h"
#include "kiln/codegen/product_epilogues.h"
#include "kiln/ir/pad_products.h"
#include "kiln/codegen/schedule.h"
#include "kiln/common/error.h"
#include "kiln/ir/interpreter.h"
#include "kiln/ir/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

using ir::Attr;
using ir::DType;
using ir::HostTensor;
using ir::TensorMeta;
using ir::ValueId;

struct Lower : ::testing::Test {
  sym::SymbolTable table;
  ir::Graph graph{table};
  sym::Expr s0 = table.createBacked(4, {2, sym::kInf});
  std::mt19937 rng{7};

  ir::Shape ints(std::initializer_list<int64_t> xs) {
    ir::Shape out;
    for (int64_t x : xs) out.push_back(table.integer(x));
    return out;
  }
  ValueId input(const char* name, DType dtype, ir::Shape sizes) {
    return graph.placeholder(name, ir::Value(TensorMeta::contiguous(dtype, sizes, table)));
  }
  // Inputs of one dtype and shape, named in order (attention's operands).
  std::vector<ValueId> inputs(std::initializer_list<const char*> names, DType dtype,
                              const ir::Shape& sizes) {
    std::vector<ValueId> out;
    for (const char* name : names) out.push_back(input(name, dtype, sizes));
    return out;
  }
  HostTensor random(DType dtype, std::vector<int64_t> sizes, double lo = -2, double hi = 2) {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    std::vector<double> values;
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < n; ++i)
      values.push_back(ir::isFloating(dtype) ? dist(rng) : std::floor(dist(rng)));
    return HostTensor::fromDoubles(dtype, std::move(sizes), values);
  }
  size_t kernels(const Program& p) { return schedule(p).kernels.size(); }
  Attr dims(std::vector<int64_t> d) { return {"dims", std::move(d)}; }
  ValueId transpose(ValueId v, int64_t a, int64_t b) {
    return graph.call("transpose", {v}, {{"dim0", a}, {"dim1", b}});
  }
  ValueId slice(ValueId v, int64_t dim, int64_t start, int64_t end, int64_t step) {
    return graph.call("slice", {v}, {{"dim", dim}, {"start", start}, {"end", end}, {"step", step}});
  }
  ValueId scaled(ValueId v, double by) { return graph.call("mul", {v}, {{"other", by}}); }
  size_t countKind(const Program& p, BufferKind kind) {
    size_t n = 0;
    for (const Buffer& b : p.buffers) n += b.kind == kind;
    return n;
  }

  size_t countExternOp(const Program& p, const std::string& op) {
    size_t n = 0;
    for (const Buffer& b : p.buffers) n += b.kind == BufferKind::Extern && b.call.op == op;
    return n;
  }

  // An index out of range: a typed error from the evaluator and the compiled kernel alike.
  void expectIndexError(const Program& p, const std::vector<HostTensor>& in) {
    for (bool compiled : {false, true}) {
      try {
        compiled ? runCompiled(p, in) : evaluate(p, graph, in);
        ADD_FAILURE() << "an index out of range ran";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.message();
      }
    }
  }

  // The program compiled for the CPU (once) and run on each set of inputs.
  std::vector<std::vector<HostTensor>> runCompiled(
      const Program& program, const std::vector<std::vector<HostTensor>>& inputSets) {
    Schedule plan = schedule(program);
    CpuSource source = emitCpu(program, plan);
    std::string so = ::testing::TempDir() + "kiln_lower_" + std::to_string(::getpid()) + ".so";
    compileCpu(source.code, so);
    auto library = runtime::Library::load(so);
    std::remove(so.c_str());
    std::vector<std::vector<HostTensor>> results;
    for (const std::vector<HostTensor>& inputs : inputSets)
      results.push_back(runCpu(program, plan, source, *library, graph, inputs));
    return results;
  }
  std::vector<HostTensor> runCompiled(const Program& program,
                                      const std::vector<HostTensor>& inputs) {
    return runCompiled(program, std::vector<std::vector<HostTensor>>{inputs})[0];
  }

  // Lowers the graph and checks the program against the interpreter: the
  // loop evaluator's results, and the compiled CPU kernels'.
  Program expectSameValues(const std::vector<HostTensor>& inputs, double tolerance = 1e-5,
                           const LowerOptions& options = {}) {
    Program program = lower(graph, options);
    // Each run gets its own copy of the inputs: in-place ops write them.
    auto fresh = [&] {
      std::vector<HostTensor> copies = inputs;
      for (HostTensor& t : copies) t.storage = std::make_shared<std::vector<std::byte>>(*t.storage);
      return copies;
    };
    std::vector<HostTensor> expected = ir::interpret(graph, fresh());
    expectClose(evaluate(program, graph, fresh()), expected, tolerance, program, "evaluated");
    Schedule plan = schedule(program);
    CpuSource source = emitCpu(program, plan);
    std::string so = ::testing::TempDir() + "kiln_lower_" + std::to_string(::getpid()) + ".so";
    try {
      compileCpu(source.code, so);
    } catch (const Error& e) {
      ADD_FAILURE() << e.message() << "\n" << e.detail();
      return program;
    }
    auto library = runtime::Library::load(so);
    std::remove(so.c_str());
    expectClose(runCpu(program, plan, source, *library, graph, fresh()), expected, tolerance,
                program, "compiled");
    expectCompilesForCuda();
    return program;
  }

  // The graph lowered for the CUDA target compiles with NVRTC to an sm_90
  // cubin: syntax, types and launch bounds are checked without a GPU.
  void expectCompilesForCuda() {
    if (!haveNvrtc()) return;
    auto [program, plan] = lowerAndSchedule(graph, parseTarget("cuda"));
    CudaSource source = emitCuda(program, plan);
    try {
      EXPECT_FALSE(compileCuda(source.code, "sm_90").empty() && !source.kernels.empty());
    } catch (const Error& e) {
      ADD_FAILURE() << "cuda: " << e.message() << "\n" << e.detail();
    }
  }

  void expectClose(const std::vector<HostTensor>& actual, const std::vector<HostTensor>& expected,
                   double tolerance, const Program& program, const char* how) {
    SCOPED_TRACE(how);
    EXPECT_EQ(actual.size(), expected.size());
    for (size_t k = 0; k < expected.size() && k < actual.size(); ++k) {
      EXPECT_EQ(actual[k].sizes, expected[k].sizes) << "output " << k;
      EXPECT_EQ(actual[k].dtype, expected[k].dtype) << "output " << k;
      std::vector<double> a = actual[k].toDoubles(), e = expected[k].toDoubles();
      EXPECT_EQ(a.size(), e.size());
      for (size_t i = 0; i < e.size() && i < a.size(); ++i) {
        if (std::isnan(e[i])) {
          EXPECT_TRUE(std::isnan(a[i])) << "output " << k << " element " << i;
        } else {
          EXPECT_NEAR(a[i], e[i], tolerance * (1 + std::fabs(e[i])))
              << "output " << k << " element " << i << "\n"
              << print(program);
        }
      }
    }
  }
};

TEST_F(Lower, PointwiseChainIsOneBody) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(8)});
  ValueId a = input("a", DType::Float32, ints({8}));
  ValueId b = input("b", DType::Float32, ints({8}));
  ValueId xa = graph.call("mul", {x, a});
  ValueId y = graph.call("gelu", {graph.call("add", {xa, b})});
  graph.setOutputs({graph.call("mul", {y, graph.call("sigmoid", {x})})});
  Program p = expectSameValues(
      {random(DType::Float32, {4, 8}), random(DType::Float32, {8}), random(DType::Float32, {8})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p);
  EXPECT_EQ(countKind(p, BufferKind::Input), 3u);
}

TEST_F(Lower, SymbolicSizesRunForEveryBinding) {
  sym::Expr batch = table.createBacked(8, {1, sym::kInf});
  ValueId x = input("x", DType::Float32, {batch, table.integer(3)});
  graph.setOutputs({graph.call("exp", {graph.call("neg", {x})}),
                    graph.call("sum", {x}, {{"dim", std::vector<int64_t>{0}}})});
  Program p = lower(graph);
  for (int64_t n : {1, 7, 64, 1000}) {
    std::vector<HostTensor> in = {random(DType::Float32, {n, 3})};
    std::vector<HostTensor> expected = ir::interpret(graph, in);
    std::vector<HostTensor> actual = evaluate(p, graph, in);
    for (size_t k = 0; k < 2; ++k) {
      std::vector<double> a = actual[k].toDoubles(), e = expected[k].toDoubles();
      ASSERT_EQ(a.size(), e.size());
      for (size_t i = 0; i < e.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-4) << n;
    }
  }
}

TEST_F(Lower, SoftmaxIsReductionsAndBodies) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(16)});
  graph.setOutputs({graph.call("softmax", {x}, {{"dim", int64_t{-1}}})});
  Program p = expectSameValues({random(DType::Float32, {4, 16}, -20, 20)});
  size_t reductions = 0;
  for (const Buffer& b : p.buffers)
    reductions += b.kind == BufferKind::Computed && b.loops.reduce != ReduceOp::None;
  EXPECT_EQ(reductions, 2u) << print(p); // max, then the sum of exp(x - max)
}

TEST_F(Lower, ResidualLayerNormReusesItsRows) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(24)});
  ValueId r = input("r", DType::Float32, {s0, table.integer(24)});
  ValueId w = input("w", DType::Float32, ints({24}));
  ValueId b = input("b", DType::Float32, ints({24}));
  graph.setOutputs({graph.call("layer_norm", {graph.call("add", {x, r}), w, b},
                               {{"normalized_shape", std::vector<int64_t>{24}}})});
  Program p = expectSameValues({random(DType::Float32, {4, 24}), random(DType::Float32, {4, 24}),
                                random(DType::Float32, {24}), random(DType::Float32, {24})},
                               1e-4);
  std::string code = emitCpu(p, schedule(p)).code;
  // x + r computed once per element and kept in the output's row, which the variance and
  // the normalization then read: x and r are each loaded once.
  EXPECT_EQ(occurrences(code, "kiln_b0["), 1u) << code;
  EXPECT_EQ(occurrences(code, "kiln_b1["), 1u) << code;
  EXPECT_EQ(code.find("kiln_row"), std::string::npos) << code;
}

TEST_F(Lower, RowsReadOnlyByReductionsKeepAScratchRow) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(24)});
  ValueId r = input("r", DType::Float32, {s0, table.integer(24)});
  ValueId sum = graph.call("add", {x, r});
  std::vector<Attr> lastDim = {{"dim", std::vector<int64_t>{-1}}};
  graph.setOutputs({graph.call("sum", {sum}, lastDim),
                    graph.call("sum", {graph.call("mul", {sum, sum})}, lastDim)});
  Program p =
      expectSameValues({random(DType::Float32, {5, 24}), random(DType::Float32, {5, 24})}, 1e-4);
  std::string code = emitCpu(p, schedule(p)).code;
  EXPECT_NE(code.find("kiln_row"), std::string::npos) << code;
  EXPECT_EQ(occurrences(code, "kiln_b0["), 1u) << code;
}

TEST_F(Lower, ReductionsOfEveryKind) {
  ValueId x = input("x", DType::Float32, ints({3, 4, 5}));
  ValueId i = input("i", DType::Int32, ints({3, 4}));
  graph.setOutputs({
      graph.call("sum", {x}, {{"dim", std::vector<int64_t>{0, 2}}, {"keepdim", true}}),
      graph.call("mean", {x}, {{"dim", std::vector<int64_t>{-1}}}),
      graph.call("amax", {x}, {{"dim", std::vector<int64_t>{1}}}),
      graph.call("amin", {x}),
      graph.call("argmax", {x}, {{"dim", int64_t{1}}}),
      graph.call("argmin", {x}),
      graph.call("prod", {i}, {{"dim", int64_t{1}}}),
      graph.call("sum", {i}),
      graph.call("any", {graph.call("gt", {x}, {{"other", 1.5}})}, {{"dim", int64_t{2}}}),
      graph.call("all", {graph.call("gt", {x}, {{"other", -1.5}})}),
  });
  expectSameValues({random(DType::Float32, {3, 4, 5}), random(DType::Int32, {3, 4}, -3, 3)});
}

TEST_F(Lower, LongReductionsIntoFewOutputsSumPartialsFirst) {
  ValueId x = input("x", DType::Float32, ints({8, 1024, 48}));
  ValueId g = input("g", DType::Float32, ints({8, 1024, 48}));
  ValueId rows = graph.call("view", {x}, {{"size", std::vector<int64_t>{48, -1}}});
  std::vector<int64_t> batch = {0, 1};
  graph.setOutputs({
      graph.call("sum", {graph.call("mul", {g, x})}, {{"dim", batch}}), // layer_norm's weight grad
      graph.call("sum", {g}, {{"dim", batch}}),                         // and its bias grad
      graph.call("mean", {x}, {{"dim", batch}, {"keepdim", true}}),
      graph.call("amax", {x}, {{"dim", batch}}),
      graph.call("sum", {x}),                                         // one long row
      graph.call("sum", {rows}, {{"dim", std::vector<int64_t>{1}}}),   // few long rows
      graph.call("sum", {x}, {{"dim", std::vector<int64_t>{2}}}),      // many rows: as they are
      graph.call("argmax", {x}, {{"dim", int64_t{0}}}),               // no partial argmax
  });
  LowerOptions split;
  split.splitReductions = true;
  Program p = expectSameValues({random(DType::Float32, {8, 1024, 48}),
                                random(DType::Float32, {8, 1024, 48})},
                               2e-3, split); // sums of 8192 f32 values in another order
  Schedule plan = schedule(p);
  std::string text = explain(plan, p);
  // 48 columns of 8192 rows: 8 x 32 chunks of 32 rows each, the partials
  // of the four column reductions in one kernel, their reductions in another
  // (with the mean, an output stored where its sum is).
  EXPECT_NE(text.find("kernel 0 over [8, 32, 48]: buf2 (sum of [32]), buf4 (sum of [32]), "
                      "buf6 (sum of [32]), buf9 (max of [32])\nkernel 1 over [48]: buf3 (sum of "
                      "[8, 32]), buf5 (sum of [8, 32]), buf7 (sum of [8, 32]), buf8 (pointwise []), "
                      "buf10 (max of [8, 32])\n"),
            std::string::npos) << text;
  // The long row in 64 chunks of 6144, the few rows in two halves.
  EXPECT_NE(text.find("over [8, 8]: buf11 (sum of [128, 48])\nkernel 3 over []: buf12 (sum of [8, 8])"),
            std::string::npos) << text;
  EXPECT_NE(text.find("over [48, 2]: buf13 (sum of [4096])\nkernel 5 over [48]: buf14 (sum of [2])"),
            std::string::npos) << text;
  EXPECT_NE(text.find("over [8, 1024]: buf"), std::string::npos) << text;
  EXPECT_NE(text.find("(argmax of [8])"), std::string::npos) << text;
  EXPECT_EQ(text, explain(schedule(lower(graph, lowerOptions(parseTarget("cuda")))),
                          lower(graph, lowerOptions(parseTarget("cuda")))));
  // On CUDA a column sum is a thread per output, over its whole column.
  CudaSource cuda = emitCuda(p, plan);
  EXPECT_NE(cuda.code.find("kiln_group_reduce<1>"), std::string::npos);
  EXPECT_EQ(explain(schedule(lower(graph)), lower(graph)).find("of [32]"), std::string::npos)
      << "the CPU splits nothing";
}

// A dynamic batch: the reduction's longest dim by hint is cut into chunks of
// ceil(n / chunks), each element past its end the sum's identity; right for
// every size, the short and empty chunks too (unsplit, 3072 columns of 8192
// rows took 187 us on the H100, torch.compile's split 22 us).
TEST_F(Lower, ColumnSumsOfASymbolicBatchSumPartialsFirst) {
  sym::Expr batch = table.createBacked(1024, {1, sym::kInf});
  ValueId x = input("x", DType::Float32, {batch, table.integer(96)});
  ValueId g = input("g", DType::Float32, {batch, table.integer(96)});
  sym::Expr width = table.createBacked(40, {2, sym::kInf});
  ValueId z = input("z", DType::Float32, {batch, width}); // the outputs' count symbolic too
  ValueId i = input("i", DType::Int32, {batch, table.integer(96)});
  ValueId j = input("j", DType::Int64, {batch, table.integer(96)});
  std::vector<int64_t> rows = {0};
  graph.setOutputs({graph.call("sum", {x}, {{"dim", rows}}),
                    graph.call("sum", {graph.call("mul", {g, x})}, {{"dim", rows}}),
                    graph.call("amax", {x}, {{"dim", rows}}),
                    graph.call("sum", {z}, {{"dim", rows}}),
                    graph.call("amin", {i}, {{"dim", rows}}),
                    graph.call("amax", {j}, {{"dim", rows}})});
  LowerOptions split;
  split.splitReductions = true;
  Program p = lower(graph, split);
  std::string text = explain(schedule(p), p);
  // 96 columns, 1024 rows by the hint: 32 chunks of ceil(s1 / 32) rows (s0 is the fixture's).
  EXPECT_NE(text.find("over [32, 96]: buf"), std::string::npos) << text;
  EXPECT_NE(text.find("(sum of [(s1 + 31)//32])"), std::string::npos) << text;
  EXPECT_NE(text.find("over [96]: buf"), std::string::npos) << text;
  EXPECT_EQ(occurrences(text, "(max of [(s1 + 31)//32])"), 2u) << text; // f32 and int64's
  EXPECT_NE(text.find("(min of [(s1 + 31)//32])"), std::string::npos) << text;
  EXPECT_EQ(text.find("(max of [s1])"), std::string::npos) << text; // int64's from INT64_MIN
  EXPECT_NE(print(p).find("where("), std::string::npos) << print(p);
  EXPECT_NE(text.find("over [32, s2]: buf"), std::string::npos) << text; // 40 columns by the hint
  std::vector<std::vector<HostTensor>> inputSets;
  for (int64_t n : {1, 31, 33, 1000, 4099}) // fewer rows than chunks, short last chunks
    inputSets.push_back({random(DType::Float32, {n, 96}), random(DType::Float32, {n, 96}),
                         random(DType::Float32, {n, 7}), random(DType::Int32, {n, 96}, -9, 9),
                         random(DType::Int64, {n, 96}, -9, 9)});
  std::vector<std::vector<HostTensor>> compiled = runCompiled(p, inputSets);
  for (size_t k = 0; k < inputSets.size(); ++k) {
    std::vector<HostTensor> expected = ir::interpret(graph, inputSets[k]);
    expectClose(evaluate(p, graph, inputSets[k]), expected, 1e-3, p, "evaluated");
    expectClose(compiled[k], expected, 1e-3, p, "compiled");
  }
  expectCompilesForCuda();
}

// Integer min and max over rows, one of a static count and one of a symbolic
// count, share a kernel over the columns; each starts from its own limit.
TEST_F(Lower, IntegerMinAndMaxOfDifferentRowCountsShareAKernel) {
  sym::Expr batch = table.createBacked(1024, {1, sym::kInf});
  ValueId i = input("i", DType::Int32, {table.integer(32), table.integer(96)});
  ValueId j = input("j", DType::Int64, {batch, table.integer(96)});
  std::vector<int64_t> rows = {0};
  graph.setOutputs({graph.call("amin", {i}, {{"dim", rows}}), graph.call("amax", {j}, {{"dim", rows}})});
  Program p = lower(graph);
  std::string text = explain(schedule(p), p);
  EXPECT_NE(text.find("kernel 0 over [96]: buf2 (min of [32]), buf3 (max of [s1])"), std::string::npos)
      << text;
  for (int64_t n : {1, 31, 1000}) {
    std::vector<HostTensor> in = {random(DType::Int32, {32, 96}, -9, 9), random(DType::Int64, {n, 96}, -9, 9)};
    expectClose(runCompiled(p, in), ir::interpret(graph, in), 1e-3, p, "compiled");
  }
}

TEST_F(Lower, SquaresAndCubesAreProducts) {
  ValueId x = input("x", DType::Float32, ints({5, 7}));
  ValueId h = input("h", DType::BFloat16, ints({5, 7}));
  graph.setOutputs({graph.call("pow", {x}, {{"other", int64_t{2}}}),
                    graph.call("pow", {x}, {{"other", 3.0}}),
                    graph.call("pow", {x}, {{"other", 2.5}}), // stays a pow
                    graph.call("gelu", {h}, {{"approximate", std::string("tanh")}})});
  Program p = expectSameValues({random(DType::Float32, {5, 7}, 0.1, 2),
                                random(DType::BFloat16, {5, 7})}, 1e-2);
  EXPECT_EQ(occurrences(print(p), "pow("), 1u) << print(p);
}

TEST_F(Lower, ExtremesOfRowsWithANaNAreNaN) {
  ValueId x = input("x", DType::Float32, ints({3, 40}));
  graph.setOutputs({graph.call("amax", {x}, {{"dim", std::vector<int64_t>{1}}}),
                    graph.call("amin", {x}, {{"dim", std::vector<int64_t>{1}}}),
                    graph.call("argmax", {x}, {{"dim", int64_t{1}}}),
                    graph.call("softmax", {x}, {{"dim", int64_t{1}}})});
  HostTensor in = random(DType::Float32, {3, 40});
  std::vector<double> values = in.toDoubles();
  values[40 + 17] = std::nan(""); // row 1 holds a NaN
  values[2 * 40 + 39] = 1e30;     // row 2's extreme is its last element
  expectSameValues({HostTensor::fromDoubles(DType::Float32, {3, 40}, values)});
}

TEST_F(Lower, ViewsFoldIntoLoads) {
  ValueId x = input("x", DType::Float32, ints({4, 6}));
  ValueId t = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId s = graph.call(
      "slice", {t},
      {{"dim", int64_t{0}}, {"start", int64_t{1}}, {"end", int64_t{5}}, {"step", int64_t{2}}});
  graph.setOutputs({graph.call("add", {s}, {{"other", 1.0}}), t});
  Program p = expectSameValues({random(DType::Float32, {4, 6})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p);
}

TEST_F(Lower, ViewsOfBodiesAndCopies) {
  ValueId x = input("x", DType::Float32, ints({4, 6}));
  ValueId e = graph.call("exp", {x});
  ValueId t = graph.call("permute", {e}, {{"dims", std::vector<int64_t>{1, 0}}});
  ValueId r = graph.call("reshape", {t}, {{"size", std::vector<int64_t>{3, 8}}});
  graph.setOutputs({graph.call("mul", {r}, {{"other", 2.0}}),
                    graph.call("flatten", {graph.call("clone", {t})})});
  expectSameValues({random(DType::Float32, {4, 6})});
}

TEST_F(Lower, CatAndStackChooseTheirSource) {
  ValueId a = input("a", DType::Float32, ints({2, 3}));
  ValueId b = input("b", DType::Int64, ints({2, 2}));
  ValueId c = input("c", DType::Float32, ints({2, 3}));
  graph.setOutputs({graph.call("cat", {a, b, a}, {{"dim", int64_t{1}}}),
                    graph.call("stack", {a, c}, {{"dim", int64_t{-1}}})});
  expectSameValues({random(DType::Float32, {2, 3}), random(DType::Int64, {2, 2}, -5, 5),
                    random(DType::Float32, {2, 3})});
}

TEST_F(Lower, IndexingLoadsThroughIndices) {
  ValueId w = input("w", DType::Float32, ints({10, 4}));
  ValueId ids = input("ids", DType::Int64, ints({2, 3}));
  ValueId idx = input("idx", DType::Int64, ints({5}));
  ValueId g = input("g", DType::Int64, ints({10, 2}));
  graph.setOutputs({graph.call("embedding", {w, ids}),
                    graph.call("index_select", {w, idx}, {{"dim", int64_t{0}}}),
                    graph.call("gather", {w, g}, {{"dim", int64_t{1}}})});
  expectSameValues({random(DType::Float32, {10, 4}), random(DType::Int64, {2, 3}, 0, 10),
                    random(DType::Int64, {5}, 0, 10), random(DType::Int64, {10, 2}, 0, 4)});
}

TEST_F(Lower, MatmulsAreExternCalls) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(8)});
  ValueId w = input("w", DType::Float32, ints({16, 8}));
  ValueId b = input("b", DType::Float32, ints({16}));
  ValueId w2 = input("w2", DType::Float32, ints({4, 16}));
  ValueId h = graph.call("relu", {graph.call("linear", {x, w, b})});
  ValueId w2t = graph.call("transpose", {w2}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  graph.setOutputs({graph.call("matmul", {h, w2t})});
  Program p = expectSameValues({random(DType::Float32, {4, 8}), random(DType::Float32, {16, 8}),
                                random(DType::Float32, {16}), random(DType::Float32, {4, 16})},
                               1e-4);
  EXPECT_EQ(countKind(p, BufferKind::Extern), 2u) << print(p);
}

// A layer repeated (gelu(x @ w) * c twice) launches one function twice, on
// the CPU and on CUDA (the CPU's run checks the shared function's values); a
// layer that differs in a constant has its own.
TEST_F(Lower, KernelsOfRepeatedLayersShareOneFunction) {
  ValueId x = input("x", DType::Float32, ints({6, 8}));
  ValueId w1 = input("w1", DType::Float32, ints({8, 8}));
  ValueId w2 = input("w2", DType::Float32, ints({8, 8}));
  auto layer = [&](ValueId in, ValueId w, double scale) {
    return graph.call("mul", {graph.call("gelu", {graph.call("mm", {in, w})}),
                              graph.call("full", {}, {{"size", std::vector<sym::Expr>{}},
                                                      {"fill_value", scale}})});
  };
  ValueId twice = layer(layer(x, w1, 2.0), w2, 2.0);
  graph.setOutputs({twice, layer(twice, w1, 3.0)});
  std::vector<HostTensor> inputs = {random(DType::Float32, {6, 8}), random(DType::Float32, {8, 8}),
                                    random(DType::Float32, {8, 8})};
  Program cpu = expectSameValues(inputs, 1e-4);
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  Schedule cpuPlan = schedule(cpu), cudaPlan = schedule(cuda);
  CpuSource cpuSource = emitCpu(cpu, cpuPlan);
  CudaSource cudaSource = emitCuda(cuda, cudaPlan);
  for (const std::vector<std::string>* functions : {&cpuSource.kernels, &cudaSource.kernels}) {
    ASSERT_EQ(functions->size(), 3u) << explain(cpuPlan, cpu);
    EXPECT_EQ((*functions)[0], (*functions)[1]);
    EXPECT_NE((*functions)[1], (*functions)[2]);
  }
  for (const std::string* code : {&cpuSource.code, &cudaSource.code}) {
    EXPECT_NE(code->find(" kiln_kernel_0("), std::string::npos);
    EXPECT_EQ(code->find(" kiln_kernel_1("), std::string::npos) << *code;
    EXPECT_NE(code->find("// kiln_kernel_1: kiln_kernel_0 (the same function)"), std::string::npos);
  }
  EXPECT_NE(cpuSource.launches[0].buffers, cpuSource.launches[1].buffers);
  EXPECT_NE(cudaSource.launches[0].buffers, cudaSource.launches[1].buffers);
}

TEST_F(Lower, MatrixProductsOfEveryLayout) {
  ValueId a = input("a", DType::Float32, ints({5, 3}));
  ValueId b = input("b", DType::Float32, ints({4, 3}));
  ValueId c = input("c", DType::Float64, ints({2, 3, 4}));
  ValueId d = input("d", DType::Float64, ints({2, 4, 5}));
  ValueId bias = input("bias", DType::Float32, ints({4}));
  ValueId e = input("e", DType::Float32, ints({5, 0}));
  ValueId f = input("f", DType::Float32, ints({0, 4}));
  ValueId bt = graph.call("transpose", {b}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId at = graph.call("transpose", {a}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId stepped = graph.call("slice", {a}, {{"dim", int64_t{1}}, {"step", int64_t{2}}});
  graph.setOutputs({
      graph.call("mm", {a, bt}), // B transposed
      graph.call("mm",
                 {graph.call("transpose", {at}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}}), bt}),
      graph.call("addmm", {bias, a, bt}, {{"beta", 0.5}, {"alpha", 2.0}}), // broadcast bias
      graph.call("bmm", {c, d}),
      graph.call("matmul",
                 {c, graph.call("select", {d}, {{"dim", int64_t{0}}, {"index", int64_t{1}}})}),
      graph.call("mm",
                 {stepped, graph.call("slice", {bt}, {{"dim", int64_t{0}}, {"step", int64_t{2}}})}),
      graph.call("mm", {e, f}), // an empty sum
  });
  Program p = expectSameValues({random(DType::Float32, {5, 3}), random(DType::Float32, {4, 3}),
                                random(DType::Float64, {2, 3, 4}),
                                random(DType::Float64, {2, 4, 5}), random(DType::Float32, {4}),
                                random(DType::Float32, {5, 0}), random(DType::Float32, {0, 4})},
                               1e-5);
  // Six products: addmm decomposes (on the CPU) into the first mm's product, computed once.
  EXPECT_EQ(countKind(p, BufferKind::Extern), 6u) << print(p);
}

TEST_F(Lower, TypePromotionAndHalfPrecision) {
  ValueId h = input("h", DType::Float16, ints({6}));
  ValueId i = input("i", DType::Int32, ints({6}));
  ValueId u = input("u", DType::UInt8, ints({6}));
  graph.setOutputs({graph.call("add", {h, i}), graph.call("mul", {i}, {{"other", 2.5}}),
                    graph.call("div", {i, u}, {{"rounding_mode", std::string("floor")}}),
                    graph.call("where", {graph.call("gt", {h}, {{"other", 0.0}}), h, i}),
                    graph.call("clamp", {i}, {{"min", int64_t{-1}}, {"max", int64_t{1}}}),
                    graph.call("to_dtype", {h}, {{"dtype", DType::Int8}}),
                    graph.call("remainder", {i}, {{"other", int64_t{-3}}})});
  expectSameValues({random(DType::Float16, {6}), random(DType::Int32, {6}, -9, 9),
                    random(DType::UInt8, {6}, 1, 9)},
                   1e-3);
}

// A fused chain of bf16 ops keeps its intermediates in f32, through to_dtype
// round trips too (Inductor's default; eager rounds each op's result): only
// what a buffer stores rounds, and a stored value (an output) is read as stored.
TEST_F(Lower, HalfPrecisionChainsRoundWhereStored) {
  ValueId x = input("x", DType::BFloat16, ints({1}));
  ValueId a = input("a", DType::BFloat16, ints({1}));
  ValueId b = input("b", DType::BFloat16, ints({1}));
  ValueId xa = graph.call("mul", {x, a});
  ValueId roundTrip = graph.call(
      "to_dtype", {graph.call("to_dtype", {xa}, {{"dtype", DType::Float32}})},
      {{"dtype", DType::BFloat16}});
  ValueId sum = graph.call("add", {xa, b}), roundTripSum = graph.call("add", {roundTrip, b});
  // (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14: bf16 (7 fraction bits) rounds it to 1 + 2^-6.
  double step = 1.0 / 128;
  std::vector<HostTensor> inputs = {HostTensor::fromDoubles(DType::BFloat16, {1}, {1 + step}),
                                    HostTensor::fromDoubles(DType::BFloat16, {1}, {1 + step}),
                                    HostTensor::fromDoubles(DType::BFloat16, {1}, {-1 - 2 * step})};
  auto expectValues = [&](const std::vector<double>& want) {
    Program program = lower(graph);
    for (const auto& got : {evaluate(program, graph, inputs), runCompiled(program, inputs)})
      for (size_t k = 0; k < want.size(); ++k) EXPECT_EQ(got.at(k).toDoubles().at(0), want[k]) << k;
  };
  graph.setOutputs({sum, roundTripSum});
  expectValues({1.0 / 16384, 1.0 / 16384});
  std::vector<HostTensor> eager = ir::interpret(graph, inputs);
  EXPECT_EQ(eager.at(0).toDoubles().at(0), 0.0);
  EXPECT_EQ(eager.at(1).toDoubles().at(0), 0.0);
  // The product as an output is stored, rounded, and its readers read that.
  graph.setOutputs({xa, sum, roundTripSum});
  expectValues({1 + 2 * step, 0.0, 0.0});
}

TEST_F(Lower, CreationOps) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(2)});
  graph.setOutputs(
      {graph.call("add", {x, graph.call("ones_like", {x})}),
       graph.call("arange", {}, {{"end", int64_t{7}}, {"start", int64_t{2}}}),
       graph.call("arange", {}, {{"end", 2.0}, {"step", 0.25}}),
       graph.call("full", {}, {{"size", std::vector<sym::Expr>{s0}}, {"fill_value", 1.5}})});
  expectSameValues({random(DType::Float32, {4, 2})});
}

TEST_F(Lower, SharedBigBodiesAreStoredOnce) {
  ValueId x = input("x", DType::Float32, ints({8}));
  ValueId y = x;
  for (int k = 0; k < 8; ++k) y = graph.call(k % 2 ? "sin" : "exp", {graph.call("neg", {y})});
  graph.setOutputs({graph.call("add", {y}, {{"other", 1.0}}), graph.call("mul", {y, y})});
  Program p = expectSameValues({random(DType::Float32, {8}, -1, 1)});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 3u) << print(p); // y, then each output
  // y joins its readers' kernel, which holds it in a register: never stored.
  Schedule plan = schedule(p);
  ASSERT_EQ(plan.kernels.size(), 1u) << explain(plan, p);
  EXPECT_EQ(plan.kernels[0].local, std::vector<BufferId>{1}) << explain(plan, p);
  std::string cuda = emitCuda(p, plan).code;
  EXPECT_EQ(cuda.find("kiln_b1"), std::string::npos) << cuda;
  EXPECT_NE(cuda.find("float kiln_s0[4];"), std::string::npos) << cuda; // a vector's 4 values
  // As an output too it is stored.
  graph.setOutputs({graph.call("add", {y}, {{"other", 1.0}}), y});
  Program out = expectSameValues({random(DType::Float32, {8}, -1, 1)});
  EXPECT_TRUE(schedule(out).kernels[0].local.empty()) << print(out);
}

// A qkv projection's grad: the cat of three grads feeds a product (which stores
// it) and a bias grad's sum, which loads the stored cat rather than computing
// it again from the three sources; a reshape of the cat to rows counts too.
TEST_F(Lower, BodiesALibraryCallStoresAreReadFromTheirBuffer) {
  ValueId q = input("q", DType::Float32, ints({2, 3, 4}));
  ValueId k = input("k", DType::Float32, ints({2, 3, 4}));
  ValueId w = input("w", DType::Float32, ints({8, 5}));
  ValueId qkv = graph.call("cat", {q, k}, {{"dim", int64_t{2}}});
  ValueId rows = graph.call("reshape", {qkv}, {{"size", std::vector<int64_t>{6, 8}}});
  graph.setOutputs({graph.call("sum", {qkv}, {{"dim", std::vector<int64_t>{0, 1}}}),
                    graph.call("mm", {rows, w})});
  Program p = expectSameValues({random(DType::Float32, {2, 3, 4}),
                                random(DType::Float32, {2, 3, 4}), random(DType::Float32, {8, 5})},
                               1e-4);
  ASSERT_EQ(p.buffers.size(), 6u) << print(p); // q, k, w, the cat, the sum, the product
  const Buffer& cat = p.buffers[3];
  const Buffer& sum = p.buffers[4];
  EXPECT_EQ(cat.loops.reduce, ReduceOp::None) << print(p);
  EXPECT_EQ(sum.loops.reduce, ReduceOp::Sum) << print(p);
  ASSERT_EQ(sum.loops.body->kind, ScalarKind::Load) << print(p);
  EXPECT_EQ(sum.loops.body->buffer, 3u) << print(p);
  EXPECT_EQ(p.buffers[5].call.inputs.front(), 3u) << print(p);
}

TEST_F(Lower, MutationsWriteTheirTargetInOrder) {
  // y reads x before x.add_(1) writes it; z reads it after; out= writes w.
  ValueId x = input("x", DType::Float32, ints({3, 4}));
  ValueId w = input("w", DType::Float64, ints({3, 4}));
  ValueId y = graph.call("mul", {x}, {{"other", 2.0}});
  ValueId written = graph.call("add_", {x}, {{"other", 1.0}});
  ValueId z = graph.call("mul", {x}, {{"other", 3.0}});
  ValueId o = graph.call("exp_out", {x, w});
  ValueId t = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  ValueId sq =
      graph.call("mul_", {graph.call("slice", {x}, {{"dim", int64_t{1}}, {"step", int64_t{2}}})},
                 {{"other", -1.0}}); // a strided view written in place
  ValueId g = input("g", DType::Float32, ints({2, 5}));
  ValueId s = input("s", DType::Float32, ints({2, 5}));
  ValueId gelu = graph.call("gelu_", {g}); // a composite's in-place form
  ValueId soft = graph.call("softmax_out", {g, s}, {{"dim", int64_t{1}}}); // and out= form
  graph.setOutputs({y, written, z, o, t, sq, gelu, soft});
  Program p = expectSameValues({random(DType::Float32, {3, 4}), random(DType::Float64, {3, 4}),
                                random(DType::Float32, {2, 5}), random(DType::Float32, {2, 5})});
  size_t aliases = 0;
  for (const Buffer& b : p.buffers) aliases += b.aliasOf.has_value();
  EXPECT_EQ(aliases, 5u) << print(p);
}

// Views of bodies fold into the index their consumer reads: the body is never
// stored, and producer and consumer are one kernel.
TEST_F(Lower, TransposeOfABodyFusesWithItsConsumer) {
  ValueId x = input("x", DType::Float32, ints({4, 6}));
  ValueId y = input("y", DType::Float32, ints({6, 4}));
  graph.setOutputs({graph.call("add", {transpose(graph.call("exp", {x}), 0, 1), y})});
  Program p = expectSameValues({random(DType::Float32, {4, 6}), random(DType::Float32, {6, 4})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p);
  EXPECT_EQ(kernels(p), 1u) << print(p);
}

TEST_F(Lower, PermuteAndTransposeOfBodies) {
  ValueId x = input("x", DType::Float32, ints({2, 3, 4}));
  ValueId y = input("y", DType::Float32, ints({4, 2, 3}));
  ValueId e = graph.call("sin", {x});
  ValueId permuted = graph.call("permute", {e}, {dims({2, 0, 1})});
  ValueId back =
      transpose(transpose(graph.call("neg", {x}), -1, 0), 1, 2); // [4, 3, 2] then [4, 2, 3]
  graph.setOutputs({graph.call("add", {graph.call("add", {permuted, y}), back})});
  Program p =
      expectSameValues({random(DType::Float32, {2, 3, 4}), random(DType::Float32, {4, 2, 3})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p);
  EXPECT_EQ(kernels(p), 1u) << print(p);
}

TEST_F(Lower, ExpandOfABodyReadsItsBroadcastDimsAtZero) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(6)});
  ValueId z = input("z", DType::Float32, {table.integer(3), s0, table.integer(6)});
  ValueId b = input("b", DType::Float32, {s0, table.integer(1)});
  ValueId expanded =
      graph.call("expand", {graph.call("unsqueeze", {scaled(x, 2.0)}, {{"dim", int64_t{0}}})},
                 {{"size", std::vector<sym::Expr>{table.integer(3), s0, table.integer(6)}}});
  ValueId wide = graph.call("expand", {graph.call("exp", {b})},
                            {{"size", std::vector<sym::Expr>{s0, table.integer(6)}}});
  graph.setOutputs({graph.call("add", {graph.call("add", {expanded, z}), wide})});
  Program p = expectSameValues({random(DType::Float32, {4, 6}), random(DType::Float32, {3, 4, 6}),
                                random(DType::Float32, {4, 1})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p);
  EXPECT_EQ(kernels(p), 1u) << print(p);
}

TEST_F(Lower, ExpandOfABigBodyIsStored) {
  ValueId x = input("x", DType::Float32, ints({4, 1}));
  ValueId big = x;
  for (int k = 0; k < 8; ++k) big = graph.call(k % 2 ? "sin" : "exp", {graph.call("neg", {big})});
  ValueId wide = graph.call("expand", {big}, {{"size", ints({4, 16})}});
  graph.setOutputs({scaled(wide, 2.0)});
  Program p = expectSameValues({random(DType::Float32, {4, 1}, -1, 1)});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 2u) << print(p); // computed once per row
}

TEST_F(Lower, SliceSelectAndNarrowOfBodies) {
  ValueId x = input("x", DType::Float32, ints({4, 12}));
  ValueId a = input("a", DType::Float32, ints({5, 6}));
  ValueId b = input("b", DType::Float32, ints({5, 6}));
  ValueId plus = graph.call("add", {x}, {{"other", 1.0}});
  ValueId stepped = slice(plus, 1, 2, 10, 2);   // [4, 4]
  ValueId clamped = slice(plus, 1, -5, 100, 3); // [4, 2]
  ValueId chosen = graph.call("select", {graph.call("mul", {a, b})},
                              {{"dim", int64_t{1}}, {"index", int64_t{3}}}); // [5]
  ValueId last = graph.call("select", {graph.call("mul", {a, b})},
                            {{"dim", int64_t{0}}, {"index", int64_t{-1}}}); // [6]
  ValueId narrowed =
      graph.call("narrow", {graph.call("exp", {x})},
                 {{"dim", int64_t{-1}}, {"start", int64_t{-4}}, {"length", int64_t{3}}});
  graph.setOutputs({scaled(stepped, 3.0), scaled(clamped, 3.0), scaled(chosen, 2.0),
                    scaled(last, 2.0), scaled(narrowed, 0.5)});
  Program p = expectSameValues({random(DType::Float32, {4, 12}), random(DType::Float32, {5, 6}),
                                random(DType::Float32, {5, 6})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 5u) << print(p); // the outputs only
}

TEST_F(Lower, ReshapeViewAndUnflattenOfBodies) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(6)});
  ValueId y = input("y", DType::Float32, {table.integer(3), s0, table.integer(2)});
  ValueId plus = graph.call("add", {x}, {{"other", 1.0}});
  ValueId viewed = graph.call(
      "view", {plus}, {{"size", std::vector<sym::Expr>{table.integer(3), s0, table.integer(2)}}});
  ValueId reshaped =
      graph.call("reshape", {graph.call("exp", {x})},
                 {{"size", std::vector<sym::Expr>{table.integer(3), s0, table.integer(2)}}});
  ValueId unflat = graph.call(
      "unflatten", {graph.call("neg", {x})},
      {{"dim", int64_t{1}}, {"sizes", std::vector<sym::Expr>{table.integer(3), table.integer(2)}}});
  ValueId flat = graph.call("view", {graph.call("sin", {y})},
                            {{"size", std::vector<sym::Expr>{table.integer(-1)}}});
  ValueId heads =
      graph.call("view", {graph.call("cos", {y})}, // size-1 dims added
                 {{"size", std::vector<sym::Expr>{table.integer(1), table.integer(3), s0,
                                                  table.integer(2), table.integer(1)}}});
  graph.setOutputs({graph.call("add", {graph.call("add", {viewed, reshaped}), y}),
                    scaled(unflat, 2.0), scaled(flat, 2.0), scaled(heads, 2.0)});
  Program p = expectSameValues({random(DType::Float32, {4, 6}), random(DType::Float32, {3, 4, 2})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 4u) << print(p);
  // Each group of dims maps on its own ([1, 3] to [3], [s0] to [s0], [2, 1] to [2]): no
  // division, which a flat position over the symbolic size would need.
  std::string split = print(p.buffers.back().loops.body, p);
  EXPECT_EQ(split.find('%'), std::string::npos) << split;
  EXPECT_EQ(split.find("//"), std::string::npos) << split;
  // The same program for other sizes of s0.
  for (int64_t n : {2, 5, 9}) {
    std::vector<HostTensor> in = {random(DType::Float32, {n, 6}),
                                  random(DType::Float32, {3, n, 2})};
    std::vector<HostTensor> expected = ir::interpret(graph, in);
    expectClose(evaluate(p, graph, in), expected, 1e-5, p, "evaluated");
  }
}

TEST_F(Lower, SqueezeAndUnsqueezeOfBodies) {
  ValueId x = input("x", DType::Float32, ints({3, 1, 4, 1}));
  ValueId y = input("y", DType::Float32, ints({3, 4}));
  ValueId all = graph.call("squeeze", {graph.call("exp", {x})});
  ValueId one =
      graph.call("squeeze", {graph.call("neg", {x})}, {{"dim", std::vector<int64_t>{-1}}});
  ValueId added = graph.call("unsqueeze", {graph.call("sin", {y})}, {{"dim", int64_t{-2}}});
  graph.setOutputs({graph.call("add", {all, y}), scaled(one, 2.0), scaled(added, 2.0)});
  Program p =
      expectSameValues({random(DType::Float32, {3, 1, 4, 1}), random(DType::Float32, {3, 4})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 3u) << print(p);
}

TEST_F(Lower, ChainsOfViewsOfABodyAreOneKernel) {
  // transpose, then slice, then reshape, then a broadcast against an input
  ValueId x = input("x", DType::Float32, {s0, table.integer(8)});
  ValueId y = input("y", DType::Float32, {table.integer(2), table.integer(1), s0});
  ValueId t = transpose(graph.call("exp", {x}), 0, 1); // [8, s0]
  ValueId s = slice(t, 0, 1, 8, 2);                    // [4, s0]
  ValueId r = graph.call(
      "reshape", {s}, {{"size", std::vector<sym::Expr>{table.integer(2), table.integer(2), s0}}});
  graph.setOutputs({graph.call("mul", {r, y})});
  Program p = expectSameValues({random(DType::Float32, {4, 8}), random(DType::Float32, {2, 1, 4})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p);
  EXPECT_EQ(kernels(p), 1u) << print(p);
  for (int64_t n : {2, 3, 7}) {
    std::vector<HostTensor> in = {random(DType::Float32, {n, 8}),
                                  random(DType::Float32, {2, 1, n})};
    expectClose(evaluate(p, graph, in), ir::interpret(graph, in), 1e-5, p, "evaluated");
  }
}

TEST_F(Lower, ViewsOfViewsOfInputsAndBroadcastsAfterViews) {
  ValueId x = input("x", DType::Float32, ints({6, 4}));
  ValueId y = input("y", DType::Float32, ints({3, 6}));
  ValueId ofInput = slice(transpose(x, 0, 1), 1, 0, 6, 2); // [4, 3] of x
  ValueId row = graph.call("select", {graph.call("exp", {y})},
                           {{"dim", int64_t{0}}, {"index", int64_t{1}}});                 // [6]
  ValueId col = graph.call("unsqueeze", {slice(row, 0, 0, 6, 2)}, {{"dim", int64_t{0}}}); // [1, 3]
  graph.setOutputs(
      {graph.call("add", {ofInput, col}), graph.call("mul", {transpose(x, 0, 1), row})});
  Program p = expectSameValues({random(DType::Float32, {6, 4}), random(DType::Float32, {3, 6})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 2u) << print(p); // the outputs only
}

TEST_F(Lower, PiecesOfBodies) {
  ValueId x = input("x", DType::Float32, ints({5, 4}));
  ValueId e = graph.call("exp", {x});
  ValueId chunks = graph.call("chunk", {e}, {{"chunks", int64_t{2}}}); // rows 0-2, 3-4
  ValueId rows = graph.call("unbind", {graph.call("neg", {x})}, {{"dim", int64_t{1}}});
  auto item = [&](ValueId t, int64_t k) { return graph.call("getitem", {t}, {{"index", k}}); };
  graph.setOutputs(
      {scaled(item(chunks, 1), 2.0), graph.call("add", {item(rows, 3), item(rows, 0)})});
  Program p = expectSameValues({random(DType::Float32, {5, 4})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 2u) << print(p);
}

TEST_F(Lower, ViewsOfBodiesThatAreOutputsAliasTheStoredBody) {
  ValueId x = input("x", DType::Float32, ints({4, 6}));
  ValueId e = graph.call("exp", {x});
  graph.setOutputs({transpose(e, 0, 1), e, slice(e, 1, 1, 6, 2)});
  Program p = expectSameValues({random(DType::Float32, {4, 6})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 1u) << print(p); // exp(x), viewed three ways
}

TEST_F(Lower, AsStridedOfABodyIsStored) {
  ValueId x = input("x", DType::Float32, ints({4, 6}));
  ValueId overlapping =
      graph.call("as_strided", {graph.call("exp", {x})},
                 {{"size", std::vector<sym::Expr>{table.integer(3), table.integer(4)}},
                  {"stride", std::vector<sym::Expr>{table.integer(2), table.integer(1)}},
                  {"storage_offset", int64_t{1}}});
  graph.setOutputs({scaled(overlapping, 2.0)});
  Program p = expectSameValues({random(DType::Float32, {4, 6})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 2u) << print(p);
}

TEST_F(Lower, MutatedViewsOfBodiesWriteTheStoredBody) {
  // v views y and is written in place: y is stored and sees the write. w views
  // u, which is written after: w sees the write too.
  ValueId x = input("x", DType::Float32, ints({3, 4}));
  ValueId y = graph.call("add", {x}, {{"other", 1.0}});
  ValueId v = transpose(y, 0, 1);
  ValueId written = graph.call("mul_", {v}, {{"other", -2.0}});
  ValueId u = graph.call("exp", {x});
  ValueId w = slice(u, 1, 1, 4, 2);
  ValueId bumped = graph.call("add_", {u}, {{"other", 10.0}});
  ValueId z = graph.call("sin", {x});
  ValueId zv = graph.call("select", {z}, {{"dim", int64_t{0}}, {"index", int64_t{1}}});
  ValueId zout = graph.call("neg_out", {graph.call("neg", {x}), z}); // out= into z's memory
  graph.setOutputs({y, written, scaled(w, 1.0), bumped, scaled(zv, 1.0), zout});
  Program p = expectSameValues({random(DType::Float32, {3, 4})});
  size_t aliases = 0;
  for (const Buffer& b : p.buffers) aliases += b.aliasOf.has_value();
  EXPECT_EQ(aliases, 3u) << print(p);
}

TEST_F(Lower, GatheredBodiesAreReadAtThePickedIndex) {
  ValueId w = input("w", DType::Float32, ints({10, 4}));
  ValueId ids = input("ids", DType::Int64, ints({2, 3}));
  ValueId idx = input("idx", DType::Int64, ints({5}));
  ValueId g = input("g", DType::Int64, ints({10, 2}));
  ValueId scale = input("scale", DType::Float32, ints({4}));
  ValueId small = graph.call("mul", {w, scale});
  graph.setOutputs(
      {graph.call("embedding", {small, ids}),
       graph.call("index_select", {transpose(graph.call("exp", {w}), 0, 1), idx},
                  {{"dim", int64_t{1}}}),
       graph.call("gather", {graph.call("add", {small, w}), g}, {{"dim", int64_t{1}}})});
  Program p =
      expectSameValues({random(DType::Float32, {10, 4}), random(DType::Int64, {2, 3}, 0, 10),
                        random(DType::Int64, {5}, 0, 10), random(DType::Int64, {10, 2}, 0, 4),
                        random(DType::Float32, {4})});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 3u) << print(p); // the outputs only
  // An index out of range is still an error.
  std::vector<HostTensor> bad = {random(DType::Float32, {10, 4}),
                                 random(DType::Int64, {2, 3}, 10, 12),
                                 random(DType::Int64, {5}, 0, 10),
                                 random(DType::Int64, {10, 2}, 0, 4), random(DType::Float32, {4})};
  EXPECT_THROW(evaluate(p, graph, bad), Error);
}

TEST_F(Lower, ViewsOfBodiesAtTheEdges) {
  ValueId x = input("x", DType::Float32, ints({3, 3}));
  ValueId w = input("w", DType::Float32, ints({3, 2}));
  ValueId idx = input("idx", DType::Int64, ints({3, 2}));
  ValueId e = graph.call("exp", {x});
  ValueId empty = slice(e, 0, 2, 2, 1);                        // [0, 3]
  ValueId product = graph.call("mm", {transpose(e, 0, 1), w}); // an extern reads the view
  ValueId g = graph.call("gather", {scaled(x, 2.0), idx}, {{"dim", int64_t{-1}}});
  ValueId point = graph.call("expand",
                             {graph.call("unsqueeze", {graph.call("neg", {graph.call("sum", {x})})},
                                         {{"dim", int64_t{0}}})},
                             {{"size", ints({4})}}); // of a 0-d body
  graph.setOutputs(
      {scaled(empty, 2.0), product, graph.call("mul", {g, g}),
       graph.call("add", {slice(g, 0, 0, 2, 1), transpose(slice(g, 0, 1, 3, 1), 0, 1)}),
       scaled(point, 1.0)});
  expectSameValues({random(DType::Float32, {3, 3}), random(DType::Float32, {3, 2}),
                    random(DType::Int64, {3, 2}, 0, 3)},
                   1e-4);
}

TEST_F(Lower, BigOrIndexDependentGatheredBodiesAreStored) {
  ValueId w = input("w", DType::Float32, ints({6, 3}));
  ValueId ids = input("ids", DType::Int64, ints({4}));
  ValueId big = w;
  for (int k = 0; k < 8; ++k) big = graph.call(k % 2 ? "sin" : "exp", {graph.call("neg", {big})});
  ValueId rows = graph.call("arange", {}, {{"end", int64_t{6}}});
  ValueId counted = graph.call("add", {w, graph.call("unsqueeze", {rows}, {{"dim", int64_t{1}}})});
  graph.setOutputs({graph.call("embedding", {big, ids}), graph.call("embedding", {counted, ids})});
  Program p =
      expectSameValues({random(DType::Float32, {6, 3}, -1, 1), random(DType::Int64, {4}, 0, 6)});
  EXPECT_EQ(countKind(p, BufferKind::Computed), 4u) << print(p); // both sources stored
}

TEST_F(Lower, DropoutDrawsTheInterpretersStreamBitForBit) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(7)});
  ValueId h = input("h", DType::BFloat16, ints({5}));
  ValueId d = input("d", DType::Float64, ints({3, 2}));
  ValueId seed = input("seed", DType::Int64, {});
  ValueId offset = input("offset", DType::Int64, {});
  ValueId xt = graph.call("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  graph.setOutputs(
      {graph.call("dropout", {x, seed, offset}, {{"p", 0.3}}),
       graph.call("dropout", {xt, seed, offset}, {{"p", 0.5}}), // row-major over the result
       graph.call("dropout", {x, seed, offset}, {{"p", 0.0}}),
       graph.call("dropout", {x, seed, offset}, {{"p", 1.0}}),
       graph.call("dropout", {x, seed, offset}, {{"p", 0.7}, {"train", false}}),
       graph.call("dropout", {h, seed, offset}, {{"p", 0.25}}),
       graph.call("dropout", {d, seed, offset}, {{"p", 0.4}})});
  for (auto [s, o] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1234, 7}, {-5, 1LL << 33}}) {
    SCOPED_TRACE(std::to_string(s) + ", " + std::to_string(o));
    Program p = expectSameValues({random(DType::Float32, {6, 7}), random(DType::BFloat16, {5}),
                                  random(DType::Float64, {3, 2}),
                                  HostTensor::fromDoubles(DType::Int64, {}, {double(s)}),
                                  HostTensor::fromDoubles(DType::Int64, {}, {double(o)})},
                                 0);
    EXPECT_EQ(countKind(p, BufferKind::Extern), 0u) << print(p);
    EXPECT_NE(print(p).find("philox_uniform("), std::string::npos) << print(p);
  }
}

TEST_F(Lower, ScatterAddIsAScatterLoopOfItsOwn) {
  sym::Expr rows = table.createBacked(4, {3, sym::kInf}); // index has 3 rows
  ValueId self = input("self", DType::Float32, {rows, table.integer(4)});
  ValueId index = input("index", DType::Int64, ints({3, 4}));
  ValueId src = input("src", DType::Float32, ints({3, 5}));
  ValueId ints32 = input("ints", DType::Int32, {rows, table.integer(4)});
  ValueId isrc = input("isrc", DType::Int32, ints({3, 4}));
  ValueId doubled = graph.call("mul", {self}, {{"other", 2.0}});
  ValueId along0 = graph.call("scatter_add", {doubled, index, src}, {{"dim", int64_t{0}}});
  graph.setOutputs({graph.call("exp", {along0}),
                    graph.call("scatter_add", {self, index, src}, {{"dim", int64_t{-1}}}),
                    graph.call("scatter_add", {ints32, index, isrc}, {{"dim", int64_t{-2}}})});
  // Indices repeat along each dim: additions to one element run in order.
  std::vector<double> idx = {0, 1, 3, 3, 3, 1, 0, 3, 0, 1, 3, 2};
  Program p = expectSameValues({random(DType::Float32, {4, 4}),
                                HostTensor::fromDoubles(DType::Int64, {3, 4}, idx),
                                random(DType::Float32, {3, 5}), random(DType::Int32, {4, 4}, -9, 9),
                                random(DType::Int32, {3, 4}, -9, 9)});
  EXPECT_EQ(countKind(p, BufferKind::Extern), 0u) << print(p);
  Schedule s = schedule(p);
  EXPECT_NE(explain(s, p).find("scatter in order over [3]"), std::string::npos) << explain(s, p);
  for (const Kernel& k : s.kernels) // a scatter is a kernel of its own
    for (BufferId id : k.buffers) {
      if (p.buffers[id].loops.scatter) {
        EXPECT_EQ(k.buffers.size(), 1u) << explain(s, p);
      }
    }
  // Other sizes of rows, and an index out of range: a typed error, from the evaluator and
  // from the kernel alike.
  std::vector<HostTensor> in = {random(DType::Float32, {9, 4}),
                                HostTensor::fromDoubles(DType::Int64, {3, 4}, idx),
                                random(DType::Float32, {3, 5}), random(DType::Int32, {9, 4}, -9, 9),
                                random(DType::Int32, {3, 4}, -9, 9)};
  expectSameValues(in);
  idx[5] = 4;
  in[0] = random(DType::Float32, {4, 4});
  in[1] = HostTensor::fromDoubles(DType::Int64, {3, 4}, idx);
  in[3] = random(DType::Int32, {4, 4}, -9, 9);
  expectIndexError(p, in);
}

// Cross entropy's grad: one value a row scattered into zeros is a body (the
// value where the row's index names the element, else 0) that fuses into its
// readers, and its sum along the row is the value (no reduction over the
// row); its index is still checked.
TEST_F(Lower, ScatterOfOneValueARowIntoZerosIsOneHot) {
  ValueId index = input("index", DType::Int64, ints({6, 1}));
  ValueId src = input("src", DType::Float32, ints({6, 1}));
  ValueId logp = input("logp", DType::Float32, ints({6, 9}));
  ValueId zeros = graph.call("zeros_like", {logp});
  ValueId hot = graph.call("scatter_add", {zeros, index, graph.call("neg", {src})}, {{"dim", int64_t{1}}});
  ValueId rowSum = graph.call("sum", {hot}, {{"dim", std::vector<int64_t>{1}}, {"keepdim", true}});
  ValueId grad = graph.call("sub", {hot, graph.call("mul", {graph.call("exp", {logp}), rowSum})});
  ValueId columns = graph.call("scatter_add", {graph.call("zeros_like", {graph.call("transpose", {logp},
                                                {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}})}),
                                                graph.call("view", {index}, {{"size", std::vector<int64_t>{1, 6}}}),
                                                graph.call("view", {src}, {{"size", std::vector<int64_t>{1, 6}}})},
                               {{"dim", int64_t{0}}});
  graph.setOutputs({grad, columns});
  std::vector<double> idx = {3, 0, 8, 8, 1, 5};
  std::vector<HostTensor> in = {HostTensor::fromDoubles(DType::Int64, {6, 1}, idx),
                                random(DType::Float32, {6, 1}), random(DType::Float32, {6, 9})};
  Program p = expectSameValues(in);
  for (const Buffer& b : p.buffers) EXPECT_FALSE(b.loops.scatter) << print(p);
  std::string text = explain(schedule(p), p);
  EXPECT_EQ(text.find("sum of"), std::string::npos) << text; // the grad: pointwise over [6, 9]
  idx[2] = 9;
  in[0] = HostTensor::fromDoubles(DType::Int64, {6, 1}, idx);
  expectIndexError(p, in);
}

// On CUDA a scatter of f32/f64/i32/i64 adds every element atomically with all
// its loops in parallel (as torch's CUDA index_add_); other dtypes, and the
// "+deterministic" target (torch.use_deterministic_algorithms), keep the
// scatter dim's loop in order.
TEST_F(Lower, CudaScattersAddAtomicallyUnlessDeterministic) {
  ValueId weight = input("weight", DType::Float32, ints({50, 8}));
  ValueId halves = input("halves", DType::BFloat16, ints({50, 8}));
  ValueId index = input("index", DType::Int64, ints({300, 8}));
  ValueId grad = input("grad", DType::Float32, ints({300, 8}));
  graph.setOutputs(
      {graph.call("scatter_add", {weight, index, grad}, {{"dim", int64_t{0}}}),
       graph.call("scatter_add",
                  {halves, index, graph.call("to_dtype", {grad}, {{"dtype", DType::BFloat16}})},
                  {{"dim", int64_t{0}}})});
  Program atomic = lower(graph, lowerOptions(parseTarget("cuda:sm_90")));
  Schedule s = schedule(atomic);
  std::string text = explain(s, atomic);
  EXPECT_EQ(occurrences(text, "scatter in any order (atomics)"), 1u) << text; // the f32 one
  EXPECT_EQ(occurrences(text, "scatter in order over [300]"), 1u) << text;    // bf16: in order
  EXPECT_NE(emitCuda(atomic, s).code.find("kiln_atomic_add(&"), std::string::npos);
  Program ordered = lower(graph, lowerOptions(parseTarget("cuda:sm_90+deterministic")));
  text = explain(schedule(ordered), ordered);
  EXPECT_EQ(occurrences(text, "scatter in order over [300]"), 2u) << text;
  EXPECT_EQ(parseTarget("cuda+deterministic").name(), "cuda:sm_90+deterministic");
  EXPECT_EQ(parseTarget("cpu+deterministic").name(), "cpu"); // the CPU always is
  std::vector<double> rows;
  for (int k = 0; k < 300 * 8; ++k) rows.push_back((k * 7) % 50);
  std::vector<HostTensor> inputs = {random(DType::Float32, {50, 8}), random(DType::BFloat16, {50, 8}),
                                    HostTensor::fromDoubles(DType::Int64, {300, 8}, rows),
                                    random(DType::Float32, {300, 8})};
  expectClose(evaluate(atomic, graph, inputs), ir::interpret(graph, inputs), 1e-5, atomic,
              "evaluated");
  expectSameValues(inputs, 1e-2); // the CPU's, and the CUDA source compiles (NVRTC)
}

TEST_F(Lower, ScatterAddOfZeroAndOneDims) {
  // 0-d and 1-d tensors stand for each other; an empty index adds nothing.
  ValueId scalar = input("scalar", DType::Float64, {});
  ValueId zeros = input("zeros", DType::Int64, ints({3}));
  ValueId src = input("src", DType::Float64, ints({3}));
  ValueId vec = input("vec", DType::Float64, ints({4}));
  ValueId one = input("one", DType::Int64, {});
  ValueId empty = input("empty", DType::Int64, ints({0}));
  graph.setOutputs({graph.call("scatter_add", {scalar, zeros, src}, {{"dim", int64_t{0}}}),
                    graph.call("scatter_add", {vec, one, scalar}, {{"dim", int64_t{0}}}),
                    graph.call("scatter_add", {vec, empty, src}, {{"dim", int64_t{0}}})});
  expectSameValues({random(DType::Float64, {}),
                    HostTensor::fromDoubles(DType::Int64, {3}, {0, 0, 0}),
                    random(DType::Float64, {3}), random(DType::Float64, {4}),
                    HostTensor::fromDoubles(DType::Int64, {}, {2}),
                    HostTensor::fromDoubles(DType::Int64, {0}, {})});
}

// A product's bias add moves into the library's epilogue (addmm: cuBLASLt's
// bias epilogue on CUDA) where the add reads the product alone; a product
// read twice keeps its add.
TEST_F(Lower, BiasAddsOfProductsBecomeAddmm) {
  ValueId x = input("x", DType::Float32, ints({3, 5, 16}));
  ValueId w = input("w", DType::Float32, ints({8, 16}));
  ValueId b = input("b", DType::Float32, ints({8}));
  ValueId w2 = input("w2", DType::Float32, ints({8, 16}));
  ValueId once = graph.call("matmul", {x, transpose(w, 0, 1)});
  ValueId twice = graph.call("matmul", {x, transpose(w2, 0, 1)});
  graph.setOutputs({graph.call("add", {b, once}), graph.call("add", {twice, b}), twice});
  LowerOptions options;
  options.externOps.insert("addmm");
  options.biasEpilogues = true;
  Program p = expectSameValues({random(DType::Float32, {3, 5, 16}), random(DType::Float32, {8, 16}),
                                random(DType::Float32, {8}), random(DType::Float32, {8, 16})},
                               1e-5, options);
  EXPECT_EQ(countExternOp(p, "addmm"), 1u) << print(p);
  EXPECT_EQ(countExternOp(p, "matmul"), 1u) << print(p);
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  EXPECT_EQ(countExternOp(cuda, "addmm"), 1u) << print(cuda);
  EXPECT_EQ(countExternOp(lower(graph, lowerOptions(parseTarget("cpu"))), "addmm"), 0u);
}

// A product over an empty inner dim (nn.Linear of no in-features) is the bias alone: the
// bias epilogue's and the padding's row views name their row count (reshape's -1 has
// none to infer from a last dim of 0).
TEST_F(Lower, ProductsOverAnEmptyInnerDimViewTheirRows) {
  ValueId x = input("x", DType::BFloat16, ints({3, 100, 0}));
  ValueId w = input("w", DType::BFloat16, ints({24, 0}));
  ValueId b = input("b", DType::BFloat16, ints({24}));
  graph.setOutputs({graph.call("add", {graph.call("matmul", {x, transpose(w, 0, 1)}), b}),
                    graph.call("linear", {x, w})});
  std::vector<HostTensor> inputs = {random(DType::BFloat16, {3, 100, 0}),
                                    random(DType::BFloat16, {24, 0}), random(DType::BFloat16, {24})};
  std::vector<HostTensor> expected = ir::interpret(graph, inputs);
  std::vector<HostTensor> padded = ir::interpret(ir::padProducts(graph, 0), inputs);
  std::vector<HostTensor> biased = ir::interpret(biasedProducts(graph), inputs);
  for (size_t k = 0; k < expected.size(); ++k) {
    EXPECT_EQ(padded[k].toDoubles(), expected[k].toDoubles()) << "output " << k;
    EXPECT_EQ(biased[k].toDoubles(), expected[k].toDoubles()) << "output " << k;
  }
  EXPECT_NO_THROW(lower(graph, lowerOptions(parseTarget("cuda"))));
}

// A linear layer's bias grad (dy summed over its rows, autograd's sum before
// the weight grad's product) is the epilogue of the product dy^T @ x on CUDA:
// one cuBLASLt call of two results, no column-sum kernel reading dy again. A
// sum read before its product, or of f32, stays a reduction of its own.
TEST_F(Lower, ABiasGradIsTheEpilogueOfItsWeightGradsProduct) {
  ValueId x = graph.call("reshape", {input("x", DType::BFloat16, ints({4, 16, 24}))},
                         {{"size", ints({64, 24})}});
  auto weightGrad = [&](ValueId dy) {
    ValueId rows = graph.call("reshape", {dy}, {{"size", ints({64, 32})}});
    return graph.call("mm", {transpose(rows, 0, 1), x});
  };
  auto biasGrad = [&](ValueId dy) {
    return graph.call("sum", {dy}, {{"dim", std::vector<int64_t>{0, 1}}});
  };
  ValueId dy = input("dy", DType::BFloat16, ints({4, 16, 32}));
  ValueId db = biasGrad(dy);
  ValueId dw = weightGrad(dy);
  ValueId held = input("held", DType::BFloat16, ints({4, 16, 32}));
  ValueId heldSum = biasGrad(held);
  ValueId doubled = scaled(heldSum, 2); // read before the product
  ValueId heldW = weightGrad(held);
  graph.setOutputs({dw, graph.call("to_dtype", {db}, {{"dtype", DType::Float32}}), heldW, doubled});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string text = explain(schedule(cuda), cuda);
  EXPECT_EQ(occurrences(text, "extern "), 2u) << text;
  EXPECT_EQ(occurrences(text, "with epilogue bias_grad"), 1u) << text;
  EXPECT_NE(text.find("= mm(dy, x) with epilogue bias_grad, and buf"), std::string::npos) << text;
  const Buffer& call = cuda.buffers[cuda.outputs[0].buffer];
  ASSERT_EQ(call.call.results.size(), 1u) << text;
  EXPECT_EQ(cuda.buffers[call.call.results[0]].kind, BufferKind::ExternResult);
  EXPECT_TRUE(cuda.buffers[cuda.outputs[2].buffer].call.results.empty()) << text;
  // The held sum is reductions of its own; the paired one has none left.
  auto sums = [](const Program& p) {
    size_t n = 0;
    for (const Buffer& b : p.buffers)
      n += b.kind == BufferKind::Computed && b.loops.reduce == ReduceOp::Sum;
    return n;
  };
  LowerOptions apart = lowerOptions(parseTarget("cuda"));
  apart.biasEpilogues = false;
  Program unpaired = lower(graph, apart);
  EXPECT_GE(sums(cuda), 1u) << text;
  EXPECT_EQ(sums(unpaired), 2 * sums(cuda)) << explain(schedule(unpaired), unpaired);
  Program cpu = lower(graph, lowerOptions(parseTarget("cpu")));
  EXPECT_EQ(countKind(cpu, BufferKind::ExternResult), 0u);
  expectSameValues({random(DType::BFloat16, {4, 16, 24}), random(DType::BFloat16, {4, 16, 32}),
                    random(DType::BFloat16, {4, 16, 32})},
                   5e-2); // the CPU's values, and the CUDA text compiles to cubin
}

// A graph that writes a tensor in place keeps its products plain: an epilogue
// computes where the product is, which the write between would change (here
// the sum reads dy before add_ writes it, the product after).
TEST_F(Lower, NoEpilogueIsChosenInAGraphThatMutates) {
  ValueId dy = input("dy", DType::BFloat16, ints({64, 32}));
  ValueId x = input("x", DType::BFloat16, ints({64, 24}));
  ValueId db = graph.call("sum", {dy}, {{"dim", std::vector<int64_t>{0}}});
  ValueId written = graph.call("add_", {dy}, {{"other", 1.0}});
  ValueId dw = graph.call("mm", {transpose(dy, 0, 1), x}); // dy as add_ left it
  graph.setOutputs({dw, db, written});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string text = explain(schedule(cuda), cuda);
  EXPECT_EQ(text.find("epilogue"), std::string::npos) << text;
  EXPECT_NE(text.find("(sum of"), std::string::npos) << text;
}

// The same pairing where the rows are a symbolic batch times the sequence.
TEST_F(Lower, ABiasGradOfSymbolicRowsIsTheEpilogueToo) {
  sym::Expr batch = table.createBacked(4, {1, sym::kInf});
  ValueId dy = input("dy", DType::BFloat16, {batch, table.integer(16), table.integer(32)});
  ValueId x = input("x", DType::BFloat16, {batch, table.integer(16), table.integer(24)});
  ValueId db = graph.call("sum", {dy}, {{"dim", std::vector<int64_t>{0, 1}}});
  auto rows = [&](ValueId v, int64_t width) {
    ir::Shape size = {table.integer(-1), table.integer(width)};
    return graph.call("reshape", {v}, {{"size", size}});
  };
  ValueId dw = graph.call("mm", {transpose(rows(dy, 32), 0, 1), rows(x, 24)});
  graph.setOutputs({dw, db});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string text = explain(schedule(cuda), cuda);
  EXPECT_NE(text.find("= mm(dy, x) with epilogue bias_grad, and buf"), std::string::npos) << text;
  EXPECT_EQ(occurrences(text, "kernel "), 0u) << text;
}

// A bias grad whose dy kiln computes (a GELU's backward) is a column sum of
// dy's kernel on CUDA: its threads walk the rows down a few columns each,
// adding up chunks of rows, whose partial sums a small kernel adds up; the
// weight grad's product is plain. Where the sum cannot join dy's kernel (dy
// of a softmax: a row kernel; rows of a symbolic count, split with a bound)
// the product's epilogue sums it, as for a dy the graph takes.
TEST_F(Lower, ABiasGradOfAComputedDyIsAColumnSumOfDysKernel) {
  auto rows = [&](ValueId v, sym::Expr width) {
    return graph.call("reshape", {v}, {{"size", ir::Shape{table.integer(-1), width}}});
  };
  auto linearGrads = [&](ValueId dy, ValueId x) {
    sym::Expr out = graph.meta(dy).sizes.back(), in = graph.meta(x).sizes.back();
    return std::vector<ValueId>{graph.call("mm", {transpose(rows(dy, out), 0, 1), rows(x, in)}),
                                graph.call("sum", {dy}, {{"dim", std::vector<int64_t>{0, 1}}})};
  };
  ValueId x = input("x", DType::BFloat16, ints({4, 256, 24}));
  ValueId dy = graph.call("gelu_backward", {input("g", DType::BFloat16, ints({4, 256, 32})),
                                            input("a", DType::BFloat16, ints({4, 256, 32}))});
  graph.setOutputs(linearGrads(dy, x));
  auto [cuda, plan] = lowerAndSchedule(graph, parseTarget("cuda"));
  std::string text = explain(plan, cuda);
  EXPECT_EQ(text.find("epilogue"), std::string::npos) << text;
  // 4 x 2 chunks of 128 rows (lowering's split), then their partial sums added.
  EXPECT_NE(text.find("kernel 0 over [4, 256, 32]: buf"), std::string::npos) << text;
  EXPECT_NE(text.find("(sum of [128] down the columns)\nextern"), std::string::npos) << text;
  EXPECT_NE(text.find("(sum of [4, 2])\n"), std::string::npos) << text;
  EXPECT_EQ(occurrences(text, "kernel "), 2u) << text;
  ASSERT_FALSE(plan.kernels.empty());
  EXPECT_TRUE(plan.kernels[0].columns);
  EXPECT_FALSE(lower(graph, lowerOptions(parseTarget("cuda"))).kernelBiasGrads.empty());
  // The CPU sums in a split kernel of its own; the CPU's values, and the CUDA text to cubin.
  Program cpu = lower(graph, lowerOptions(parseTarget("cpu")));
  std::string cpuText = explain(schedule(cpu), cpu);
  EXPECT_EQ(cpuText.find("down the columns"), std::string::npos) << cpuText;
  expectSameValues({random(DType::BFloat16, {4, 256, 24}), random(DType::BFloat16, {4, 256, 32}),
                    random(DType::BFloat16, {4, 256, 32})},
                   5e-2);

  graph = ir::Graph(table);
  x = input("x", DType::BFloat16, ints({4, 256, 24}));
  dy = graph.call("softmax", {input("s", DType::BFloat16, ints({4, 256, 32}))},
                  {{"dim", int64_t{-1}}});
  graph.setOutputs(linearGrads(dy, x));
  auto [rowDy, rowPlan] = lowerAndSchedule(graph, parseTarget("cuda"));
  text = explain(rowPlan, rowDy);
  EXPECT_NE(text.find("with epilogue bias_grad"), std::string::npos) << text;
  EXPECT_EQ(text.find("down the columns"), std::string::npos) << text;

  graph = ir::Graph(table);
  sym::Expr batch = table.createBacked(4, {1, sym::kInf});
  x = input("x", DType::BFloat16, {batch, table.integer(256), table.integer(24)});
  dy = graph.call("gelu_backward",
                  {input("g", DType::BFloat16, {batch, table.integer(256), table.integer(32)}),
                   input("a", DType::BFloat16, {batch, table.integer(256), table.integer(32)})});
  graph.setOutputs(linearGrads(dy, x));
  auto [symbolic, symbolicPlan] = lowerAndSchedule(graph, parseTarget("cuda"));
  text = explain(symbolicPlan, symbolic);
  EXPECT_NE(text.find("with epilogue bias_grad"), std::string::npos) << text;
}

// Any column sum of a stored pointwise buffer joins that buffer's flat kernel
// on CUDA, taken from later in the order (past an extern call), but not past
// a mutation, which might write what it reads.
TEST_F(Lower, AColumnSumJoinsItsOperandsFlatKernelUpToAMutation) {
  ValueId x = input("x", DType::Float32, ints({256, 64}));
  ValueId w = input("w", DType::Float32, ints({64, 64}));
  ValueId y = graph.call("exp", {x});
  ValueId product = graph.call("mm", {y, w}); // y is stored for it
  graph.setOutputs({product, graph.call("sum", {y}, {{"dim", std::vector<int64_t>{0}}})});
  auto [cuda, plan] = lowerAndSchedule(graph, parseTarget("cuda"));
  std::string text = explain(plan, cuda);
  EXPECT_NE(text.find("kernel 0 over [256, 64]: buf2 (pointwise []), buf4 (sum of [128] down the "
                      "columns)\nextern buf3 = mm(buf2, w)\nkernel 1 over [64]: buf5 (sum of [2])"),
            std::string::npos)
      << text;
  expectSameValues({random(DType::Float32, {256, 64}), random(DType::Float32, {64, 64})}, 1e-4);

  graph = ir::Graph(table);
  x = input("x", DType::Float32, ints({256, 64}));
  w = input("w", DType::Float32, ints({64, 64}));
  y = graph.call("exp", {x});
  product = graph.call("mm", {y, w});
  ValueId written = graph.call("add_", {w}, {{"other", 1.0}});
  graph.setOutputs({product, written, graph.call("sum", {y}, {{"dim", std::vector<int64_t>{0}}})});
  auto [mutating, mutatingPlan] = lowerAndSchedule(graph, parseTarget("cuda"));
  text = explain(mutatingPlan, mutating);
  EXPECT_EQ(text.find("down the columns"), std::string::npos) << text;
  EXPECT_NE(text.find("(sum of [128])"), std::string::npos) << text;

  // Bools of bytes counted in i64: 16 columns a vector would hold 128 bytes of
  // sums a thread (and 32 KiB of shared memory a sum), so a column a thread.
  graph = ir::Graph(table);
  x = input("x", DType::UInt8, ints({256, 64}));
  ValueId positive = graph.call("gt", {x}, {{"other", int64_t{0}}});
  graph.setOutputs({positive, graph.call("sum", {positive}, {{"dim", std::vector<int64_t>{0}}})});
  auto [counts, countsPlan] = lowerAndSchedule(graph, parseTarget("cuda"));
  text = explain(countsPlan, counts);
  EXPECT_NE(text.find("down the columns"), std::string::npos) << text;
  std::string code = emitCuda(counts, countsPlan).code;
  EXPECT_NE(code.find("int64_t kiln_acc2[1];"), std::string::npos) << code;
  expectSameValues({random(DType::UInt8, {256, 64})}, 0); // and the CUDA text to cubin

  // Columns of a symbolic count: a column a thread, the blocks a chunk counted at run time.
  graph = ir::Graph(table);
  x = input("x", DType::BFloat16, {table.integer(1024), s0});
  y = graph.call("exp", {x});
  graph.setOutputs({y, graph.call("sum", {y}, {{"dim", std::vector<int64_t>{0}}})});
  auto [symbolic, symbolicPlan] = lowerAndSchedule(graph, parseTarget("cuda"));
  text = explain(symbolicPlan, symbolic);
  EXPECT_NE(text.find("kernel 0 over [1024, s0]: buf1 (pointwise []), buf2 (sum of [128] down the "
                      "columns)"),
            std::string::npos)
      << text;
  expectSameValues({random(DType::BFloat16, {1024, 5})}, 5e-2);
}

// A column sum over no rows is no split reduction on CUDA (there are no rows
// to cut into chunks: the split once divided by the zero dim, killing the
// codegen worker): its outputs are zeros.
TEST_F(Lower, AColumnSumOverNoRowsIsNotSplit) {
  ValueId x = input("x", DType::BFloat16, ints({0, 40}));
  graph.setOutputs({graph.call("sum", {x}, {{"dim", std::vector<int64_t>{0}}})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  EXPECT_EQ(countKind(cuda, BufferKind::Computed), 1u) << print(cuda);
  expectSameValues({random(DType::BFloat16, {0, 40})}, 0);
}

// Two softmaxes of one scaled row in one kernel: the first one's rows (the
// scaled row, then its exps) are kept in the output that reads them last, and
// the second softmax still reads the scaled row after the first's exps were
// written: that row must live elsewhere (the CPU emitter's row reuse once read
// the exps there).
TEST_F(Lower, RowsOfTwoReductionsDoNotShareAnOutputTheyStillRead) {
  ValueId x = input("x", DType::Float32, ints({4, 6}));
  ValueId mask = input("mask", DType::Bool, ints({4, 6}));
  ValueId scores = scaled(x, 0.35);
  ValueId masked = graph.call("where", {mask, scores}, {{"other", -1e9}});
  std::vector<Attr> last = {{"dim", int64_t{-1}}};
  graph.setOutputs({graph.call("add", {graph.call("softmax", {masked}, last),
                                       graph.call("softmax", {scores}, last)})});
  Program p = expectSameValues({random(DType::Float32, {4, 6}), random(DType::Bool, {4, 6}, 0, 2)},
                               1e-5);
  EXPECT_EQ(schedule(p).kernels.size(), 1u) << explain(schedule(p), p);
}

// A tanh GELU of a linear layer (f16/bf16) is the epilogue of its product on
// CUDA: one cuBLASLt call writing the pre-activation (which training saves)
// and the gelu, no kernel between. An erf GELU, or one of f32, is a kernel.
TEST_F(Lower, ATanhGeluOfALinearLayerIsItsProductsEpilogue) {
  ValueId x = input("x", DType::BFloat16, ints({4, 16, 32}));
  ValueId w = input("w", DType::BFloat16, ints({48, 32}));
  ValueId b = input("b", DType::BFloat16, ints({48}));
  ValueId h = graph.call("linear", {x, w, b});
  ValueId erf = graph.call("linear", {x, w, b});
  ValueId x32 = input("x32", DType::Float32, ints({4, 16, 32}));
  ValueId w32 = input("w32", DType::Float32, ints({48, 32}));
  ValueId b32 = input("b32", DType::Float32, ints({48}));
  ValueId h32 = graph.call("linear", {x32, w32, b32});
  std::vector<Attr> tanh = {{"approximate", std::string("tanh")}};
  // Kept, but its product is read twice (no addmm): lowered through its decomposition.
  ValueId w2 = input("w2", DType::BFloat16, ints({48, 32}));
  ValueId twice = graph.call("matmul", {x, transpose(w2, 0, 1)});
  ValueId untaken = graph.call("gelu", {graph.call("add", {twice, b})}, tanh);
  graph.setOutputs({graph.call("gelu", {h}, tanh), h, graph.call("gelu", {erf}),
                    graph.call("gelu", {h32}, tanh), untaken, twice});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string text = explain(schedule(cuda), cuda);
  EXPECT_EQ(occurrences(text, "with epilogue gelu_tanh_aux, and buf"), 1u) << text;
  EXPECT_NE(text.find("= addmm(b, x, w) with epilogue gelu_tanh_aux, and buf"), std::string::npos)
      << text;
  // The erf gelu (of the same product: CSE), the f32 one and the untaken one.
  EXPECT_EQ(occurrences(text, "(pointwise [])"), 3u) << text;
  const Buffer& call = cuda.buffers[cuda.outputs[1].buffer];
  ASSERT_EQ(call.call.results.size(), 1u) << text;
  EXPECT_EQ(call.call.results[0], cuda.outputs[0].buffer);
  // The CPU decomposes every gelu.
  Program cpu = lower(graph, lowerOptions(parseTarget("cpu")));
  EXPECT_EQ(countKind(cpu, BufferKind::ExternResult), 0u);
  expectCompilesForCuda();
}

// An extern call's operand computed for it alone moves, with the call and what
// reads its result, after the next pointwise buffers over its ranges and joins
// their kernel (GPT-2's gelu recomputed for a weight grad beside the gelu
// backward: both read the pre-activation); with other work between, nothing moves.
TEST_F(Lower, AProductsOwnOperandJoinsTheNextKernelOverItsRanges) {
  ValueId h = input("h", DType::Float32, ints({16, 64}));
  ValueId dy = input("dy", DType::Float32, ints({16, 32}));
  ValueId da = input("da", DType::Float32, ints({16, 64}));
  ValueId w = input("w", DType::Float32, ints({64, 8}));
  ValueId dw = graph.call("mm", {transpose(dy, 0, 1), graph.call("gelu", {h})});
  ValueId dh = graph.call("mul", {da, graph.call("sigmoid", {h})});
  graph.setOutputs({scaled(dw, 2), graph.call("mm", {dh, w})});
  std::vector<HostTensor> in = {random(DType::Float32, {16, 64}), random(DType::Float32, {16, 32}),
                                random(DType::Float32, {16, 64}), random(DType::Float32, {64, 8})};
  Program p = expectSameValues(in, 1e-5);
  std::string text = explain(schedule(p), p);
  EXPECT_EQ(occurrences(text, "kernel "), 2u) << text;
  EXPECT_EQ(text.find("kernel 0 over [16, 64]: buf"), 0u) << text; // dh, then gelu(h)
  EXPECT_NE(text.find("(pointwise []), buf"), std::string::npos) << text;
  EXPECT_LT(text.find("= mm(dy, buf"), text.find("kernel 1 over [32, 64]")) << text;

  // On CUDA, with the weight grad's bias grad of a computed dy after the product (a
  // column sum of dy's kernel, not the call's epilogue), the operand still moves.
  graph = ir::Graph(table);
  h = input("h", DType::BFloat16, ints({16, 64}));
  dy = scaled(input("g", DType::BFloat16, ints({16, 32})), 2);
  da = input("da", DType::BFloat16, ints({16, 64}));
  w = input("w", DType::BFloat16, ints({64, 8}));
  dw = graph.call("mm", {transpose(dy, 0, 1), graph.call("gelu", {h})});
  ValueId db = graph.call("sum", {dy}, {{"dim", std::vector<int64_t>{0}}});
  dh = graph.call("mul", {da, graph.call("sigmoid", {h})});
  graph.setOutputs({dw, db, graph.call("mm", {dh, w})});
  auto [cuda, plan] = lowerAndSchedule(graph, parseTarget("cuda"));
  text = explain(plan, cuda);
  EXPECT_NE(text.find("down the columns"), std::string::npos) << text;
  EXPECT_EQ(occurrences(text, "over [16, 64]: buf"), 1u) << text; // dh and gelu(h)
}

// A row too long for registers (looped) whose extent is no multiple of a
// 16-byte vector's elements (GPT-2's 50257 logits, rows padded to 50264 by the
// product) reads 16 bytes a load and its last positions one by one.
TEST_F(Lower, LoopedRowsOfOddExtentLoadVectorsThenTheirTail) {
  ValueId x = slice(input("x", DType::BFloat16, ints({4, 40008})), 1, 0, 40001, 1);
  graph.setOutputs({graph.call("amax", {x}, {{"dim", std::vector<int64_t>{-1}}})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  CudaSource source = emitCuda(cuda, schedule(cuda));
  // One row loop by 16-byte vectors, then the tail one by one; static offsets and steps: no
  // twin (the runtime copies a misaligned input).
  EXPECT_EQ(occurrences(source.code, "kiln_jv < 5000;"), 1u) << source.code;
  EXPECT_EQ(occurrences(source.code, "kiln_j = 40000 + kiln_lane; kiln_j < 40001;"), 1u)
      << source.code;
  EXPECT_EQ(source.kernels, (std::vector<std::string>{"kiln_kernel_0"}));
  EXPECT_EQ(source.launches[0].unaligned, -1);
  EXPECT_FALSE(source.launches[0].aligned.empty());
  expectSameValues({random(DType::BFloat16, {4, 40008})}, 0); // the CUDA text compiles to cubin
}

// A padded row (a cat with a few zeros: GPT-2's logits grad, 50257 of a row
// of 50264) loads its values by 16-byte vectors up to the pad, where a load
// under the cat's condition would otherwise be read element by element; the
// positions from the last whole vector before the pad run one by one.
TEST_F(Lower, APaddedRowLoadsByVectorsUpToThePad) {
  ValueId x = input("x", DType::BFloat16, ints({1024, 40001}));
  ValueId wide = graph.call("exp", {graph.call("to_dtype", {x}, {{"dtype", DType::Float32}})});
  ValueId half = graph.call("to_dtype", {wide}, {{"dtype", DType::BFloat16}});
  ValueId zeros = graph.call("zeros", {}, {{"size", ints({1024, 7})}, {"dtype", DType::BFloat16}});
  ValueId padded = graph.call("cat", {half, zeros}, {{"dim", int64_t{1}}});
  std::vector<Attr> last = {{"dim", std::vector<int64_t>{-1}}};
  // Far from the end (a cat of two halves), the second piece's loads stay element by element.
  ValueId y = input("y", DType::BFloat16, ints({1000, 20004}));
  ValueId halves = graph.call("cat", {y, y}, {{"dim", int64_t{1}}});
  graph.setOutputs(
      {padded, graph.call("amax", {padded}, last), halves, graph.call("amax", {halves}, last)});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  CudaSource source = emitCuda(cuda, schedule(cuda));
  std::string code = source.code.substr(source.code.find("extern \"C\""));
  // The padded row (looped: 40008 positions): its 5000 whole vectors before position
  // 40001, then positions 40000..40007, for the cat and for the amax reading it.
  EXPECT_EQ(occurrences(code, "kiln_jv < 5000;"), 2u) << code;
  EXPECT_EQ(occurrences(code, "kiln_j = 40000 + kiln_lane; kiln_j < 40008;"), 2u) << code;
  // Blocks of 1024 threads ask for two a multiprocessor (32 registers a thread).
  EXPECT_EQ(occurrences(code, "__launch_bounds__(1024, 2)"), 2u) << code;
  // The halves' row: every position in vectors (the first piece's bound, 20004, would
  // leave out half the row); the pieces' loads under the cat's condition one by one.
  EXPECT_EQ(occurrences(code, "kiln_jv < 5001;"), 2u) << code;
  // Values: test_cuda_runtime.py on the GPU (the CPU has no vector path).
  expectCompilesForCuda();
}

// Exact GELU's normal cdf, forward and backward, is one call on the GPU (kiln_normal_cdf:
// one polynomial, no erff branches, the 1/sqrt(2) and the halving folded in — bf16 GELU is
// bound by instructions there), and a user's `1 + erf(x)` another (kiln_erf_plus_one); the
// CPU keeps libm's erf.
TEST_F(Lower, ExactGeluOnTheGpuComputesTheNormalCdfInOneCall) {
  ValueId x = input("x", DType::BFloat16, ints({64, 256}));
  ValueId dy = input("dy", DType::BFloat16, ints({64, 256}));
  ValueId y = input("y", DType::Float32, ints({64, 256}));
  graph.setOutputs({graph.call("gelu", {x}), graph.call("gelu_backward", {dy, x}),
                    graph.call("add", {graph.call("erf", {y})}, {{"other", 1.0}})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string code = emitCuda(cuda, schedule(cuda)).code;
  std::string kernels = code.substr(code.find("extern \"C\""));
  size_t sums = occurrences(kernels, "kiln_erf_plus_one("); // one an item of the vector
  EXPECT_GT(sums, 0u) << kernels;
  EXPECT_EQ(occurrences(kernels, "kiln_normal_cdf("), 2 * sums) << kernels;
  EXPECT_EQ(occurrences(kernels, "std::erf("), 0u) << kernels;
  Program cpu = lower(graph, lowerOptions(parseTarget("cpu")));
  std::string cpuCode = emitCpu(cpu, schedule(cpu)).code;
  cpuCode = cpuCode.substr(cpuCode.find("kiln_kernel_0"));
  EXPECT_EQ(occurrences(cpuCode, "kiln_normal_cdf("), 0u);
  EXPECT_EQ(occurrences(cpuCode, "kiln_erf_plus_one("), 0u);
  expectSameValues({random(DType::BFloat16, {64, 256}), random(DType::BFloat16, {64, 256}),
                    random(DType::Float32, {64, 256})},
                   1e-2); // and compiles to cubin
}

// The host's copy of what the GPU's kernels compute for 1 + erf(x) (exp2f standing in for
// ex2.approx) is within 1.5e-7 of libm's everywhere, keeps NaN, and is 0 or 2 where
// f32's 1 + erff(x) is.
TEST(ErfPlusOne, IsWithinAnUlpOfTheSumEverywhere) {
  double worst = 0;
  for (double x = -8; x <= 8; x += 1.0 / 4096) {
    float f = static_cast<float>(x);
    double exact = 1 + std::erf(static_cast<double>(f));
    worst = std::max(worst, std::fabs(erfPlusOne(f) - exact));
  }
  EXPECT_LT(worst, 1.5e-7);
  for (float tiny : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f}) EXPECT_NEAR(erfPlusOne(tiny), 1.0, 1.5e-7);
  EXPECT_EQ(erfPlusOne(INFINITY), 2.0f);
  EXPECT_EQ(erfPlusOne(-INFINITY), 0.0f);
  EXPECT_EQ(erfPlusOne(-4.5f), 0.0f);
  EXPECT_EQ(erfPlusOne(4.5f), 2.0f);
  EXPECT_TRUE(std::isnan(erfPlusOne(NAN)));
  // For x < 0 the sum is erfc(|x|), small: computed as such, it is off by about an ulp of
  // values in [0.5, 1) at most, as 1 + erff(x) is, but relatively by under 2% down to
  // erfc(3.5) ~ 7e-7, where 1 + erff(x) (its error absolute, erff's) is off by several %.
  double worstAbsolute = 0, worstRelative = 0;
  for (double x = -3.5; x < 0; x += 1.0 / 4096) {
    double exact = std::erfc(-x), error = std::fabs(erfPlusOne(static_cast<float>(x)) - exact);
    worstAbsolute = std::max(worstAbsolute, error);
    worstRelative = std::max(worstRelative, error / exact);
  }
  EXPECT_LT(worstAbsolute, 7e-8);
  EXPECT_LT(worstRelative, 2e-2);
}

// The same for the normal cdf (1 + erf(x / sqrt(2))) / 2: within 7.5e-8 of libm's (half
// the sum's bound, an ulp of values in [0.5, 1)), 0 or 1 past the fit, and relatively close
// in the lower tail down to x = -3.5 sqrt(2).
TEST(NormalCdf, IsWithinAnUlpOfTheCdfEverywhere) {
  auto exact = [](double x) { return 0.5 * std::erfc(-x * M_SQRT1_2); };
  double worst = 0;
  for (double x = -11; x <= 11; x += 1.0 / 4096) {
    float f = static_cast<float>(x);
    worst = std::max(worst, std::fabs(normalCdf(f) - exact(f)));
  }
  EXPECT_LT(worst, 7.5e-8);
  for (float tiny : {0.0f, -0.0f, 1e-30f, -1e-30f}) EXPECT_NEAR(normalCdf(tiny), 0.5, 7.5e-8);
  EXPECT_EQ(normalCdf(INFINITY), 1.0f);
  EXPECT_EQ(normalCdf(-INFINITY), 0.0f);
  EXPECT_EQ(normalCdf(-6.0f), 0.0f);
  EXPECT_EQ(normalCdf(6.0f), 1.0f);
  EXPECT_TRUE(std::isnan(normalCdf(NAN)));
  double worstRelative = 0;
  for (double x = -3.5 * M_SQRT2; x < 0; x += 1.0 / 4096) {
    float f = static_cast<float>(x);
    worstRelative = std::max(worstRelative, std::fabs(normalCdf(f) - exact(f)) / exact(f));
  }
  EXPECT_LT(worstRelative, 2e-2);
}

// A row kernel with a 16-byte path takes its accesses as aligned; the runtime checks them per
// launch (Launch::aligned: the input's and the result's row 0, a symbolic row step). Where a
// copy of a misaligned input mends them (static offsets) it reads one; where none can (rows a
// symbolic step apart) the kernel has a twin, element by element, which runs instead. A row
// kept in registers whose vectors divide evenly among the group's threads has no bounds check.
// A row kernel of a known row count takes each thread's row once (the runtime launches a
// block per row, or per a block's rows): no loop over rows, which NVRTC's optimiser pays for;
// a symbolic row count keeps the grid-stride loop.
TEST_F(Lower, RowKernelsOfAKnownRowCountTakeEachRowOnce) {
  ValueId x = input("x", DType::Float32, ints({8, 4096}));
  ValueId y = input("y", DType::Float32, {s0, table.integer(64)});
  graph.setOutputs({graph.call("softmax", {x}, {{"dim", int64_t{-1}}}),
                    graph.call("amax", {y}, {{"dim", std::vector<int64_t>{-1}}})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  CudaSource source = emitCuda(cuda, schedule(cuda));
  ASSERT_EQ(source.units.size(), 2u) << source.code;
  std::string known = source.units[0].find("kiln_row < 8") != std::string::npos ? source.units[0]
                                                                                  : source.units[1];
  std::string symbolic = known == source.units[0] ? source.units[1] : source.units[0];
  EXPECT_EQ(occurrences(known, "if (int kiln_row = (int)blockIdx.x; kiln_row < 8) {"), 1u) << known;
  EXPECT_EQ(occurrences(known, "gridDim"), 0u) << known;
  EXPECT_EQ(occurrences(symbolic, "for (int64_t kiln_row = "), 1u) << symbolic;
  EXPECT_EQ(occurrences(symbolic, "kiln_row += (int64_t)gridDim.x"), 1u) << symbolic;
  expectSameValues({random(DType::Float32, {8, 4096}), random(DType::Float32, {5, 64})}, 1e-6);
}

TEST_F(Lower, RowKernelsWithA16BytePathHaveATwinOnlyWhereNoCopyAlignsThem) {
  ValueId x = input("x", DType::Float32, ints({8, 4096}));
  graph.setOutputs({graph.call("softmax", {x}, {{"dim", int64_t{-1}}})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  CudaSource source = emitCuda(cuda, schedule(cuda));
  // Static offsets, memory of an input or of the run: the runtime copies a misaligned input.
  ASSERT_EQ(source.kernels, (std::vector<std::string>{"kiln_kernel_0"}));
  ASSERT_EQ(source.units.size(), 1u);
  // x's load (the row then stays in registers) and the result's store.
  EXPECT_EQ(occurrences(source.units[0], "= *reinterpret_cast<const uint4*>(kiln_b"), 1u)
      << source.units[0];
  EXPECT_EQ(occurrences(source.units[0], "*reinterpret_cast<uint4*>(kiln_b"), 1u)
      << source.units[0];
  const runtime::Launch& launch = source.launches[0];
  EXPECT_EQ(launch.unaligned, -1);
  ASSERT_EQ(launch.aligned.size(), 2u);
  for (const runtime::AlignedAccess& a : launch.aligned) {
    EXPECT_EQ(a.elementBytes, 4u);
    EXPECT_EQ(a.bytes, 16u);
    EXPECT_EQ(a.offset.asInteger(), std::optional<int64_t>(0));
  }
  EXPECT_NE(launch.aligned[0].buffer, launch.aligned[1].buffer);
  EXPECT_EQ(occurrences(source.code, "kiln_vec"), 0u) << source.code;
  // Three passes over the row (max, sum, store).
  EXPECT_EQ(occurrences(source.units[0], "{ const int kiln_jv = kiln_lane + kiln_t * 512;"), 3u)
      << source.units[0];
  EXPECT_EQ(occurrences(source.units[0], "kiln_jv <"), 0u) << source.units[0];
  expectSameValues({random(DType::Float32, {8, 4096})}, 1e-6); // and compiles to cubin

  // Rows a symbolic step apart: no copy makes every row aligned, so a twin walks them.
  ir::Graph strided{table};
  TensorMeta meta = TensorMeta::contiguous(DType::Float32, ints({8, 4096}), table);
  meta.strides[0] = s0 * 4097;
  ValueId y = strided.placeholder("y", ir::Value(meta));
  strided.setOutputs({strided.call("softmax", {y}, {{"dim", int64_t{-1}}})});
  Program twinned = lower(strided, lowerOptions(parseTarget("cuda")));
  CudaSource withTwin = emitCuda(twinned, schedule(twinned));
  ASSERT_EQ(withTwin.kernels,
            (std::vector<std::string>{"kiln_kernel_0", "kiln_kernel_0_unaligned"}));
  ASSERT_EQ(withTwin.units.size(), 2u);
  EXPECT_EQ(occurrences(withTwin.units[1], "reinterpret_cast"), 0u) << withTwin.units[1];
  EXPECT_EQ(withTwin.launches[0].unaligned, 1);
  EXPECT_TRUE(withTwin.launches[1].aligned.empty());
  EXPECT_TRUE(std::any_of(withTwin.launches[0].aligned.begin(), withTwin.launches[0].aligned.end(),
                          [](const runtime::AlignedAccess& a) { return a.buffer < 0; }));
}

// A row kernel's threads: a warp per row up to 512 elements (4 rows a block of 128), else a
// block per row of 16 elements a thread at most and, up to 512 threads, two 16-byte vectors
// of the stored row a thread (what NVRTC compiles is unrolled per element).
// A block per row holds at most 8 of the row's elements a thread (registers for all of
// an SM's threads), and up to two 16-byte vectors of the stored row a thread.
TEST_F(Lower, RowKernelsHoldAtMostEightElementsAThread) {
  auto threadsOf = [&](DType dtype, int64_t rows, int64_t width) {
    ir::Graph g{table};
    ValueId x =
        g.placeholder("x", ir::Value(TensorMeta::contiguous(dtype, ints({rows, width}), table)));
    g.setOutputs({g.call("softmax", {x}, {{"dim", int64_t{-1}}})});
    Program cuda = lower(g, lowerOptions(parseTarget("cuda")));
    CudaSource source = emitCuda(cuda, schedule(cuda));
    const runtime::Launch& launch = source.launches.at(0);
    return std::make_pair(launch.threads, launch.itemsPerBlock);
  };
  EXPECT_EQ(threadsOf(DType::Float32, 4096, 512), std::make_pair(128u, 4u)); // a warp a row
  EXPECT_EQ(threadsOf(DType::Float32, 4096, 768), std::make_pair(128u, 1u));
  EXPECT_EQ(threadsOf(DType::Float32, 4096, 1024), std::make_pair(128u, 1u));
  EXPECT_EQ(threadsOf(DType::BFloat16, 4096, 1024), std::make_pair(128u, 1u));
  EXPECT_EQ(threadsOf(DType::Float32, 4096, 4096), std::make_pair(512u, 1u));
  EXPECT_EQ(threadsOf(DType::BFloat16, 4096, 4096), std::make_pair(512u, 1u)); // 8 a thread
  EXPECT_EQ(threadsOf(DType::Float32, 4096, 8192), std::make_pair(1024u, 1u));
  EXPECT_EQ(threadsOf(DType::Float32, 4096, 16384), std::make_pair(1024u, 1u));
}

// Target modifier +emulate-precision-casts (Inductor's emulate_precision_casts): a fused
// chain of bf16 ops rounds each op's result as eager does between ops; by default the chain
// keeps its intermediates in f32 (one rounding, at the store).
TEST_F(Lower, EmulatedPrecisionCastsRoundBetweenFusedHalfOps) {
  ValueId x = input("x", DType::BFloat16, ints({64}));
  ValueId y = input("y", DType::BFloat16, ints({64}));
  graph.setOutputs({graph.call("mul", {graph.call("add", {x, y}), y})});
  auto code = [&](const std::string& target) {
    Program p = lower(graph, lowerOptions(parseTarget(target)));
    return std::make_pair(emitCpu(p, schedule(p)).code, emitCuda(p, schedule(p)).code);
  };
  auto [cpuFolded, cudaFolded] = code("cpu");
  auto [cpuRounded, cudaRounded] = code("cpu+emulate-precision-casts");
  // the sum rounded to bf16 and back before the product (kiln_round_b), on every path
  EXPECT_GT(occurrences(cudaRounded, "kiln_round_b("), occurrences(cudaFolded, "kiln_round_b("))
      << cudaRounded;
  EXPECT_GT(occurrences(cpuRounded, "kiln_round_b("), occurrences(cpuFolded, "kiln_round_b("))
      << cpuRounded;
  EXPECT_EQ(parseTarget("cuda+deterministic+emulate-precision-casts").name(),
            "cuda:sm_90+deterministic+emulate-precision-casts");
  EXPECT_EQ(parseTarget("cpu+emulate-precision-casts").name(), "cpu+emulate-precision-casts");
  EXPECT_THROW(parseTarget("cpu+emulate-precision-casts+deterministic"), Error);
  // (Results against eager's: test_kiln_compile.py's emulate_precision_casts test.)
}

// A flat kernel of 16-bit elements (8 a 16-byte vector) runs at most 8 waves of blocks, each
// thread looping (bf16 gelu(x*a+b)*sigmoid(x) on an H100: 92 -> 98% of the copy); f32's and
// row kernels launch an item's worth of blocks each.
TEST_F(Lower, FlatKernelsOf16BitElementsRunAtMostEightWaves) {
  auto wavesOf = [&](DType dtype, bool rows) {
    ir::Graph g{table};
    ValueId x =
        g.placeholder("x", ir::Value(TensorMeta::contiguous(dtype, ints({64, 1024}), table)));
    g.setOutputs({rows ? g.call("softmax", {x}, {{"dim", int64_t{-1}}}) : g.call("sigmoid", {x})});
    Program cuda = lower(g, lowerOptions(parseTarget("cuda")));
    return emitCuda(cuda, schedule(cuda)).launches.at(0).waves;
  };
  EXPECT_EQ(wavesOf(DType::BFloat16, false), 8u);
  EXPECT_EQ(wavesOf(DType::Float16, false), 8u);
  EXPECT_EQ(wavesOf(DType::Float32, false), 0u);
  EXPECT_EQ(wavesOf(DType::BFloat16, true), 0u);
}

// The backward's dq and [dk, dv] of the same operands are one call of two
// results (cuDNN computes all three at once; kiln's kernels, after the rows'
// delta, one each); a [dk, dv] of other attributes stays a call of its own.
// Each flash kernel is a unit of the file of its own.
TEST_F(Lower, AttentionGradsOfTheSameOperandsAreOneCall) {
  std::vector<ValueId> in = inputs({"g", "q", "k", "v", "out"}, DType::BFloat16, ints({2, 3, 40, 64}));
  ValueId g = in[0], q = in[1], k = in[2], v = in[3], out = in[4];
  ValueId lse = input("lse", DType::Float32, ints({2, 3, 40}));
  std::vector<Attr> causal = {{"is_causal", true}};
  graph.setOutputs({graph.call("attention_grad_query", {g, q, k, v, out, lse}, causal),
                    graph.call("attention_grad_key_value", {g, q, k, v, out, lse}, causal),
                    graph.call("attention_grad_key_value", {g, q, k, v, out, lse})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string text = explain(schedule(cuda), cuda);
  EXPECT_EQ(occurrences(text, "extern "), 2u) << text;
  EXPECT_NE(text.find("= attention_grad_query(g, q, k, v, out, lse) by kiln_flash_dq_d64_bf16_causal, "
                      "kiln_flash_dkv_d64_bf16_causal, kiln_flash_delta_d64_bf16, and buf"),
            std::string::npos) << text;
  EXPECT_NE(text.find("= attention_grad_key_value(g, q, k, v, out, lse) by kiln_flash_dkv_d64_bf16, "
                      "kiln_flash_delta_d64_bf16\n"),
            std::string::npos) << text;
  EXPECT_EQ(cuda.outputs[1].buffer, *cuda.buffers[cuda.outputs[0].buffer].call.results.begin());
  // Each kernel a unit with the (guarded) helpers: NVRTC compiles them on CPUs of their own.
  CudaSource source = emitCuda(cuda, schedule(cuda));
  size_t flashUnits = 0;
  for (const std::string& unit : source.units) {
    if (unit.find("kiln_flash_") == std::string::npos) continue;
    ++flashUnits;
    EXPECT_EQ(occurrences(unit, "__global__"), 1u) << unit;
    EXPECT_EQ(occurrences(unit, "#ifndef KILN_FLASH_HELPERS"), 1u);
  }
  EXPECT_EQ(flashUnits, 4u);
  if (!haveNvrtc()) return;
  // The delta kernel compiles; units grouped two to a program keep one copy of the helpers.
  runtime::Artifact artifact = compileArtifact(graph, "cuda", "/tmp");
  size_t deltas = 0;
  for (const std::string& name : artifact.plan.kernels) deltas += name == "kiln_flash_delta_d64_bf16";
  EXPECT_EQ(deltas, 1u);
}

// Training saves attention's rows' logsumexp from the forward (the partitioner
// puts attention_lse beside the attention): on CUDA the flash forward writes it
// as a further result of its one call; an attention_lse of other attributes
// stays a call of its own.
TEST_F(Lower, AFlashForwardWritesTheLogsumexpOfItsOwnInputs) {
  std::vector<ValueId> in = inputs({"q", "k", "v"}, DType::BFloat16, ints({2, 3, 40, 64}));
  ValueId q = in[0], k = in[1], v = in[2];
  std::vector<Attr> causal = {{"is_causal", true}};
  ValueId lse = graph.call("attention_lse", {q, k, v}, causal);
  graph.setOutputs({graph.call("scaled_dot_product_attention", {q, k, v}, causal), lse,
                    graph.call("attention_lse", {q, k, v})});
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string text = explain(schedule(cuda), cuda);
  EXPECT_EQ(occurrences(text, "extern "), 2u) << text;
  EXPECT_NE(text.find("extern buf3 = scaled_dot_product_attention(q, k, v) by "
                      "kiln_flash_fwd_d64_bf16_causal, and buf4\n"),
            std::string::npos) << text;
  EXPECT_NE(text.find("= attention_lse(q, k, v) by kiln_flash_lse_d64_bf16\n"), std::string::npos)
      << text;
  EXPECT_EQ(cuda.buffers[4].kind, BufferKind::ExternResult); // q, k, v are buffers 0..2
  EXPECT_EQ(cuda.outputs[1].buffer, 4u);
  // The CPU computes each by itself.
  Program cpu = lower(graph, lowerOptions(parseTarget("cpu")));
  EXPECT_EQ(countKind(cpu, BufferKind::ExternResult), 0u);
  if (!haveNvrtc()) return;
  runtime::Artifact artifact = compileArtifact(graph, "cuda", "/tmp");
  runtime::Artifact read = runtime::fromBytes(runtime::toBytes(artifact), table);
  size_t withResults = 0;
  for (const runtime::Plan* plan : {&artifact.plan, &read.plan})
    for (const runtime::Step& step : plan->steps)
      if (step.kind == runtime::Step::CallExtern && !step.writes.empty()) {
        EXPECT_EQ(step.op, "scaled_dot_product_attention");
        EXPECT_EQ(step.writes, std::vector<uint32_t>{4});
        ++withResults;
      }
  EXPECT_EQ(withResults, 2u);
}

TEST_F(Lower, AttentionDecomposesToMatmulsAndASoftmaxKernel) {
  sym::Expr heads = table.createBacked(3, {1, sym::kInf});
  ir::Shape q = {table.integer(2), heads, table.integer(5), table.integer(8)};
  ir::Shape kv = {table.integer(2), heads, table.integer(6), table.integer(8)};
  ValueId query = input("q", DType::Float32, q);
  ValueId key = input("k", DType::Float32, kv);
  ValueId value = input("v", DType::Float32, kv);
  ValueId mask = input("mask", DType::Bool, ints({5, 6}));
  ValueId bias = input("bias", DType::Float32, ints({5, 6}));
  const char* op = "scaled_dot_product_attention";
  graph.setOutputs({graph.call(op, {query, key, value}), graph.call(op, {query, key, value, mask}),
                    graph.call(op, {query, key, value, bias}, {{"scale", 0.25}}),
                    graph.call(op, {query, query, query}, {{"is_causal", true}})});
  for (int64_t h : {3, 1}) {
    Program p = expectSameValues(
        {random(DType::Float32, {2, h, 5, 8}), random(DType::Float32, {2, h, 6, 8}),
         random(DType::Float32, {2, h, 6, 8}), random(DType::Bool, {5, 6}, 0, 2),
         random(DType::Float32, {5, 6})},
        1e-4);
    // q @ k^T once for the three attentions of q and k (their masks, bias and scale come
    // after it), q @ q^T, and each one's probabilities @ v.
    EXPECT_EQ(countKind(p, BufferKind::Extern), 6u) << print(p);
    EXPECT_EQ(countExternOp(p, "matmul"), 6u) << print(p);
  }
  // A target with a routine for attention keeps it.
  LowerOptions keep;
  keep.externOps.insert(op);
  EXPECT_EQ(countExternOp(lower(graph, keep), op), 4u) << print(lower(graph, keep));
}

TEST_F(Lower, ProductsBlasDoesNotCoverAreLoopReductions) {
  ValueId h = input("h", DType::Float16, {s0, table.integer(6)});
  ValueId hw = input("hw", DType::Float16, ints({6, 3}));
  ValueId b = input("b", DType::BFloat16, ints({2, 3, 4}));
  ValueId bw = input("bw", DType::BFloat16, ints({2, 4, 5}));
  ValueId i = input("i", DType::Int32, ints({2, 1, 3, 4}));
  ValueId iw = input("iw", DType::Int32, ints({5, 4, 2}));
  ValueId v = input("v", DType::Int64, ints({4}));
  ValueId c = input("c", DType::Int8, ints({2, 8}));
  ValueId ct = graph.call("transpose", {c}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  graph.setOutputs(
      {graph.call("mm", {h, hw}), graph.call("bmm", {b, bw}),
       graph.call("matmul", {i, iw}), // batch dims broadcast
       graph.call("matmul", {v, graph.call("to_dtype", {iw}, {{"dtype", DType::Int64}})}),
       graph.call("matmul", {v, v}),  // a dot: 0-d
       graph.call("matmul", {c, ct}), // wraps, as torch
       graph.call(
           "addmm",
           {graph.call("ones", {}, {{"size", std::vector<int64_t>{3}}, {"dtype", DType::Float16}}),
            h, hw},
           {{"beta", 0.5}})});
  Program p =
      expectSameValues({random(DType::Float16, {4, 6}), random(DType::Float16, {6, 3}),
                        random(DType::BFloat16, {2, 3, 4}), random(DType::BFloat16, {2, 4, 5}),
                        random(DType::Int32, {2, 1, 3, 4}, -9, 9),
                        random(DType::Int32, {5, 4, 2}, -9, 9), random(DType::Int64, {4}, -9, 9),
                        HostTensor::fromDoubles(DType::Int8, {2, 8}, std::vector<double>(16, 100))},
                       1e-2);
  EXPECT_EQ(countKind(p, BufferKind::Extern), 0u) << print(p);
}

// The nodes of `g` that call `op`.
std::vector<const ir::Node*> callsOf(const ir::Graph& g, const std::string& op) {
  std::vector<const ir::Node*> out;
  for (const ir::Node& n : g.nodes())
    if (n.kind == ir::NodeKind::Call && n.target == op) out.push_back(&n);
  return out;
}

// cuBLASLt's Hopper kernels want 16-bit products' dims multiples of 8: odd
// ones are zero-padded (the pads fuse into producers) and the result sliced
// back; the values, and every value's layout, are what they were.
TEST_F(Lower, HalfProductsWithOddDimsReadZeroPaddedOperands) {
  ValueId a = input("a", DType::BFloat16, ints({10, 13}));
  ValueId b = input("b", DType::BFloat16, ints({13, 7}));
  ValueId bias = input("bias", DType::BFloat16, ints({7}));
  ValueId product = graph.call("mm", {a, b});
  graph.setOutputs({product, graph.call("mul", {product}, {{"other", 2.0}}),
                    graph.call("addmm", {bias, a, b})});
  ir::Graph padded = ir::padProducts(graph, 1);
  auto mms = callsOf(padded, "mm");
  ASSERT_EQ(mms.size(), 1u) << ir::print(padded);
  EXPECT_EQ(padded.meta(mms[0]->inputs[0]).sizes, ints({16, 16})) << ir::print(padded);
  EXPECT_EQ(padded.meta(mms[0]->inputs[1]).sizes, ints({16, 8})) << ir::print(padded);
  auto addmms = callsOf(padded, "addmm"); // its bias is read at M x N: its inner dim only
  ASSERT_EQ(addmms.size(), 1u);
  EXPECT_EQ(padded.meta(addmms[0]->inputs[1]).sizes, ints({10, 16})) << ir::print(padded);
  EXPECT_EQ(padded.meta(addmms[0]->inputs[2]).sizes, ints({16, 7})) << ir::print(padded);
  for (size_t k = 0; k < graph.outputs().size(); ++k)
    EXPECT_EQ(padded.value(padded.outputs()[k]), graph.value(graph.outputs()[k]));
  std::vector<HostTensor> inputs = {random(DType::BFloat16, {10, 13}),
                                    random(DType::BFloat16, {13, 7}),
                                    random(DType::BFloat16, {7})};
  std::vector<HostTensor> expected = ir::interpret(graph, inputs);
  std::vector<HostTensor> got = ir::interpret(padded, inputs);
  for (size_t k = 0; k < expected.size(); ++k) // the padding adds exact zeros
    EXPECT_EQ(got[k].toDoubles(), expected[k].toDoubles()) << "output " << k;
  LowerOptions options;
  options.padProductsFrom = 1;
  Program program = lower(graph, options); // the CPU's products are loops: padded, they add zeros
  expectClose(evaluate(program, graph, inputs), evaluate(lower(graph), graph, inputs), 0, program,
              "evaluated, padded");

  // Below the work bound, f32, and aligned products keep their graph.
  EXPECT_EQ(ir::padProducts(graph, 10 * 13 * 7 + 1).size(), graph.size());
  ir::Graph wide(table);
  ValueId wa = wide.placeholder("a", ir::Value(TensorMeta::contiguous(DType::Float32, ints({10, 13}), table)));
  ValueId wb = wide.placeholder("b", ir::Value(TensorMeta::contiguous(DType::Float32, ints({13, 7}), table)));
  wide.setOutputs({wide.call("mm", {wa, wb})});
  EXPECT_EQ(ir::padProducts(wide, 1).size(), wide.size());
}

// A grad read by two products through different views (dX = g @ w over a
// reshape, dW = x^T @ g) is padded once, at the views' source.
TEST_F(Lower, AValueReadByTwoProductsIsPaddedOnce) {
  ValueId g = input("g", DType::BFloat16, ints({16, 13}));
  ValueId w = input("w", DType::BFloat16, ints({13, 8}));
  ValueId x = input("x", DType::BFloat16, ints({16, 8}));
  ValueId g3 = graph.call("reshape", {g}, {{"size", ints({2, 8, 13})}});
  ValueId dx = graph.call("matmul", {g3, w});
  ValueId dw = graph.call("mm", {transpose(x, 0, 1), g});
  graph.setOutputs({dx, transpose(dw, 0, 1)});
  ir::Graph padded = ir::padProducts(graph, 1);
  auto cats = callsOf(padded, "cat");
  ASSERT_EQ(cats.size(), 2u) << ir::print(padded); // g's columns and w's rows
  size_t readingG = 0;
  for (const ir::Node* c : cats) readingG += c->inputs[0] == g;
  EXPECT_EQ(readingG, 1u) << ir::print(padded);
  std::vector<HostTensor> inputs = {random(DType::BFloat16, {16, 13}),
                                    random(DType::BFloat16, {13, 8}),
                                    random(DType::BFloat16, {16, 8})};
  std::vector<HostTensor> expected = ir::interpret(graph, inputs);
  std::vector<HostTensor> got = ir::interpret(padded, inputs);
  for (size_t k = 0; k < expected.size(); ++k)
    EXPECT_EQ(got[k].toDoubles(), expected[k].toDoubles()) << "output " << k;
}

TEST_F(Lower, PrintsBuffersAndBodies) {
  ValueId x = input("x", DType::Float32, {s0, table.integer(3)});
  graph.setOutputs({graph.call("exp", {x})});
  std::string text = print(lower(graph));
  EXPECT_NE(text.find("x : f32[s0, 3] = input 0"), std::string::npos) << text;
  EXPECT_NE(text.find("buf1 : f32[s0, 3] = pointwise [s0, 3]"), std::string::npos) << text;
  EXPECT_NE(text.find("exp(load(x, "), std::string::npos) << text;
  EXPECT_NE(text.find("return (buf1 as f32[s0, 3])"), std::string::npos) << text;
}

// Values the backward saves are graph outputs of the forward: each is stored
// by the kernel that computes it (layer_norm's input sum, its rows' rstd and
// its result: one kernel), where stored after the graph they were kernels of
// their own recomputing them. On CUDA every thread of a row holds the row's
// rstd, which the row's later elements read.
TEST_F(Lower, OutputsAreStoredWhereTheyAreComputed) {
  ir::Shape sizes = ints({6, 96});
  ValueId sum = graph.call("add", {input("x", DType::Float32, sizes), input("r", DType::Float32, sizes)});
  std::vector<int64_t> last = {-1};
  ValueId centered =
      graph.call("sub", {sum, graph.call("mean", {sum}, {{"dim", last}, {"keepdim", true}})});
  ValueId variance =
      graph.call("mean", {graph.call("mul", {centered, centered})}, {{"dim", last}, {"keepdim", true}});
  ValueId rstd = graph.call("rsqrt", {graph.call("add", {variance}, {{"other", 1e-5}})});
  graph.setOutputs({sum, rstd, graph.call("mul", {centered, rstd})});
  Program p = expectSameValues({random(DType::Float32, {6, 96}), random(DType::Float32, {6, 96})}, 1e-5);
  std::string text = explain(schedule(p), p);
  EXPECT_EQ(occurrences(text, "kernel "), 1u) << text;
  Program cuda = lower(graph, lowerOptions(parseTarget("cuda")));
  std::string cudaText = explain(schedule(cuda), cuda);
  EXPECT_EQ(occurrences(cudaText, "kernel "), 1u) << cudaText;
  std::string code = emitCuda(cuda, schedule(cuda)).units.at(0); // (its unaligned twin's alike)
  // rstd, by one thread
  EXPECT_EQ(occurrences(code, "if (kiln_lane == 0) kiln_b"), 1u) << code;
  EXPECT_GE(occurrences(code, "= kiln_r"), 2u) << code; // held, then read from the register
}

// A reshape the graph infers as a view of a strided value (the rows of a
// padded product, regrouped) is a view in lowering too: nothing copies it.
TEST_F(Lower, AReshapeOfStridedRowsIsAView) {
  ValueId rows = slice(input("x", DType::BFloat16, ints({4, 40})), 1, 0, 37, 1);
  ValueId grouped = graph.call("reshape", {rows}, {{"size", ints({2, 2, 37})}});
  ASSERT_FALSE(graph.meta(grouped).isContiguous());
  graph.setOutputs({grouped});
  Program p = expectSameValues({random(DType::BFloat16, {4, 40})}, 0);
  EXPECT_EQ(occurrences(explain(schedule(p), p), "kernel "), 0u) << explain(schedule(p), p);
}

// The GELU backward's kernel with the recomputed activation beside it (as training's
// backward has it, for the weight grad): both take 1 + erf(h / sqrt 2), and NVVM merges
// the two only where kiln_erf_plus_one is straight-line code over an intrinsic. The
// activation then adds no `ex2` to the kernel: the grad's exp and cdf are all of them.
TEST_F(Lower, TheGeluBackwardAndItsRecomputedActivationTakeTheCdfOnce) {
  auto ex2Count = [&](bool withActivation) {
    ir::Graph g{table};
    ValueId grad = g.placeholder(
        "grad", ir::Value(TensorMeta::contiguous(DType::BFloat16, ints({64, 256}), table)));
    ValueId h = g.placeholder(
        "h", ir::Value(TensorMeta::contiguous(DType::BFloat16, ints({64, 256}), table)));
    std::vector<ValueId> outs = {g.call("gelu_backward", {grad, h})};
    if (withActivation) outs.push_back(g.call("gelu", {h}));
    g.setOutputs(outs);
    Program cuda = lower(g, lowerOptions(parseTarget("cuda")));
    Schedule plan = schedule(cuda);
    EXPECT_EQ(plan.kernels.size(), 1u) << explain(plan, cuda);
    return occurrences(compileCudaPtx(emitCuda(cuda, plan).code, "sm_90"), "ex2.approx");
  };
  if (!haveNvrtc()) GTEST_SKIP() << "built without the CUDA toolkit";
  size_t gradOnly = ex2Count(false), both = ex2Count(true);
  EXPECT_GT(gradOnly, 0u);
  EXPECT_EQ(both, gradOnly);
}

} // namespace
} // namespace kiln::codegen
