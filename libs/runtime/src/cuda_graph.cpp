#include "kiln/runtime/cuda_graph.h"

#include "data_dependent.h"
#include "kiln/common/error.h"
#include "kiln/runtime/cuda_driver.h"

namespace kiln::runtime {
namespace {

// Memory for the captured run: the warm-up run's allocations are kept (its
// releases ignored), and the captured run — the same plan on the same
// binding, so the same sequence of sizes — is handed the same memory in the
// same order, with no allocation while the stream captures.
class HeldAllocator : public Allocator {
public:
  explicit HeldAllocator(Allocator& real) : real_(real) {}
  ~HeldAllocator() override {
    for (const Held& h : held_) real_.release(h.data);
  }

  void startReplaying() { replaying_ = true; }

  void* allocate(size_t bytes) override {
    if (!replaying_) {
      held_.push_back({real_.allocate(bytes), bytes});
      return held_.back().data;
    }
    if (next_ >= held_.size() || held_[next_].bytes != bytes)
      throw Error(ErrorCode::Internal,
                  "runtime: the captured run allocates differently from its warm-up");
    return held_[next_++].data;
  }
  void release(void*) override {} // held until the runner goes

private:
  struct Held {
    void* data;
    size_t bytes;
  };
  Allocator& real_;
  std::vector<Held> held_;
  size_t next_ = 0;
  bool replaying_ = false;
};

} // namespace

struct CudaGraphRunner::State {
  explicit State(Allocator& real) : memory(real) {}
  ~State() {
    try {
      const CudaDriver& d = cudaDriver();
      CudaContextScope scope(where.device);
      if (exec) d.cuGraphExecDestroy(exec);
      if (graph) d.cuGraphDestroy(graph);
    } catch (const Error&) {
    }
  }
  Plan plan;
  std::shared_ptr<const CudaModule> module;
  CudaStream where;
  HeldAllocator memory;
  RunResult result;
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
};

CudaGraphRunner::CudaGraphRunner(const Plan& plan, std::shared_ptr<const CudaModule> module,
                                 const std::vector<Tensor>& inputs, Allocator& allocator,
                                 CudaStream where)
    : state_(std::make_unique<State>(allocator)) {
  const CudaDriver& d = cudaDriver();
  for (const Step& step : plan.steps)
    if (bindsSymbol(step))
      throw Error(ErrorCode::Unsupported,
                  "runtime: a CUDA graph of a plan with data-dependent sizes (" + step.op +
                      "): the host reads them while it runs");
  if (!where.stream)
    throw Error(
        ErrorCode::InvalidArgument,
        "runtime: a CUDA graph is captured on a stream other than the legacy default stream");
  State& s = *state_;
  s.plan = plan;
  s.module = std::move(module);
  s.where = where;
  runCuda(s.plan, *s.module, inputs, s.memory, where); // warm-up, eager
  s.memory.startReplaying();
  CudaContextScope scope(where.device);
  auto stream = static_cast<CUstream>(where.stream);
  // Relaxed: a plan whose kernels may fail allocates the pinned memory their status
  // words reach on each replay while it is captured (ReplayStatus).
  cudaCheck(d.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED),
            "cuStreamBeginCapture");
  try {
    s.result = runCuda(s.plan, *s.module, inputs, s.memory, where);
  } catch (...) {
    CUgraph broken = nullptr;
    d.cuStreamEndCapture(stream, &broken);
    if (broken) d.cuGraphDestroy(broken);
    throw;
  }
  cudaCheck(d.cuStreamEndCapture(stream, &s.graph), "cuStreamEndCapture");
  cudaCheck(d.cuGraphInstantiateWithFlags(&s.exec, s.graph, 0), "cuGraphInstantiate");
}

CudaGraphRunner::~CudaGraphRunner() = default;

void CudaGraphRunner::replay() {
  const CudaDriver& d = cudaDriver();
  CudaContextScope scope(state_->where.device);
  if (state_->result.replayStatus) state_->result.replayStatus->replaying();
  cudaCheck(d.cuGraphLaunch(state_->exec, static_cast<CUstream>(state_->where.stream)),
            "cuGraphLaunch");
  if (state_->result.replayStatus) state_->result.replayStatus->replayed(state_->where);
}

const std::vector<Tensor>& CudaGraphRunner::outputs() const {
  return state_->result.outputs;
}

} // namespace kiln::runtime
