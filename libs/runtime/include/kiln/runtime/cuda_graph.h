// CUDA graphs of plans (torch.compile's mode="reduce-overhead"): one run of a
// plan, for fixed input addresses and sizes, captured once and replayed with a
// single launch. As torch's cudagraph trees, the caller keeps its inputs in
// static buffers (copying new values into them before a replay), and the
// outputs are static too: each replay overwrites them.
#pragma once

#include <memory>
#include <vector>

#include "kiln/runtime/cuda.h"

namespace kiln::runtime {

class CudaGraphRunner {
public:
  // Runs the plan once on `where` (warm-up: loads the module, picks the
  // cuBLASLt algorithms), then captures a second run into a graph and
  // instantiates it. Memory comes from `allocator` and is held until the
  // runner is destroyed (the graph reads and writes it on every replay);
  // `allocator` must outlive the runner. Error{Unsupported} for a plan with
  // data-dependent sizes (the host reads them), Error{InvalidArgument} for the legacy default stream (it cannot be
  // captured), Error{Unavailable} without a driver.
  CudaGraphRunner(const Plan& plan, std::shared_ptr<const CudaModule> module,
                  const std::vector<Tensor>& inputs, Allocator& allocator, CudaStream where);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  // Queues the graph on the stream (no synchronization): the plan runs on
  // what the inputs hold then, into the same outputs. A kernel's error (an
  // index out of range) is raised as an uncaptured run's: by a later run,
  // replay or checkCudaErrors (see runCuda).
  void replay();

  // The outputs every replay writes (views of memory the runner holds).
  const std::vector<Tensor>& outputs() const;

private:
  struct State;
  std::unique_ptr<State> state_;
};

} // namespace kiln::runtime
