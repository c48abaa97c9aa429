// CompiledProgram: a Program's graph compiled through the stack and run here.
#include "kiln/program/compiled.h"

#include <cstdlib>

#include "kiln/common/error.h"
#include "kiln/runtime/cuda.h"
#ifdef KILN_HAVE_CUDA
#include "kiln/runtime/cuda_driver.h"
#endif

namespace kiln::program {

namespace {

// As the codegen service's cache (kiln/codegen/cache.h) and kiln.ir pick it.
std::string defaultLibraryDir() {
  if (const char* dir = std::getenv("KILN_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/kiln";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/kiln";
}

std::string cudaTarget(int device) {
#ifdef KILN_HAVE_CUDA
  const runtime::CudaDriver& driver = runtime::cudaDriver();
  CUdevice dev = 0;
  runtime::cudaCheck(driver.cuDeviceGet(&dev, device), "cuDeviceGet");
  int major = 0, minor = 0;
  runtime::cudaCheck(
      driver.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
      "cuDeviceGetAttribute");
  runtime::cudaCheck(
      driver.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
      "cuDeviceGetAttribute");
  return "cuda:sm_" + std::to_string(major) + std::to_string(minor);
#else
  (void)device;
  throw Error(ErrorCode::Unavailable, "kiln was built without CUDA: no CUDA target");
#endif
}

} // namespace

std::string targetFor(const ir::Graph& graph, int device) {
  for (ir::ValueId id = 0; id < graph.size(); ++id) {
    const ir::Value& v = graph.value(id);
    if (v.isTensor() && v.tensor().device.type == ir::DeviceType::Cuda) return cudaTarget(device);
  }
  return "cpu";
}

Outputs::Outputs(runtime::RunResult result, std::shared_ptr<runtime::Allocator> allocator)
    : result_(std::move(result)), allocator_(std::move(allocator)) {}

Outputs::~Outputs() {
  if (!allocator_) return; // moved from
  for (void* buffer : result_.buffers) allocator_->release(buffer);
}

CompiledProgram::CompiledProgram(CompiledProgram&&) noexcept = default;
CompiledProgram& CompiledProgram::operator=(CompiledProgram&&) noexcept = default;

CompiledProgram::~CompiledProgram() {
#ifdef KILN_HAVE_CUDA
  if (deviceConstants_.empty()) return;
  try {
    runtime::CudaContextScope scope(device_);
    for (void* data : deviceConstants_)
      runtime::cudaDriver().cuMemFree(reinterpret_cast<CUdeviceptr>(data));
  } catch (const Error&) { // the driver went away: nothing left to free
  }
#endif
}

CompiledProgram CompiledProgram::compile(Program program, client::Stack& stack, std::string target,
                                         int device, std::string libraryDir) {
  if (target.empty()) target = targetFor(program.graph(), device);
  if (target == "cuda") target = cudaTarget(device);
  CompiledProgram out;
  out.device_ = device;
  out.program_ = std::make_shared<const Program>(std::move(program));
  client::Compiled compiled = stack.compile(out.program_->graph(), target);
  out.cacheHit_ = compiled.cacheHit;
  out.artifact_ = runtime::LoadedArtifact::load(
      compiled.artifact, libraryDir.empty() ? defaultLibraryDir() : libraryDir);
  const bool cuda = out.artifact_->onCuda();
  if (cuda) {
    out.allocator_ = std::make_shared<runtime::CudaAllocator>(runtime::CudaStream{device, nullptr});
  } else {
    out.allocator_ = std::make_shared<runtime::HostAllocator>();
  }
  for (const Input& in : out.program_->inputs()) {
    runtime::Tensor t;
    if (in.constant) {
      const TensorData& c = *in.constant;
      t = {c.dtype, const_cast<char*>(c.bytes.data()), c.sizes, runtime::contiguousStrides(c.sizes)};
#ifdef KILN_HAVE_CUDA
      if (cuda) { // the stored tensors go to the device once
        runtime::CudaContextScope scope(device);
        const runtime::CudaDriver& driver = runtime::cudaDriver();
        CUdeviceptr data = 0;
        runtime::cudaCheck(driver.cuMemAlloc(&data, std::max<size_t>(c.bytes.size(), 1)),
                           "cuMemAlloc");
        out.deviceConstants_.push_back(reinterpret_cast<void*>(data));
        runtime::cudaCheck(driver.cuMemcpyHtoD(data, c.bytes.data(), c.bytes.size()),
                           "cuMemcpyHtoD");
        t.data = reinterpret_cast<void*>(data);
      }
#endif
    }
    out.constants_.push_back(std::move(t));
  }
  return out;
}

Outputs CompiledProgram::run(const std::vector<runtime::Tensor>& inputs) const {
  const Program& p = *program_;
  const ir::Device device{onCuda() ? ir::DeviceType::Cuda : ir::DeviceType::Cpu,
                          static_cast<int16_t>(onCuda() ? device_ : -1)};
  std::vector<InputShape> shapes;
  for (const runtime::Tensor& t : inputs) shapes.push_back({t.dtype, device, t.sizes});
  p.check(shapes);
  std::vector<runtime::Tensor> all = constants_;
  size_t next = 0;
  for (size_t i = 0; i < all.size(); ++i)
    if (!p.inputs()[i].constant) all[i] = inputs[next++];
  runtime::RunResult result =
      artifact_->run(all, *allocator_, runtime::CudaStream{device_, nullptr});
  return Outputs(std::move(result), allocator_);
}

} // namespace kiln::program
