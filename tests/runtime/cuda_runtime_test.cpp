// The CUDA side of libs/runtime. Without a GPU (here, CI): plans with launches
// on the wire, the typed errors of a machine without a driver, the NVRTC
// compile of the test kernels, the matrix-product shapes. With one (the GPU
// machine; skipped elsewhere): hand-built plans run on the device against a
// host reference, a kernel's index error, cuBLASLt products, CUDA graphs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "cuda_test_plans.h"
#include "kiln/common/error.h"
#include "kiln/runtime/artifact.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/cuda_driver.h"
#include "kiln/runtime/cuda_graph.h"
#include "kiln/sym/range.h"
#include "matrix_product.h"

namespace kiln::runtime {
namespace {

using ir::DType;
using testing::ProductCase;

void expectError(ErrorCode code, const std::string& says, const std::function<void()>& fn) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one saying: " << says;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_NE(e.message().find(says), std::string::npos) << e.message();
  }
}

// --- without a GPU -----------------------------------------------------------

TEST(CudaPlan, LaunchesSurviveTheWire) {
  sym::SymbolTable table;
  std::string cubin = "not a cubin, not read before a run";
  Artifact a = testing::cudaArtifact(testing::gatherPlan(table), cubin, "gather");
  sym::SymbolTable other;
  Artifact b = fromBytes(toBytes(a), other);
  EXPECT_EQ(b.target, "cuda:sm_90");
  EXPECT_EQ(b.library, cubin);
  ASSERT_EQ(b.plan.launches.size(), 1u);
  const Launch& l = b.plan.launches[0];
  EXPECT_EQ(l.itemsPerBlock, 128u);
  EXPECT_EQ(l.threads, 128u);
  EXPECT_EQ(l.buffers, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(l.symbols, (std::vector<uint32_t>{0, 1}));
  EXPECT_TRUE(l.mayFail);
  EXPECT_EQ(sym::evaluate(l.items, {{b.plan.symbols[1], 7}}), 7);
}

// A row kernel's 16-byte path: the accesses it takes as aligned (checked by the runtime per
// launch) and the kernel run instead where one is not; a launch's cap in waves of blocks.
TEST(CudaPlan, AlignedAccessesAndTheUnalignedTwinSurviveTheWire) {
  sym::SymbolTable table;
  Plan plan = testing::gatherPlan(table);
  plan.kernels.push_back("gather_unaligned");
  plan.launches.push_back(plan.launches[0]);
  sym::Expr n = plan.symbols[1];
  plan.launches[0].aligned = {{0, n * 2, 4, 16}, {-1, n, 4, 16}};
  plan.launches[0].unaligned = 1;
  plan.launches[1].waves = 8;
  sym::SymbolTable other;
  Plan read = fromBytes(toBytes(testing::cudaArtifact(plan, "cubin", "gather")), other).plan;
  ASSERT_EQ(read.launches.size(), 2u);
  const Launch& l = read.launches[0];
  EXPECT_EQ(l.unaligned, 1);
  EXPECT_EQ(read.launches[1].unaligned, -1);
  EXPECT_EQ(l.waves, 0u);
  EXPECT_EQ(read.launches[1].waves, 8u);
  ASSERT_EQ(l.aligned.size(), 2u);
  EXPECT_EQ(l.aligned[0].buffer, 0);
  EXPECT_EQ(l.aligned[1].buffer, -1);
  EXPECT_EQ(l.aligned[0].elementBytes, 4u);
  EXPECT_EQ(l.aligned[0].bytes, 16u);
  EXPECT_EQ(sym::evaluate(l.aligned[0].offset, {{read.symbols[1], 3}}), 6);
}

// The runtime's check: each access's address (its buffer's memory plus the offset's bytes, or
// the offset's bytes alone) a multiple of the alignment in this run's binding.
TEST(CudaPlan, AlignedInRunChecksEveryAccessInTheRunsBinding) {
  sym::SymbolTable table;
  sym::Expr n = table.declare("n", std::nullopt, sym::Range::size());
  alignas(16) static char memory[64];
  char* buffers[] = {memory, memory + 4};
  Launch launch;
  launch.aligned = {{0, n + 0, 4, 16}};
  EXPECT_TRUE(alignedInRun(launch, buffers, {{n, 4}}));  // 16 bytes in
  EXPECT_FALSE(alignedInRun(launch, buffers, {{n, 1}})); // 4 bytes in
  launch.aligned = {{1, n + 0, 4, 16}};                  // memory + 4 + 4n
  EXPECT_TRUE(alignedInRun(launch, buffers, {{n, 3}}));
  EXPECT_FALSE(alignedInRun(launch, buffers, {{n, 4}}));
  launch.aligned = {{0, n * 0, 4, 16}, {-1, n + 0, 4, 16}}; // a step between rows of n
  EXPECT_TRUE(alignedInRun(launch, buffers, {{n, 8}}));
  EXPECT_FALSE(alignedInRun(launch, buffers, {{n, 6}}));
  launch.aligned.clear();
  EXPECT_TRUE(alignedInRun(launch, buffers, {}));
}

TEST(CudaPlan, MalformedLaunchesAreRejected) {
  auto reject = [](const std::function<void(Plan&)>& damage, const std::string& says) {
    sym::SymbolTable table;
    Plan plan = testing::gatherPlan(table);
    damage(plan);
    std::string bytes = toBytes(testing::cudaArtifact(plan, "cubin", "bad"));
    sym::SymbolTable other;
    expectError(ErrorCode::Malformed, says, [&] { fromBytes(bytes, other); });
  };
  reject([](Plan& p) { p.launches.push_back(p.launches[0]); }, "2 launches for 1 kernels");
  reject([](Plan& p) { p.launches[0].threads = 0; }, "a launch of 0 threads");
  reject([](Plan& p) { p.launches[0].threads = 2048; }, "a launch of 2048 threads");
  reject([](Plan& p) { p.launches[0].itemsPerBlock = 0; }, "0 items per block");
  reject([](Plan& p) { p.launches[0].buffers.push_back(9); }, "buffer 9 of 3");
  reject([](Plan& p) { p.launches[0].symbols.push_back(5); }, "launch symbol slot 5");
  reject([](Plan& p) { p.launches[0].unaligned = 1; }, "unaligned kernel is 1");
  reject([](Plan& p) { p.launches[0].unaligned = 0; }, "an unaligned kernel with an unaligned");
  reject(
      [](Plan& p) {
        p.launches[0].aligned = {{3, p.launches[0].items, 4, 16}};
      },
      "an aligned access of buffer 3");
  reject(
      [](Plan& p) {
        p.launches[0].aligned = {{0, p.launches[0].items, 4, 12}};
      },
      "4-byte elements to 12 bytes");
  // A CUDA artifact needs a launch per kernel and a cubin when it has kernels.
  sym::SymbolTable table;
  Plan noLaunches = testing::gatherPlan(table);
  noLaunches.launches.clear();
  std::string bytes = toBytes(testing::cudaArtifact(noLaunches, "cubin", "bad"));
  expectError(ErrorCode::Malformed, "1 kernels with 0 launches",
              [&] { LoadedArtifact::load(bytes, "/tmp"); });
  Artifact noCubin = testing::cudaArtifact(testing::gatherPlan(table), "", "bad");
  std::string empty = toBytes(noCubin);
  expectError(ErrorCode::Malformed, "without a cubin",
              [&] { LoadedArtifact::load(empty, "/tmp"); });
  noCubin.target = "rocm:gfx942";
  std::string rocm = toBytes(noCubin);
  expectError(ErrorCode::Unsupported, "target 'rocm:gfx942'",
              [&] { LoadedArtifact::load(rocm, "/tmp"); });
}

TEST(CudaDriver, AMissingDriverIsUnavailable) {
  expectError(ErrorCode::Unavailable,
              "no CUDA driver: libkiln-no-such-driver.so.1 could not be loaded",
              [] { loadCudaDriver("libkiln-no-such-driver.so.1"); });
}

TEST(CudaDriver, WithoutADriverArtifactsLoadButDoNotRun) {
  if (cudaAvailable()) GTEST_SKIP() << "a CUDA driver and device are present";
  sym::SymbolTable table;
  auto loaded = LoadedArtifact::load(
      toBytes(testing::cudaArtifact(testing::scaleAddPlan(table), "cubin", "scale_add")), "/tmp");
  EXPECT_TRUE(loaded->onCuda()); // inspecting needs no driver
  EXPECT_EQ(loaded->artifact().plan.kernels, (std::vector<std::string>{"scale_add"}));
  std::vector<float> x(8);
  int64_t k = 3;
  HostAllocator host;
  expectError(ErrorCode::Unavailable, "no CUDA driver", [&] {
    loaded->run({{DType::Float32, x.data(), {8}, {1}}, {DType::Int64, &k, {}, {}}}, host);
  });
  CudaAllocator device({0, nullptr});
  expectError(ErrorCode::Unavailable, "no CUDA driver", [&] { device.allocate(16); });
  expectError(ErrorCode::Unavailable, "no CUDA driver",
              [&] { loaded->cudaModule()->function(0, 0); });
  expectError(ErrorCode::Unavailable, "no CUDA driver", [&] {
    CudaGraphRunner runner(loaded->artifact().plan, loaded->cudaModule(), {}, host, {0, nullptr});
  });
}

TEST(CudaNvrtc, CompilesTheTestKernelsToACubin) {
  std::string cubin = testing::compileCubin("sm_90");
  ASSERT_GT(cubin.size(), 4u);
  EXPECT_EQ(cubin.substr(0, 4), "\x7f"
                                "ELF");
}

TEST(MatrixProduct, ShapesOfEveryFormOfMatmul) {
  // [2, 1, 5, 7] @ [3, 7, 4] -> [2, 3, 5, 4]: a broadcasts over dim 1, b over dim 0.
  Tensor a{DType::Float32, nullptr, {2, 1, 5, 7}, {35, 35, 7, 1}};
  Tensor b{DType::Float32, nullptr, {3, 7, 4}, {1, 4, 21}}; // each matrix transposed in memory
  Tensor out{DType::Float32, nullptr, {2, 3, 5, 4}, {60, 20, 4, 1}};
  auto p = detail::productShape("matmul", {a, b}, 1, 0, out);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->batchSizes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p->a.batchStrides, (std::vector<int64_t>{35, 0}));
  EXPECT_EQ(p->b.batchStrides, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p->b.matrix.rowStride, 4);
  EXPECT_EQ(p->b.matrix.colStride, 21);
  EXPECT_EQ(p->entries(), 6);
  // A vector times a batch of matrices: one row; a matrix times a vector: one column.
  Tensor v{DType::Float32, nullptr, {7}, {1}};
  auto vb = detail::productShape("matmul", {v, b}, 1, 0, {DType::Float32, nullptr, {3, 4}, {4, 1}});
  ASSERT_TRUE(vb);
  EXPECT_EQ(vb->a.matrix.rows, 1);
  EXPECT_EQ(vb->c.matrix.rows, 1);
  EXPECT_EQ(vb->c.matrix.cols, 4);
  // addmm's bias broadcasts: [n] along rows, [m, 1] along columns.
  Tensor bias{DType::Float32, nullptr, {4}, {1}};
  detail::MatrixLayout l = detail::biasLayout(bias, 5, 4);
  EXPECT_EQ(l.rowStride, 0);
  EXPECT_EQ(l.colStride, 1);
  Tensor column{DType::Float32, nullptr, {5, 1}, {1, 1}};
  EXPECT_EQ(detail::biasLayout(column, 5, 4).colStride, 0);
  EXPECT_EQ(detail::biasLayout(column, 5, 4).rowStride, 1);
  // Mismatched shapes are typed errors, not reads out of bounds.
  expectError(ErrorCode::InvalidArgument, "does not make", [&] {
    detail::productShape(
        "mm",
        {{DType::Float32, nullptr, {5, 7}, {7, 1}}, {DType::Float32, nullptr, {6, 4}, {4, 1}}}, 1,
        0, {DType::Float32, nullptr, {5, 4}, {4, 1}});
  });
  expectError(ErrorCode::InvalidArgument, "does not broadcast", [&] {
    detail::productShape("matmul", {{DType::Float32, nullptr, {2, 5, 7}, {35, 7, 1}}, b}, 1, 0,
                         {DType::Float32, nullptr, {3, 5, 4}, {20, 4, 1}});
  });
  EXPECT_FALSE(detail::productShape("conv2d", {a, b}, 1, 0, out));
}

