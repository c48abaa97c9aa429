// The plan interpreter: binding inputs, buffer lifetimes, kernels' statuses
// and extern calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kiln/common/error.h"
#include "kiln/runtime/runtime.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

#include "cuda_test_plans.h" // productInput

namespace kiln::runtime {
namespace {

using ir::DType;

// Counts what is outstanding, so tests see every release.
class CountingAllocator : public Allocator {
public:
  void* allocate(size_t bytes) override {
    void* p = host_.allocate(bytes);
    live_[p] = bytes;
    ++allocations;
    mostLive = std::max(mostLive, live_.size());
    return p;
  }
  void release(void* data) override {
    ASSERT_EQ(live_.erase(data), 1u) << "released twice or never allocated";
    host_.release(data);
  }
  size_t live() const { return live_.size(); }
  size_t allocations = 0;
  size_t mostLive = 0; // buffers live at once, at most

private:
  HostAllocator host_;
  std::map<void*, size_t> live_;
};

// out[i] = 2 * in[i] over n elements (its arguments: in, out; n).
int twice(char* const* buffers, const int64_t* symbols, const uint32_t* args,
          const uint32_t* slots) {
  auto* in = reinterpret_cast<const float*>(buffers[args[0]]);
  auto* out = reinterpret_cast<float*>(buffers[args[1]]);
  for (int64_t i = 0; i < symbols[slots[0]]; ++i) out[i] = 2 * in[i];
  return 0;
}
// out[i] = in[i] + 1 (its arguments: in, out; n).
int plusOne(char* const* buffers, const int64_t* symbols, const uint32_t* args,
            const uint32_t* slots) {
  auto* in = reinterpret_cast<const float*>(buffers[args[0]]);
  auto* out = reinterpret_cast<float*>(buffers[args[1]]);
  for (int64_t i = 0; i < symbols[slots[0]]; ++i) out[i] = in[i] + 1;
  return 0;
}
int divides(char* const*, const int64_t*, const uint32_t*, const uint32_t*) {
  return 1; // as an emitted kernel reports an integer division by zero
}

struct Runtime : ::testing::Test {
  sym::SymbolTable table;
  sym::Expr s0 = table.createBacked(4, {1, sym::kInf});

  ir::TensorMeta vector(sym::Expr n) { return ir::TensorMeta::contiguous(DType::Float32, {n}, table); }
  // A CPU kernel's arguments: these buffers and the symbol s0.
  Launch launch(std::vector<uint32_t> buffers) {
    Launch l;
    l.items = s0;
    l.buffers = std::move(buffers);
    l.symbols = {0};
    return l;
  }

