#include "cuda_test_plans.h"

#include <nvrtc.h>

#include "kiln/common/error.h"
#include "kiln/sym/range.h"

namespace kiln::runtime::testing {

const char* const kKernelSource = R"(
extern "C" __global__ void scale_add(const float* x, float* y, long long n, long long k, int* status) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    y[i] = 2.0f * x[i] + (float)k;
}
extern "C" __global__ void gather(const float* x, const long long* index, float* y, long long n,
                                  long long m, int* status) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < m;
       i += (long long)gridDim.x * blockDim.x) {
    long long j = index[i];
    if (j < 0 || j >= n) { *status = 2; y[i] = 0.0f; continue; }
    y[i] = x[j];
  }
}
)";

std::string compileCubin(const std::string& arch) {
  auto check = [](nvrtcResult r, const char* call) {
    if (r != NVRTC_SUCCESS)
      throw Error(ErrorCode::Internal, std::string(call) + ": " + nvrtcGetErrorString(r));
  };
  nvrtcProgram program;
  check(nvrtcCreateProgram(&program, kKernelSource, "kiln_test_kernels.cu", 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::string option = "--gpu-architecture=" + arch;
  const char* options[] = {option.c_str()};
  nvrtcResult compiled = nvrtcCompileProgram(program, 1, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, log.data());
    nvrtcDestroyProgram(&program);
    throw Error(ErrorCode::Internal, "nvrtcCompileProgram: " + log);
  }
  size_t size = 0;
  check(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  std::string cubin(size, '\0');
  check(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&program);
  return cubin;
}

namespace {

ir::TensorMeta onCuda(ir::TensorMeta meta) {
  meta.device = {ir::DeviceType::Cuda, 0};
  return meta;
}

ir::TensorMeta contiguous(sym::SymbolTable& table, ir::DType dtype, ir::Shape sizes) {
  return onCuda(ir::TensorMeta::contiguous(dtype, std::move(sizes), table));
}

Step kernelStep(uint32_t kernel, std::vector<uint32_t> writes) {
  Step s;
  s.kernel = kernel;
  s.writes = std::move(writes);
  return s;
}

} // namespace

Plan scaleAddPlan(sym::SymbolTable& table) {
  sym::Expr s0 = table.createBacked(8, {1, sym::kInf}), s1 = table.createBacked(3, {0, sym::kInf});
  ir::TensorMeta vector = contiguous(table, ir::DType::Float32, {s0});
  Plan plan;
  plan.inputs = {ir::Value(vector), ir::Value(s1)};
  plan.buffers = {{"x", vector, 0}, {"y", vector, -1}};
  plan.kernels = {"scale_add"};
  plan.symbols = {s0, s1};
  plan.launches = {{s0, 256, 256, 0, {0, 1}, {0, 1}, false}};
  plan.steps = {kernelStep(0, {1})};
  plan.outputs = {{1, vector, {}}, {0, {}, s0 + s1}};
  return plan;
}

Plan gatherPlan(sym::SymbolTable& table) {
  sym::Expr s0 = table.createBacked(8, {1, sym::kInf}), s1 = table.createBacked(5, {1, sym::kInf});
  ir::TensorMeta x = contiguous(table, ir::DType::Float32, {s0});
  ir::TensorMeta index = contiguous(table, ir::DType::Int64, {s1});
  ir::TensorMeta y = contiguous(table, ir::DType::Float32, {s1});
  Plan plan;
  plan.inputs = {ir::Value(x), ir::Value(index)};
  plan.buffers = {{"x", x, 0}, {"index", index, 1}, {"y", y, -1}};
  plan.kernels = {"gather"};
  plan.symbols = {s0, s1};
  plan.launches = {{s1, 128, 128, 0, {0, 1, 2}, {0, 1}, true}};
  plan.steps = {kernelStep(0, {2})};
  plan.outputs = {{2, y, {}}};
  return plan;
}

Plan productPlan(sym::SymbolTable& table, const ProductCase& c) {
  auto shape = [&](const std::vector<int64_t>& sizes) {
    ir::Shape out;
    for (int64_t s : sizes) out.push_back(table.integer(s));
    return out;
  };
  Plan plan;
  Step call;
  call.kind = Step::CallExtern;
  call.op = c.op;
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    ir::TensorMeta meta = contiguous(table, c.dtype, shape(c.inputs[k]));
    if (k < c.strides.size() && !c.strides[k].empty()) meta.strides = shape(c.strides[k]);
    plan.inputs.push_back(ir::Value(meta));
    plan.buffers.push_back({"in" + std::to_string(k), meta, static_cast<int32_t>(k)});
    call.inputs.push_back({static_cast<uint32_t>(k), meta, {}});
  }
  ir::TensorMeta out = contiguous(table, c.dtype, shape(c.out));
  plan.buffers.push_back({"out", out, -1});
  call.buffer = static_cast<uint32_t>(c.inputs.size());
  if (c.op == "addmm") call.attrs = {{"beta", c.beta}, {"alpha", c.alpha}};
  if (!c.epilogue.empty()) call.attrs.push_back({"epilogue", c.epilogue});
  plan.steps = {call};
  plan.outputs = {{call.buffer, out, {}}};
  return plan;
}

Plan scaleThenMatmulPlan(sym::SymbolTable& table) {
  sym::Expr s0 = table.createBacked(32, {2, sym::kInf}), s1 = table.createBacked(1, {0, sym::kInf});
  ir::TensorMeta x = contiguous(table, ir::DType::Float32, {s0});
  ir::TensorMeta w = contiguous(table, ir::DType::Float32, {s0, table.integer(8)});
  ir::TensorMeta z = contiguous(table, ir::DType::Float32, {table.integer(8)});
  Plan plan;
  plan.inputs = {ir::Value(x), ir::Value(s1), ir::Value(w)};
  plan.buffers = {{"x", x, 0}, {"w", w, 2}, {"y", x, -1}, {"z", z, -1}};
  plan.kernels = {"scale_add"};
  plan.symbols = {s0, s1};
  plan.launches = {{s0, 256, 256, 0, {0, 2}, {0, 1}, false}};
  Step matmul;
  matmul.kind = Step::CallExtern;
  matmul.op = "matmul";
  matmul.buffer = 3;
  matmul.inputs = {{2, x, {}}, {1, w, {}}};
  Step free;
  free.kind = Step::Free;
  free.buffer = 2;
  plan.steps = {kernelStep(0, {2}), matmul, free};
  plan.outputs = {{3, z, {}}};
  return plan;
}

Artifact cudaArtifact(const Plan& plan, const std::string& cubin, const std::string& key) {
  Artifact a;
  a.target = "cuda:sm_90";
  a.key = key;
  a.plan = plan;
  a.source = kKernelSource;
  a.library = plan.kernels.empty() ? std::string() : cubin;
  a.explain = "hand-built test plan " + key;
  return a;
}

} // namespace kiln::runtime::testing
