// kiln::runtime: runs a Plan on tensors given as pointers, sizes and strides,
// with compiled kernels from a loaded library and extern calls implemented
// here; memory for the plan's buffers comes from an Allocator (the Python SDK
// passes one backed by torch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <vector>

#include "kiln/ir/dtype.h"
#include "kiln/runtime/plan.h"
#include "kiln/sym/eval.h"

namespace kiln::runtime {

// A tensor in memory of the device the plan runs on: `data` points at its
// element 0 (torch's data_ptr). A symbolic-int input is a 0-d Int64 tensor in
// host memory, on every device.
struct Tensor {
  ir::DType dtype = ir::DType::Float32;
  void* data = nullptr;
  std::vector<int64_t> sizes, strides;
};

class Allocator {
public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0; // aligned to 64 bytes; Error{ResourceExhausted}
  virtual void release(void* data) = 0;
  // Whether the run may take graph input `input`'s memory (`data`, at least
  // `bytes` of it) as an allocation of its own (PlanBuffer::reuses): only when
  // the caller gave that input up for this run; release(data) frees it then.
  virtual bool adopt(int32_t /*input*/, void* /*data*/, size_t /*bytes*/) { return false; }
  // Memory of a buffer the run hands out whole as one output: `layout` is that
  // output (dtype, sizes, strides; no data). An allocator that makes tensors can
  // make the output itself (the Python SDK: torch.empty_strided, no view of
  // bytes to build after the run); by default memory as any other.
  virtual void* allocateOutput(size_t bytes, const Tensor& /*layout*/) { return allocate(bytes); }
};

// Memory from the C++ heap; what it gives stays until released.
class HostAllocator : public Allocator {
public:
  void* allocate(size_t bytes) override;
  void release(void* data) override;
};

// A kernel: (buffers, symbol values) -> status (0 ok, 1 division by zero, 2 index out of range).
// A CPU kernel (codegen's cpu_emitter.h): every buffer's element 0, every
// symbol's value, and the positions of its own buffers and symbols in them.
using KernelFn = int (*)(char* const* buffers, const int64_t* symbols, const uint32_t* args,
                         const uint32_t* slots);
using KernelLookup = std::function<KernelFn(const std::string& name)>;

// The symbols of `inputs` bound from the tensors' sizes and strides.
// Error{InvalidArgument} naming the input whose rank, dtype, size or stride
// disagrees (a symbol bound twice to different values, or outside its range).
sym::Binding bindInputs(const std::vector<ir::Value>& inputs, const std::vector<Tensor>& tensors);

class ReplayStatus;

struct RunResult {
  std::vector<Tensor> outputs; // views of inputs or of `buffers`
  std::vector<void*> buffers;  // what the allocator gave for the outputs: the caller's to release
  // Values of symbolic-int outputs kept in host memory (CUDA's); the outputs point at them.
  std::list<int64_t> hostInts;
  // A CUDA run captured into a graph, with kernels that may fail: their status on replays.
  std::shared_ptr<const ReplayStatus> replayStatus;
};

// Runs the plan on the CPU, kernels from `kernels` (see executor.h for other
// devices). Intermediates are released as the plan frees them, and all
// of them if a step fails. Error{InvalidArgument} for bad inputs and a
// kernel's reported error.
RunResult run(const Plan& plan, const KernelLookup& kernels, const std::vector<Tensor>& inputs,
              Allocator& allocator, const PlanFacts* facts = nullptr);

// An extern call on host memory: `inputs` are views (element 0 at `data`),
// `out` laid out as given: the matrix products (mm, bmm, addmm, matmul) of f32
// and f64, through BLAS (a plain loop where kiln was built without it).
// Error{Unsupported} for anything else: CPU lowering makes loops of it.
void runExtern(const std::string& op, const std::vector<Tensor>& inputs,
               const std::vector<ir::Attr>& attrs, const Tensor& out);

// The number of elements a layout spans (its last element's position + 1).
int64_t extent(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides);

// Row-major strides of these sizes (a size of 0 counts as 1, as in torch).
std::vector<int64_t> contiguousStrides(const std::vector<int64_t>& sizes);

} // namespace kiln::runtime
