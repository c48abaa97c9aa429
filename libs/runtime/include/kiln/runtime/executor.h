// kiln::runtime::Executor: how one device runs the steps of a plan. The plan
// interpreter (runtime::run) is shared by every device — it binds the inputs,
// allocates, reuses and frees the buffers, and hands the outputs out as views —
// and asks an executor only for what differs: running a kernel, running an
// extern call, and making a symbolic-int output. The CPU's runs kernels of a
// loaded shared object (runtime.h); CUDA's launches kernels of a cubin on a
// stream (cuda.h).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/runtime/plan.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime {

class Executor {
public:
  virtual ~Executor() = default;

  // Before the first step: the run's binding and the values of the plan's
  // symbol slots (Plan::symbols), both alive until end(). Both grow as steps
  // bind unbacked symbols (item, nonzero): a slot is valid once its symbols are bound.
  virtual void begin(const sym::Binding& binding, const std::vector<int64_t>& symbols) = 0;

  // Plan::kernels[kernel] on the buffers' element 0 pointers (indexed by plan
  // buffer; the step's writes are allocated). Error{InvalidArgument} for an
  // error the kernel reports (it may come later, from end(), on a device that
  // runs asynchronously).
  virtual void runKernel(uint32_t kernel, char* const* buffers) = 0;

  // An extern call: `inputs` are the step's views, `attrs` its attributes with
  // symbolic values evaluated, `out` the result buffer as laid out, `results`
  // its further results (Step::writes), each as laid out.
  virtual void callExtern(const Step& step, const std::vector<Tensor>& inputs,
                          const std::vector<ir::Attr>& attrs, const Tensor& out,
                          const std::vector<Tensor>& results) = 0;

  // item(): element 0 of an integer or bool tensor of this device, on the host
  // (a device waits for it: what follows is sized by it).
  virtual int64_t readInt(const Tensor& t) = 0;

  // nonzero(): counts the tensor's non-zero elements, asks `output` for the
  // result of that many rows (which binds the plan's symbol and allocates it)
  // and writes their indices into it, row-major.
  virtual void nonzero(const Tensor& t, const std::function<Tensor(int64_t count)>& output) = 0;

  // After the last step, before the outputs are handed out: kernels' errors
  // not reported yet are (CUDA reads its status words here).
  virtual void end() = 0;

  // A symbolic-int output of value `value`: a 0-d Int64 tensor, whose memory
  // the executor records in `result` (RunResult::buffers or ::hostInts).
  virtual Tensor symIntOutput(int64_t value, RunResult& result) = 0;
};

// Runs the plan's steps through `executor`, buffers from `allocator`.
// Intermediates are released as the plan frees them, and all of them if a
// step fails. Error{InvalidArgument} for bad inputs and a kernel's reported error.
// `sizes`: the plan's planFacts, where the caller keeps them.
RunResult run(const Plan& plan, Executor& executor, const std::vector<Tensor>& inputs,
              Allocator& allocator, const PlanFacts* facts = nullptr);

} // namespace kiln::runtime
