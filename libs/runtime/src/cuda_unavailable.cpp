// kiln built without the CUDA toolkit's headers: every CUDA entry point says so.
#include "kiln/common/error.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/cuda_graph.h"

namespace kiln::runtime {
namespace {

[[noreturn]] void unavailable() {
  throw Error(ErrorCode::Unavailable, "no CUDA driver: kiln was built without the CUDA toolkit");
}

} // namespace

void* CudaAllocator::allocate(size_t) {
  unavailable();
}
void CudaAllocator::release(void*) {}

CudaModule::CudaModule(std::string image, std::vector<std::string> kernels)
    : image_(std::move(image)), kernels_(std::move(kernels)) {}
CudaModule::~CudaModule() = default;
void* CudaModule::function(int, uint32_t) const {
  unavailable();
}
int64_t CudaModule::residentBlocks(int, uint32_t, uint32_t, uint32_t) const {
  unavailable();
}

RunResult runCuda(const Plan&, const CudaModule&, const std::vector<Tensor>&, Allocator&,
                  CudaStream, const PlanFacts*, bool) {
  unavailable();
}

struct ReplayStatus::State {};
void ReplayStatus::replaying() const {
  unavailable();
}
void ReplayStatus::replayed(CudaStream) const {
  unavailable();
}

struct CudaGraphRunner::State {};
CudaGraphRunner::CudaGraphRunner(const Plan&, std::shared_ptr<const CudaModule>,
                                 const std::vector<Tensor>&, Allocator&, CudaStream) {
  unavailable();
}
CudaGraphRunner::~CudaGraphRunner() = default;
void CudaGraphRunner::replay() {
  unavailable();
}
const std::vector<Tensor>& CudaGraphRunner::outputs() const {
  unavailable();
}

} // namespace kiln::runtime
