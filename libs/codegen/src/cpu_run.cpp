#include "kiln/codegen/cpu_run.h"

#include <cstring>

#include "kiln/codegen/plan.h"
#include "kiln/runtime/runtime.h"

namespace kiln::codegen {

std::vector<ir::HostTensor> runCpu(const Program& program, const Schedule& schedule,
                                   const CpuSource& source, const runtime::Library& library,
                                   const ir::Graph& graph, std::vector<ir::HostTensor> inputs) {
  runtime::Plan plan =
      buildPlan(graph, program, schedule, {source.kernels, source.symbols, source.launches, {}});
  std::vector<runtime::Tensor> tensors;
  for (ir::HostTensor& t : inputs)
    tensors.push_back({t.dtype,
                       t.storage ? t.storage->data() + t.storageOffset * static_cast<int64_t>(elementSize(t.dtype))
                                 : nullptr,
                       t.sizes, t.strides});
  runtime::HostAllocator allocator;
  runtime::RunResult result = runtime::run(
      plan, [&](const std::string& name) { return library.kernel(name); }, tensors, allocator);
  std::vector<ir::HostTensor> outputs;
  for (const runtime::Tensor& t : result.outputs) { // copied out, contiguous bytes of its span
    ir::HostTensor h;
    h.dtype = t.dtype;
    h.sizes = t.sizes;
    h.strides = t.strides;
    size_t bytes = static_cast<size_t>(runtime::extent(t.sizes, t.strides)) * elementSize(t.dtype);
    auto* from = static_cast<std::byte*>(t.data);
    h.storage = std::make_shared<std::vector<std::byte>>(from, from + bytes);
    outputs.push_back(std::move(h));
  }
  for (void* b : result.buffers) allocator.release(b);
  return outputs;
}

} // namespace kiln::codegen