  // x -> y = 2x (freed after use) -> z = y + 1 (the output).
  Plan twoKernels(KernelFn second = plusOne) {
    Plan plan;
    plan.inputs = {ir::Value(vector(s0))};
    plan.buffers = {{"x", vector(s0), 0}, {"y", vector(s0), -1}, {"z", vector(s0), -1}};
    plan.kernels = {"twice", second == plusOne ? "plus_one" : "divides"};
    plan.symbols = {s0};
    plan.launches = {launch({0, 1}), launch({1, 2})};
    Step first;
    first.kernel = 0;
    first.writes = {1};
    Step then;
    then.kernel = 1;
    then.writes = {2};
    Step free;
    free.kind = Step::Free;
    free.buffer = 1;
    plan.steps = {first, then, free};
    plan.outputs = {{2, vector(s0), {}}};
    return plan;
  }
  KernelLookup kernels() {
    return [](const std::string& name) -> KernelFn {
      if (name == "twice") return twice;
      if (name == "plus_one") return plusOne;
      return divides;
    };
  }
  // twoKernels, then w = 2z: a buffer laid out as `w` written by the kernel `name` (twice).
  Plan thenTwiceZ(const ir::TensorMeta& w, const std::string& name) {
    Plan plan = twoKernels();
    plan.buffers.push_back({"w", w, -1});
    plan.kernels.push_back(name);
    plan.launches.push_back(launch({2, 3}));
    Step third;
    third.kernel = 2;
    third.writes = {3};
    plan.steps.push_back(third);
    return plan;
  }
};

TEST_F(Runtime, RunsStepsAndHandsTheOutputsOver) {
  std::vector<float> x = {1, 2, 3};
  CountingAllocator allocator;
  RunResult r = run(twoKernels(), kernels(), {{DType::Float32, x.data(), {3}, {1}}}, allocator);
  ASSERT_EQ(r.outputs.size(), 1u);
  auto* z = static_cast<float*>(r.outputs[0].data);
  EXPECT_EQ(std::vector<float>(z, z + 3), (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(allocator.allocations, 2u);
  EXPECT_EQ(allocator.live(), 1u); // y was freed, z is the caller's
  ASSERT_EQ(r.buffers.size(), 1u);
  allocator.release(r.buffers[0]);
}

TEST_F(Runtime, FreedIntermediatesAreReusedWithinARun) {
  // x -> y = 2x -> z = y + 1 (y freed) -> w = 2z into y's old memory -> output w.
  Plan plan = thenTwiceZ(vector(s0), "twice_z");
  Step freeZ;
  freeZ.kind = Step::Free;
  freeZ.buffer = 2;
  plan.steps.push_back(freeZ);
  plan.outputs = {{3, vector(s0), {}}};
  KernelLookup lookup = [&](const std::string& name) -> KernelFn {
    if (name == "twice_z") return twice; // the same function on other arguments
    return kernels()(name);
  };
  std::vector<float> x = {1, 2, 3};
  CountingAllocator allocator;
  RunResult r = run(plan, lookup, {{DType::Float32, x.data(), {3}, {1}}}, allocator);
  auto* w = static_cast<float*>(r.outputs.at(0).data);
  EXPECT_EQ(std::vector<float>(w, w + 3), (std::vector<float>{6, 10, 14}));
  EXPECT_EQ(allocator.allocations, 2u) << "w should take y's freed memory";
  EXPECT_EQ(allocator.live(), 1u); // z's memory went back when freed; w is the caller's
  for (void* b : r.buffers) allocator.release(b);
}

TEST_F(Runtime, FreedIntermediatesNoLaterBufferTakesGoBackAtOnce) {
  // x -> y = 2x -> z = y + 1 (y freed) -> w = 2z, of another size: y's memory is
  // released when freed rather than held to the run's end.
  ir::TensorMeta wide = ir::TensorMeta::contiguous(DType::Float64, {s0}, table);
  Plan plan = thenTwiceZ(wide, "twice");
  plan.outputs = {{2, vector(s0), {}}, {3, wide, {}}};
  std::vector<float> x = {1, 2, 3};
  CountingAllocator allocator;
  RunResult r = run(plan, kernels(), {{DType::Float32, x.data(), {3}, {1}}}, allocator);
  auto* w = static_cast<float*>(r.outputs.at(1).data);
  EXPECT_EQ(std::vector<float>(w, w + 3), (std::vector<float>{6, 10, 14}));
  EXPECT_EQ(allocator.allocations, 3u);
  EXPECT_EQ(allocator.mostLive, 2u) << "y should be gone before w is allocated";
  for (void* b : r.buffers) allocator.release(b);
  EXPECT_EQ(allocator.live(), 0u);
}

// A buffer handed out whole as one output comes from allocateOutput, with that
// output's layout; intermediates, and a buffer an output views only in part,
// come from allocate.
TEST_F(Runtime, AWholeOutputIsAllocatedAsThatOutput) {
  struct Recording : CountingAllocator {
    void* allocateOutput(size_t bytes, const Tensor& layout) override {
      made.push_back(layout);
      return allocate(bytes);
    }
    std::vector<Tensor> made;
  };
  // w of another size than y: y's freed memory goes back rather than to w.
  ir::TensorMeta wide = ir::TensorMeta::contiguous(DType::Float64, {s0}, table);
  Plan plan = thenTwiceZ(wide, "twice");
  ir::TensorMeta head = ir::TensorMeta::contiguous(DType::Float32, {table.integer(2)}, table);
  plan.outputs = {{2, head, {}}, {3, wide, {}}}; // z's first two elements, all of w
  std::vector<float> x = {1, 2, 3};
  Recording allocator;
  RunResult r = run(plan, kernels(), {{DType::Float32, x.data(), {3}, {1}}}, allocator);
  ASSERT_EQ(allocator.made.size(), 1u) << "only w is an output whole";
  EXPECT_EQ(allocator.made[0].dtype, DType::Float64);
  EXPECT_EQ(allocator.made[0].sizes, (std::vector<int64_t>{3}));
  EXPECT_EQ(allocator.made[0].strides, (std::vector<int64_t>{1}));
  EXPECT_EQ(allocator.allocations, 3u); // y, z, and w through allocateOutput
  auto* w = static_cast<float*>(r.outputs.at(1).data);
  EXPECT_EQ(std::vector<float>(w, w + 3), (std::vector<float>{6, 10, 14}));
  for (void* b : r.buffers) allocator.release(b);
  EXPECT_EQ(allocator.live(), 0u);
}

// A given-up input's memory is taken over by the buffer that may reuse it only where it is
// 16-byte aligned: a kernel's 16-byte path takes the run's own memory as aligned.
TEST_F(Runtime, AGivenUpInputIsAdoptedOnlyWhereAligned) {
  struct Adopting : CountingAllocator {
    bool adopt(int32_t, void* data, size_t) override {
      adopted.push_back(data);
      return true;
    }
    void release(void* data) override {
      if (std::find(adopted.begin(), adopted.end(), data) == adopted.end())
        CountingAllocator::release(data);
    }
    std::vector<void*> adopted;
  };
  Plan plan = twoKernels(); // y = 2x may take x's memory
  plan.buffers[1].reuses = 0;
  alignas(16) float memory[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (size_t offset : {0, 1}) { // x at memory (aligned), then 4 bytes past it
    float* x = memory + offset;
    std::vector<float> given(x, x + 3);
    Adopting allocator;
    RunResult r = run(plan, kernels(), {{DType::Float32, x, {3}, {1}}}, allocator);
    auto* z = static_cast<float*>(r.outputs.at(0).data);
    EXPECT_EQ(std::vector<float>(z, z + 3),
              (std::vector<float>{2 * given[0] + 1, 2 * given[1] + 1, 2 * given[2] + 1}));
    EXPECT_EQ(allocator.adopted, offset == 0 ? std::vector<void*>{x} : std::vector<void*>{});
    EXPECT_EQ(allocator.allocations, offset == 0 ? 1u : 2u); // z, and y where x is not taken
    for (void* b : r.buffers) allocator.release(b);
    EXPECT_EQ(allocator.live(), 0u);
    std::copy(given.begin(), given.end(), x); // y wrote over x where it took it
  }
}

TEST_F(Runtime, AFailingKernelReleasesEverything) {
  std::vector<float> x = {1, 2};
  CountingAllocator allocator;
  try {
    run(twoKernels(divides), kernels(), {{DType::Float32, x.data(), {2}, {1}}}, allocator);
    FAIL() << "ran past a kernel's error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.message().find("division by zero"), std::string::npos) << e.message();
  }
  EXPECT_EQ(allocator.live(), 0u);
}

TEST_F(Runtime, BindsSymbolsAndNamesWhatDisagrees) {
  sym::Expr s1 = table.createBacked(3, {2, 10});
  std::vector<ir::Value> inputs = {
      ir::Value(ir::TensorMeta::contiguous(DType::Float32, {s0, s1}, table)),
      ir::Value(ir::TensorMeta::contiguous(DType::Float32, {s1}, table)),
      ir::Value(s0)};
  std::vector<float> a(12), b(3);
  int64_t four = 4, five = 5;
  sym::Binding binding = bindInputs(
      inputs, {{DType::Float32, a.data(), {4, 3}, {3, 1}}, {DType::Float32, b.data(), {3}, {1}},
               {DType::Int64, &four, {}, {}}});
  EXPECT_EQ(binding.at(s0), 4);
  EXPECT_EQ(binding.at(s1), 3);
  auto expectInvalid = [&](std::vector<Tensor> tensors, const std::string& says) {
    try {
      bindInputs(inputs, tensors);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(e.message().find(says), std::string::npos) << e.message();
    }
  };
  Tensor good0{DType::Float32, a.data(), {4, 3}, {3, 1}}, good1{DType::Float32, b.data(), {3}, {1}};
  Tensor scalar{DType::Int64, &four, {}, {}};
  expectInvalid({good0, {DType::Float32, b.data(), {2}, {1}}, scalar}, "input 1: size 2");
  expectInvalid({good0, {DType::Float64, b.data(), {3}, {1}}, scalar}, "dtype f64");
  expectInvalid({good0, good1, {DType::Int64, &five, {}, {}}}, "input 2: 5, expected s0");
  expectInvalid({{DType::Float32, a.data(), {4, 3}, {1, 4}}, good1, scalar}, "stride");
  expectInvalid({{DType::Float32, a.data(), {1, 12}, {12, 1}}, {DType::Float32, b.data(), {12}, {1}},
                 {DType::Int64, &four, {}, {}}},
                "outside its range");
  expectInvalid({good0, good1}, "3 inputs expected, got 2");
}

TEST_F(Runtime, ExternMatrixProductsMatchTheInterpreter) {
  // addmm with a broadcast bias, beta and alpha, B transposed: BLAS where built
  // with it; the same values either way.
  std::vector<float> bias = {1, -1}, a = {1, 2, 3, 4, 5, 6}, bT = {1, 0, 1, 0, 1, 1}, out(6);
  std::vector<ir::Attr> attrs = {{"beta", 0.5}, {"alpha", 2.0}};
  runExtern("addmm",
            {{DType::Float32, bias.data(), {2}, {1}}, {DType::Float32, a.data(), {3, 2}, {2, 1}},
             {DType::Float32, bT.data(), {2, 2}, {1, 3}}},
            attrs, {DType::Float32, out.data(), {3, 2}, {2, 1}});
  // a @ b where b = [[1, 0], [0, 1]] read column-major from bT's first 4 elements ...
  std::vector<float> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) {
      float dot = 0;
      for (int k = 0; k < 2; ++k) dot += a[i * 2 + k] * bT[j * 3 + k];
      expected.push_back(0.5f * bias[j] + 2 * dot);
    }
  EXPECT_EQ(out, expected);
  // Products of other dtypes are loops of their own (codegen lowers them): no routine here.
  std::vector<int64_t> ia = {1, 2, 3, 4}, ib = {1, 1, 1, 1}, iout(4);
  EXPECT_THROW(runExtern("mm",
                         {{DType::Int64, ia.data(), {2, 2}, {2, 1}},
                          {DType::Int64, ib.data(), {2, 2}, {2, 1}}},
                         {}, {DType::Int64, iout.data(), {2, 2}, {2, 1}}),
               Error);
}

TEST_F(Runtime, ExternMatmulTakesEveryFormOfTorchMatmul) {
  // [2, 1, 2, 3] @ [4, 3, 1] -> [2, 4, 2, 1]: batch dims broadcast, b's last dim is 1;
  // then a vector times a batch of matrices, and a dot product.
  std::vector<double> a(12), b(12), v = {1, -2, 3};
  for (size_t i = 0; i < a.size(); ++i) a[i] = double(i) - 5, b[i] = 0.5 * double(i);
  std::vector<double> out(16), expected;
  runExtern("matmul",
            {{DType::Float64, a.data(), {2, 1, 2, 3}, {6, 6, 3, 1}},
             {DType::Float64, b.data(), {4, 3, 1}, {3, 1, 1}}},
            {}, {DType::Float64, out.data(), {2, 4, 2, 1}, {8, 2, 1, 1}});
  for (int x = 0; x < 2; ++x)
    for (int y = 0; y < 4; ++y)
      for (int i = 0; i < 2; ++i) {
        double dot = 0;
        for (int k = 0; k < 3; ++k) dot += a[x * 6 + i * 3 + k] * b[y * 3 + k];
        expected.push_back(dot);
      }
  EXPECT_EQ(out, expected);
  std::vector<double> vb(4), vbExpected; // [3] @ [4, 3, 1] -> [4, 1]
  runExtern(
      "matmul",
      {{DType::Float64, v.data(), {3}, {1}}, {DType::Float64, b.data(), {4, 3, 1}, {3, 1, 1}}}, {},
      {DType::Float64, vb.data(), {4, 1}, {1, 1}});
  for (int y = 0; y < 4; ++y)
    vbExpected.push_back(v[0] * b[y * 3] + v[1] * b[y * 3 + 1] + v[2] * b[y * 3 + 2]);
  EXPECT_EQ(vb, vbExpected);
  double dot = 0; // [3] @ [3] strided -> 0-d
  runExtern("matmul", {{DType::Float64, v.data(), {3}, {1}}, {DType::Float64, b.data(), {3}, {4}}},
            {}, {DType::Float64, &dot, {}, {}});
  EXPECT_EQ(dot, v[0] * b[0] + v[1] * b[4] + v[2] * b[8]);
}

TEST_F(Runtime, ExternMatmulOfTheCudaTestsBroadcastCase) {
  // CudaExtern's [2, 1, 5, 8] @ [3, 8, 4] -> [2, 3, 5, 4] on its inputs, against a naive
  // loop: the inputs stay in [-1, 1] (f16 holds them), the result is torch's.
  std::vector<double> a(2 * 5 * 8), b(3 * 8 * 4), out(2 * 3 * 5 * 4), expected;
  for (size_t i = 0; i < a.size(); ++i) a[i] = testing::productInput(0, int64_t(i));
  for (size_t i = 0; i < b.size(); ++i) b[i] = testing::productInput(1, int64_t(i));
  for (double v : a) ASSERT_LE(std::abs(v), 1);
  for (double v : b) ASSERT_LE(std::abs(v), 1);
  runExtern("matmul",
            {{DType::Float64, a.data(), {2, 1, 5, 8}, {40, 40, 8, 1}},
             {DType::Float64, b.data(), {3, 8, 4}, {32, 4, 1}}},
            {}, {DType::Float64, out.data(), {2, 3, 5, 4}, {60, 20, 4, 1}});
  for (int x = 0; x < 2; ++x)
    for (int y = 0; y < 3; ++y)
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 4; ++j) {
          double dot = 0;
          for (int k = 0; k < 8; ++k) dot += a[x * 40 + i * 8 + k] * b[y * 32 + k * 4 + j];
          expected.push_back(dot);
        }
  EXPECT_EQ(out, expected);
  EXPECT_EQ(out[0], 100.0 / 64);
}

} // namespace
} // namespace kiln::runtime