// --- on a GPU ----------------------------------------------------------------

// Host values of a dtype, as bytes.
uint16_t bf16Of(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits += 0x7fff + ((bits >> 16) & 1); // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}
float ofBf16(uint16_t h) {
  uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// f16 of a float that is 0 or a normal f16 (the tests' values are).
uint16_t f16Of(float f) {
  if (f == 0) return 0;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000, exponent = ((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffff,
           rounded = (mantissa >> 13) + (((mantissa >> 12) & 1) && ((mantissa & 0x2fff) != 0));
  return static_cast<uint16_t>(sign | ((exponent << 10) + rounded));
}
float ofF16(uint16_t h) {
  if ((h & 0x7fff) == 0) return (h & 0x8000) ? -0.0f : 0.0f;
  uint32_t sign = uint32_t{h & 0x8000u} << 16, exponent = ((h >> 10) & 0x1f) - 15 + 127;
  uint32_t bits = sign | (exponent << 23) | (uint32_t{h & 0x3ffu} << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

std::string bytesOf(DType dtype, const std::vector<double>& values) {
  std::string out(values.size() * elementSize(dtype), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    char* at = out.data() + i * elementSize(dtype);
    float f = static_cast<float>(values[i]);
    uint16_t h;
    switch (dtype) {
    case DType::Float32: std::memcpy(at, &f, 4); break;
    case DType::Float64: std::memcpy(at, &values[i], 8); break;
    case DType::BFloat16: h = bf16Of(f), std::memcpy(at, &h, 2); break;
    case DType::Float16: h = f16Of(f), std::memcpy(at, &h, 2); break;
    default: ADD_FAILURE() << "no test values of this dtype";
    }
  }
  return out;
}

double valueAt(DType dtype, const std::string& bytes, size_t i) {
  const char* at = bytes.data() + i * elementSize(dtype);
  float f;
  double d;
  uint16_t h;
  switch (dtype) {
  case DType::Float32: std::memcpy(&f, at, 4); return f;
  case DType::Float64: std::memcpy(&d, at, 8); return d;
  case DType::BFloat16: std::memcpy(&h, at, 2); return ofBf16(h);
  case DType::Float16: std::memcpy(&h, at, 2); return ofF16(h);
  default: return NAN;
  }
}

class CudaDevice : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cudaAvailable()) GTEST_SKIP() << "no CUDA driver or device";
    cubin_ = testing::compileCubin("sm_90");
    scope_ = std::make_unique<CudaContextScope>(0);
  }
  void TearDown() override {
    for (void* p : mine_) allocator_.release(p);
    if (scope_) cudaCheck(cudaDriver().cuStreamSynchronize(nullptr), "cuStreamSynchronize");
  }

  void* upload(const std::string& bytes) {
    void* p = allocator_.allocate(bytes.size());
    mine_.push_back(p);
    cudaCheck(
        cudaDriver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(p), bytes.data(), bytes.size()),
        "cuMemcpyHtoD");
    return p;
  }
  std::string download(const void* p, size_t bytes, CUstream stream = nullptr) {
    std::string out(bytes, '\0');
    const CudaDriver& d = cudaDriver();
    cudaCheck(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
    cudaCheck(d.cuMemcpyDtoH(out.data(), reinterpret_cast<CUdeviceptr>(p), bytes), "cuMemcpyDtoH");
    return out;
  }
  std::shared_ptr<LoadedArtifact> load(const Plan& plan, const std::string& key) {
    return LoadedArtifact::load(toBytes(testing::cudaArtifact(plan, cubin_, key)), "/tmp");
  }
  void release(RunResult& r) {
    for (void* b : r.buffers) allocator_.release(b);
  }

  std::string cubin_;
  std::unique_ptr<CudaContextScope> scope_;
  CudaAllocator allocator_{{0, nullptr}};
  std::vector<void*> mine_;
};

TEST_F(CudaDevice, RunsAPointwiseKernelWithSymbolicInts) {
  sym::SymbolTable table;
  auto loaded = load(testing::scaleAddPlan(table), "scale_add");
  for (int64_t n : {1, 1000, 100000}) {
    std::vector<double> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<double>(i % 97) - 40;
    void* dx = upload(bytesOf(DType::Float32, x));
    int64_t k = 5;
    RunResult r =
        loaded->run({{DType::Float32, dx, {n}, {1}}, {DType::Int64, &k, {}, {}}}, allocator_);
    ASSERT_EQ(r.outputs.size(), 2u);
    std::string y = download(r.outputs[0].data, static_cast<size_t>(n) * 4);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(valueAt(DType::Float32, y, i), 2 * x[i] + 5) << i;
    EXPECT_EQ(*static_cast<const int64_t*>(r.outputs[1].data), n + 5); // host memory
    release(r);
  }
}

// Counts what is outstanding, so tests see every release.
class CountingAllocator : public Allocator {
public:
  explicit CountingAllocator(Allocator& real) : real_(real) {}
  void* allocate(size_t bytes) override {
    void* p = real_.allocate(bytes);
    ++live_[p];
    return p;
  }
  void release(void* data) override {
    ASSERT_EQ(live_.erase(data), 1u) << "released twice or never allocated";
    real_.release(data);
  }
  size_t live() const { return live_.size(); }

private:
  Allocator& real_;
  std::map<void*, int> live_;
};

TEST_F(CudaDevice, AKernelsIndexErrorIsReportedOnceTheGpuGotThere) {
  sym::SymbolTable table;
  auto loaded = load(testing::gatherPlan(table), "gather");
  std::vector<double> x = {10, 11, 12, 13, 14, 15, 16, 17};
  void* dx = upload(bytesOf(DType::Float32, x));
  std::vector<int64_t> good = {7, 0, 3}, bad = {1, 8, 2};
  auto bytes = [](const std::vector<int64_t>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  };
  void* dgood = upload(bytes(good));
  void* dbad = upload(bytes(bad));
  CountingAllocator counting(allocator_);
  RunResult r =
      loaded->run({{DType::Float32, dx, {8}, {1}}, {DType::Int64, dgood, {3}, {1}}}, counting);
  std::string y = download(r.outputs[0].data, 12);
  EXPECT_EQ(valueAt(DType::Float32, y, 0), 17);
  EXPECT_EQ(valueAt(DType::Float32, y, 2), 13);
  for (void* b : r.buffers) counting.release(b);
  // The run does not wait for its kernels: the error comes from checkCudaErrors (or the
  // next run), once; the run's buffers were the caller's to release.
  RunResult failed =
      loaded->run({{DType::Float32, dx, {8}, {1}}, {DType::Int64, dbad, {3}, {1}}}, counting);
  for (void* b : failed.buffers) counting.release(b);
  expectError(ErrorCode::InvalidArgument, "gather: an index is out of range",
              [&] { checkCudaErrors(); });
  checkCudaErrors(); // reported: nothing left
  EXPECT_EQ(counting.live(), 0u);
}

// Runs one extern product on the device and compares with a host reference in double.
class CudaExtern : public CudaDevice {
public:
  void check(const ProductCase& c, double tolerance) {
    sym::SymbolTable table;
    Plan plan = testing::productPlan(table, c);
    auto loaded = load(plan, c.op);
    std::vector<Tensor> inputs;
    std::vector<std::vector<double>> values;
    for (size_t k = 0; k < c.inputs.size(); ++k) {
      std::vector<int64_t> strides;
      for (sym::Expr s : plan.inputs[k].tensor().strides) strides.push_back(*s.asInteger());
      int64_t n = extent(c.inputs[k], strides);
      std::vector<double> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[i] = testing::productInput(static_cast<int64_t>(k), i);
      inputs.push_back({c.dtype, upload(bytesOf(c.dtype, v)), c.inputs[k], strides});
      values.push_back(std::move(v));
    }
    RunResult r = loaded->run(inputs, allocator_);
    const Tensor& out = r.outputs.at(0);
    std::string got = download(out.data, static_cast<size_t>(extent(out.sizes, out.strides)) *
                                             elementSize(c.dtype));
    // The reference: the same shapes on host doubles (the CPU's shape logic).
    std::vector<Tensor> host = inputs;
    for (size_t k = 0; k < host.size(); ++k)
      host[k].data = values[k].data(), host[k].dtype = DType::Float64;
    std::vector<double> expected(got.size() / elementSize(c.dtype));
    Tensor hostOut{DType::Float64, expected.data(), out.sizes, out.strides};
    runExtern(c.op, host, {{"alpha", c.alpha}, {"beta", c.beta}}, hostOut);
    for (double& e : expected) {
      if (c.epilogue == "relu") e = std::max(e, 0.0);
      if (c.epilogue == "gelu_tanh")
        e = 0.5 * e * (1 + std::tanh(0.7978845608028654 * (e + 0.044715 * e * e * e)));
    }
    for (size_t i = 0; i < expected.size(); ++i)
      ASSERT_NEAR(valueAt(c.dtype, got, i), expected[i], tolerance * (1 + std::abs(expected[i])))
          << c.op << " element " << i;
    release(r);
  }
};

TEST_F(CudaExtern, MatrixProductsOfF32MatchTheHost) {
  check({"mm", DType::Float32, {{64, 32}, {32, 48}}, {}, {64, 48}}, 1e-5);
  check({"mm", DType::Float32, {{64, 32}, {32, 48}}, {{}, {1, 32}}, {64, 48}},
        1e-5); // b transposed
  check({"mm", DType::Float32, {{16, 8}, {8, 12}}, {{16, 2}, {}}, {16, 12}},
        1e-5); // a[:, ::2]: copied dense
  check({"bmm", DType::Float32, {{4, 16, 8}, {4, 8, 24}}, {}, {4, 16, 24}}, 1e-5);
  check({"matmul", DType::Float32, {{2, 1, 5, 7}, {3, 7, 4}}, {}, {2, 3, 5, 4}}, 1e-5);
  check({"matmul", DType::Float32, {{7}, {3, 7, 4}}, {}, {3, 4}}, 1e-5);
  check({"matmul", DType::Float32, {{7}, {7}}, {}, {}}, 1e-5);
  check({"matmul", DType::Float32, {{5, 7}, {7}}, {}, {5}}, 1e-5);
}

TEST_F(CudaExtern, AddmmAndEpilogues) {
  // A bias of [n] with beta 1 goes through cuBLASLt's bias epilogue; others are copied first.
  check({"addmm", DType::Float32, {{48}, {64, 32}, {32, 48}}, {}, {64, 48}, 1, 1}, 1e-5);
  check({"addmm", DType::Float32, {{64, 1}, {64, 32}, {32, 48}}, {}, {64, 48}, 2, 0.5}, 1e-5);
  check({"addmm", DType::Float32, {{}, {64, 32}, {32, 48}}, {}, {64, 48}, 1, 3}, 1e-5);
  check({"addmm", DType::Float32, {{48}, {64, 32}, {32, 48}}, {}, {64, 48}, 1, 1, "relu"}, 1e-5);
  check({"mm", DType::Float32, {{64, 32}, {32, 48}}, {}, {64, 48}, 1, 1, "gelu_tanh"}, 1e-3);
}

TEST_F(CudaExtern, HalfAndDoublePrecisions) {
  check({"mm", DType::BFloat16, {{64, 32}, {32, 48}}, {}, {64, 48}}, 1e-2);
  check({"bmm", DType::BFloat16, {{4, 16, 8}, {4, 8, 24}}, {}, {4, 16, 24}}, 1e-2);
  check({"matmul", DType::Float16, {{2, 1, 5, 8}, {3, 8, 4}}, {}, {2, 3, 5, 4}}, 2e-3);
  check({"mm", DType::Float64, {{33, 17}, {17, 9}}, {}, {33, 9}}, 1e-12);
}

TEST_F(CudaDevice, AGraphReplaysWhatTheStaticInputsHold) {
  sym::SymbolTable table;
  Plan plan = testing::scaleThenMatmulPlan(table);
  auto loaded = load(plan, "scale_then_matmul");
  const CudaDriver& d = cudaDriver();
  CUstream stream;
  cudaCheck(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  int64_t n = 32, k = 1;
  std::vector<double> x(32), w(32 * 8);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i % 5) - 2;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(i % 3) - 1;
  void* dx = upload(bytesOf(DType::Float32, x));
  void* dw = upload(bytesOf(DType::Float32, w));
  std::vector<Tensor> inputs = {{DType::Float32, dx, {n}, {1}},
                                {DType::Int64, &k, {}, {}},
                                {DType::Float32, dw, {n, 8}, {8, 1}}};
  CudaAllocator onStream({0, stream});
  auto expected = [&] {
    std::vector<double> z(8, 0);
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 32; ++i) z[j] += (2 * x[i] + k) * w[i * 8 + j];
    return z;
  };
  {
    CudaGraphRunner graph(plan, loaded->cudaModule(), inputs, onStream, {0, stream});
    for (int round = 0; round < 2; ++round) {
      graph.replay();
      std::string z = download(graph.outputs().at(0).data, 32, stream);
      std::vector<double> want = expected();
      for (int j = 0; j < 8; ++j)
        EXPECT_EQ(valueAt(DType::Float32, z, j), want[j]) << round << " " << j;
      for (double& v : x) v = -v; // new values in the static input
      cudaCheck(
          d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dx), bytesOf(DType::Float32, x).data(), 128),
          "cuMemcpyHtoD");
    }
    expectError(ErrorCode::InvalidArgument, "legacy default stream", [&] {
      CudaGraphRunner refused(plan, loaded->cudaModule(), inputs, allocator_, {0, nullptr});
    });
  }
  cudaCheck(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  cudaCheck(d.cuStreamDestroy(stream), "cuStreamDestroy");
}

// A replayed kernel's error is reported as an uncaptured run's: after the GPU got
// there, once, by checkCudaErrors (or a later run or replay).
TEST_F(CudaDevice, AReplaysIndexErrorIsReported) {
  sym::SymbolTable table;
  auto loaded = load(testing::gatherPlan(table), "gather");
  const CudaDriver& d = cudaDriver();
  CUstream stream;
  cudaCheck(d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  std::vector<double> x = {10, 11, 12, 13, 14, 15, 16, 17};
  void* dx = upload(bytesOf(DType::Float32, x));
  std::vector<int64_t> good = {7, 0, 3}, bad = {1, 8, 2};
  void* dindex = upload(std::string(reinterpret_cast<const char*>(good.data()), 24));
  auto write = [&](const std::vector<int64_t>& v) {
    cudaCheck(d.cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(dindex), v.data(), 24), "cuMemcpyHtoD");
  };
  CudaAllocator onStream({0, stream});
  {
    CudaGraphRunner graph(loaded->artifact().plan, loaded->cudaModule(),
                          {{DType::Float32, dx, {8}, {1}}, {DType::Int64, dindex, {3}, {1}}},
                          onStream, {0, stream});
    graph.replay();
    std::string y = download(graph.outputs().at(0).data, 12, stream);
    EXPECT_EQ(valueAt(DType::Float32, y, 0), 17);
    checkCudaErrors(); // a good replay reports nothing
    write(bad);
    graph.replay();
    expectError(ErrorCode::InvalidArgument, "gather: an index is out of range",
                [&] { checkCudaErrors(); });
    write(good);
    graph.replay(); // the status words are zeroed by each replay
    graph.replay();
    checkCudaErrors();
  }
  cudaCheck(d.cuStreamSynchronize(stream), "cuStreamSynchronize");
  cudaCheck(d.cuStreamDestroy(stream), "cuStreamDestroy");
}

} // namespace
} // namespace kiln::runtime
