// kiln-run-program: runs an exported program (kiln.export's `.kiln` file) from C++,
// without Python: loads it, compiles it through a running stack, checks and runs
// it on tensor files (schemas/program.capnp TensorData, one per user input, in
// the program's input order) and writes each output to a tensor file.
//
//   kiln-run-program model.kiln --input x.bin --output y.bin [--run-dir D] [--device cuda]
//   kiln-run-program model.kiln --describe
//
// Exit status: 0 ok, 1 a kiln error (its code and message on stderr), 2 bad usage.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "kiln/common/error.h"
#include "kiln/program/compiled.h"
#include "kiln/program/program.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/runtime/cuda_driver.h"
#endif

namespace {

using namespace kiln;

// A strided tensor in host memory, packed row-major.
program::TensorData packed(const runtime::Tensor& t) {
  program::TensorData out{t.dtype, t.sizes, {}};
  const size_t item = elementSize(t.dtype);
  int64_t numel = 1;
  for (int64_t s : t.sizes) numel *= s;
  out.bytes.resize(static_cast<size_t>(numel) * item);
  std::vector<int64_t> index(t.sizes.size(), 0);
  for (int64_t n = 0; n < numel; ++n) {
    int64_t offset = 0;
    for (size_t k = 0; k < index.size(); ++k) offset += index[k] * t.strides[k];
    std::memcpy(out.bytes.data() + n * item, static_cast<const char*>(t.data) + offset * item,
                item);
    for (size_t k = index.size(); k-- > 0;) {
      if (++index[k] < t.sizes[k]) break;
      index[k] = 0;
    }
  }
  return out;
}

#ifdef KILN_HAVE_CUDA
// Device copies of the inputs, and host copies of outputs, for a CUDA program.
struct DeviceMemory {
  explicit DeviceMemory(int device) : scope(device) {}
  ~DeviceMemory() {
    for (CUdeviceptr p : owned) runtime::cudaDriver().cuMemFree(p);
  }
  runtime::Tensor upload(const program::TensorData& t) {
    const runtime::CudaDriver& driver = runtime::cudaDriver();
    CUdeviceptr p = 0;
    runtime::cudaCheck(driver.cuMemAlloc(&p, std::max<size_t>(t.bytes.size(), 1)), "cuMemAlloc");
    owned.push_back(p);
    runtime::cudaCheck(driver.cuMemcpyHtoD(p, t.bytes.data(), t.bytes.size()), "cuMemcpyHtoD");
    return {t.dtype, reinterpret_cast<void*>(p), t.sizes, runtime::contiguousStrides(t.sizes)};
  }
  program::TensorData download(const runtime::Tensor& t) {
    const runtime::CudaDriver& driver = runtime::cudaDriver();
    runtime::cudaCheck(driver.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
    const size_t bytes =
        static_cast<size_t>(runtime::extent(t.sizes, t.strides)) * elementSize(t.dtype);
    std::string host(bytes, '\0');
    if (bytes)
      runtime::cudaCheck(
          driver.cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(t.data), bytes),
          "cuMemcpyDtoH");
    runtime::Tensor view = t;
    view.data = host.data();
    return packed(view);
  }
  runtime::CudaContextScope scope;
  std::vector<CUdeviceptr> owned;
};
#endif

int run(const std::string& path, const std::vector<std::string>& inputs,
        const std::vector<std::string>& outputs, const std::string& runDir,
        const std::string& target, int device, bool describe) {
  Program p = Program::load(path);
  if (describe) {
    std::cout << p.text();
    return 0;
  }
  auto stack = client::Stack::connect(runDir);
  auto compiled = program::CompiledProgram::compile(std::move(p), stack, target, device);
  std::vector<program::TensorData> data;
  for (const std::string& in : inputs) data.push_back(program::loadTensor(in));
  std::vector<runtime::Tensor> tensors;
  std::vector<program::TensorData> results;
  if (!compiled.onCuda()) {
    for (program::TensorData& t : data)
      tensors.push_back({t.dtype, t.bytes.data(), t.sizes, runtime::contiguousStrides(t.sizes)});
    program::Outputs out = compiled.run(tensors);
    for (const runtime::Tensor& t : out.tensors()) results.push_back(packed(t));
  } else {
#ifdef KILN_HAVE_CUDA
    DeviceMemory memory(device);
    for (const program::TensorData& t : data) tensors.push_back(memory.upload(t));
    program::Outputs out = compiled.run(tensors);
    const auto& views = out.tensors();
    for (const runtime::Tensor& t : views) results.push_back(memory.download(t));
#endif
  }
  if (!outputs.empty() && outputs.size() != results.size())
    throw Error(ErrorCode::InvalidArgument, "the program has " + std::to_string(results.size()) +
                                                " outputs, " + std::to_string(outputs.size()) +
                                                " --output files given");
  for (size_t k = 0; k < outputs.size(); ++k) program::saveTensor(outputs[k], results[k]);
  std::cerr << "kiln-run-program: " << compiled.program().name() << " on " << compiled.target()
            << ": " << results.size() << " outputs"
            << (compiled.cacheHit() ? " (artifact cache hit)" : "") << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"Runs an exported kiln program (.kiln) through a running stack."};
  std::string path, runDir, target;
  std::vector<std::string> inputs, outputs;
  int device = 0;
  bool describe = false;
  app.add_option("program", path, "the .kiln file")->required();
  app.add_option("--input,-i", inputs, "a tensor file per user input, in order");
  app.add_option("--output,-o", outputs, "a tensor file per output, in order");
  app.add_option("--run-dir", runDir,
                 "the stack's run dir (default: $KILN_RUN_DIR or the default stack)");
  app.add_option("--target", target, "cpu, cuda or cuda:sm_NN (default: the program's device)");
  app.add_option("--device", device, "the CUDA device ordinal");
  app.add_flag("--describe", describe, "print the program's spec, asserts and graph");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(path, inputs, outputs, runDir, target, device, describe);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-run-program: " << kiln::errorCodeName(e.code()) << ": " << e.message()
              << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "kiln-run-program: internal: " << e.what() << "\n";
    return 1;
  }
}
