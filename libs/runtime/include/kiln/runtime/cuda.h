// Running plans on a CUDA device: kernels of a cubin launched on a stream of
// the device's primary context (the one torch uses), extern matrix products
// through cuBLASLt, buffers from an Allocator of device memory. Without a
// driver every entry point gives Error{Unavailable} (see cuda_driver.h); this
// header needs no CUDA header.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/runtime/plan.h"
#include "kiln/runtime/runtime.h"

namespace kiln::runtime {

// Where CUDA work goes: a device's primary context and a stream on it
// (a CUstream; null is the legacy default stream, torch's default).
struct CudaStream {
  int device = 0;
  void* stream = nullptr;
};

// Device memory, stream-ordered on `where` (cuMemAllocAsync / cuMemFreeAsync):
// what it releases may be reused by work queued on that stream after the
// release. Python passes torch's caching allocator instead.
class CudaAllocator : public Allocator {
public:
  explicit CudaAllocator(CudaStream where) : where_(where) {}
  void* allocate(size_t bytes) override; // Error{ResourceExhausted}, Error{Unavailable}
  void release(void* data) override;

private:
  CudaStream where_;
};

// A cubin's kernels, loaded (cuModuleLoadData) into a device's primary context
// the first time that device asks for one of them; unloaded with the module.
class CudaModule {
public:
  CudaModule(std::string image, std::vector<std::string> kernels);
  ~CudaModule();
  CudaModule(const CudaModule&) = delete;
  CudaModule& operator=(const CudaModule&) = delete;

  const std::vector<std::string>& kernels() const { return kernels_; }
  // Kernel `index`'s CUfunction on `device` (its context must be current).
  // Error{Unavailable} without a driver, Error{Internal} for an image the
  // driver rejects, Error{NotFound} for a kernel it lacks.
  void* function(int device, uint32_t index) const;
  // How many blocks of kernel `index` (of `threads` threads, `sharedBytes` of
  // dynamic shared memory: its launch's) `device` holds at once: its SMs times
  // the blocks an SM fits by threads, registers and shared memory. Asked of the
  // driver once per loaded kernel.
  int64_t residentBlocks(int device, uint32_t index, uint32_t threads, uint32_t sharedBytes) const;

private:
  struct Loaded {
    void* module = nullptr; // CUmodule
    std::vector<void*> functions;
    std::vector<int64_t> resident; // residentBlocks per kernel; 0: not asked yet
  };
  std::string image_;
  std::vector<std::string> kernels_;
  mutable std::mutex mutex_;
  mutable std::map<int, Loaded> loaded_; // by device
};

// Runs the plan on `where`: inputs are device tensors (symbolic ints: 0-d
// Int64 in host memory), buffers come from `allocator` (device memory usable
// on `where`), work is queued on the stream and not waited for. Kernels that
// may fail (an index out of range, an integer division by zero) write status
// words, copied to the host behind the run's work: the first failing kernel's
// error (Error{InvalidArgument}, as the CPU's) is raised by the first runCuda
// or checkCudaErrors after the GPU finished that run — at once with
// KILN_CUDA_SYNC_ERRORS=1, which makes each such run wait. Symbolic-int
// outputs are 0-d Int64 in host memory (RunResult::hostInts).
// `deterministic` (a "+deterministic" artifact: torch.use_deterministic_algorithms):
// products run cuBLASLt's heuristic's first algorithm, the same in every
// process, where other runs time the candidates on a shape's first call.
// Error{Unavailable} without a driver.
RunResult runCuda(const Plan& plan, const CudaModule& module, const std::vector<Tensor>& inputs,
                  Allocator& allocator, CudaStream where, const PlanFacts* facts = nullptr,
                  bool deterministic = false);

// The status words of a run captured into a CUDA graph (runCuda on a stream
// that was capturing, in relaxed mode: the words' pinned host memory is
// allocated during the capture). Every replay of the graph copies them to that
// memory; the caller says when it queued one, and its error is raised as an
// uncaptured run's would be.
class ReplayStatus {
public:
  struct State;
  explicit ReplayStatus(std::shared_ptr<State> state) : state_(std::move(state)) {}

  // Before queueing a replay: raises an earlier run's or replay's error the
  // GPU reported by now, waiting for this graph's previous replay (its words
  // are overwritten by the next), which the GPU has mostly finished by then.
  void replaying() const;
  // After queueing a replay on `where`: queues its check.
  void replayed(CudaStream where) const;

private:
  std::shared_ptr<State> state_;
};

// Waits for every CUDA run so far and raises the first kernel error among
// those not reported yet (above).
void checkCudaErrors();

// Whether `target` names a CUDA artifact ("cuda" or "cuda:sm_NN").
bool isCudaTarget(const std::string& target);

} // namespace kiln::runtime
