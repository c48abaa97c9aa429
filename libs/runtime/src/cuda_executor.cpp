// CUDA's executor: kernels of a cubin launched on a stream, matrix products
// through cuBLASLt, the kernels' status words copied to the host at the end of
// a run and checked once the GPU got there (StatusChecks).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <deque>
#include <mutex>

#include "cuda_attention.h"
#include "cuda_matmul.h"
#include "data_dependent.h"
#include "kiln/common/error.h"
#include "kiln/runtime/cuda.h"
#include "kiln/runtime/cuda_driver.h"
#include "kiln/runtime/executor.h"

namespace kiln::runtime {

struct ReplayStatus::State {
  int device;
  std::shared_ptr<int> words; // pinned host memory the graph copies the status words to
  size_t count;
  std::vector<std::pair<size_t, std::string>> failing; // kernel index, name; in plan order
};

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20; // cuBLASLt's, per run
constexpr uint32_t kDefaultSharedBytes = 48 << 10;   // above it a kernel must opt in

// Whether runs wait for their kernels' status (KILN_CUDA_SYNC_ERRORS=1: an
// error raised by the run that made it, as CUDA_LAUNCH_BLOCKING for torch).
bool synchronousChecks() {
  static const bool sync = [] {
    const char* v = std::getenv("KILN_CUDA_SYNC_ERRORS");
    return v && *v && std::string(v) != "0";
  }();
  return sync;
}

// The status words of runs whose kernels may fail, on their way to the host:
// a run does not wait for its kernels (the host keeps queueing work, as torch
// does), so an index out of range or a division by zero is reported by the
// first kiln run, or checkCudaErrors, after the GPU finished the run that
// made it. Pinned host words are reused.
class StatusChecks {
public:
  static StatusChecks& instance() {
    static StatusChecks* checks = new StatusChecks(); // outlives static destructors
    return *checks;
  }

  // Copies `count` status words at `device` to the host after the stream's work.
  void add(const CudaDriver& driver, int device, CUstream stream, const int* words, size_t count,
           std::vector<std::pair<size_t, std::string>> failing) {
    Pending p;
    p.device = device, p.count = count, p.failing = std::move(failing);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it)
        if (it->second >= count) {
          p.host = it->first, p.capacity = it->second;
          free_.erase(it);
          break;
        }
    }
    if (!p.host) {
      p.capacity = std::max<size_t>(count, 1024);
      void* host = nullptr;
      cudaCheck(driver.cuMemAllocHost(&host, p.capacity * sizeof(int)), "cuMemAllocHost");
      p.host = static_cast<int*>(host);
    }
    cudaCheck(driver.cuMemcpyDtoHAsync(p.host, reinterpret_cast<CUdeviceptr>(words),
                                       count * sizeof(int), stream),
              "cuMemcpyDtoHAsync");
    queue(driver, stream, std::move(p));
  }

  // Checks the earlier runs the GPU finished, waiting for those up to the last
  // one that reads `host` (a graph's words, which its next replay overwrites).
  void checkBefore(const CudaDriver& driver, const int* host) {
    bool pending = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Pending& p : pending_) pending = pending || p.host == host;
    }
    check(driver, false, pending ? host : nullptr);
  }

  // A replay's words, which the graph copies to `host` (memory of its own).
  void addReplay(const CudaDriver& driver, int device, CUstream stream, std::shared_ptr<int> host,
                 size_t count, std::vector<std::pair<size_t, std::string>> failing) {
    Pending p;
    p.device = device, p.host = host.get(), p.count = count, p.failing = std::move(failing);
    p.owner = std::move(host);
    queue(driver, stream, std::move(p));
  }

  // Raises the first error among the runs the GPU finished (all of them when
  // `wait`; those up to the one reading `until` too), in the order they were
  // queued; the checked ones are forgotten.
  void check(const CudaDriver& driver, bool wait, const int* until = nullptr) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!pending_.empty()) {
      Pending p = std::move(pending_.front());
      pending_.pop_front();
      lock.unlock();
      CudaContextScope scope(p.device);
      bool waitHere = wait || until != nullptr;
      if (p.host == until) until = nullptr; // the last one to wait for
      CUresult state = waitHere ? driver.cuEventSynchronize(p.done) : driver.cuEventQuery(p.done);
      if (state == CUDA_ERROR_NOT_READY) {
        lock.lock();
        pending_.push_front(std::move(p)); // later runs are not done either
        return;
      }
      cudaCheck(state, waitHere ? "cuEventSynchronize" : "cuEventQuery");
      driver.cuEventDestroy(p.done);
      std::vector<int> status(p.host, p.host + p.count);
      lock.lock();
      if (!p.owner) free_.emplace_back(p.host, p.capacity);
      for (const auto& [kernel, name] : p.failing) { // the first kernel, in plan order, that failed
        int code = status.at(kernel);
        if (code == 1) throw Error(ErrorCode::InvalidArgument, name + ": integer division by zero");
        if (code == 2) throw Error(ErrorCode::InvalidArgument, name + ": an index is out of range");
        if (code != 0) throw Error(ErrorCode::Internal, name + ": status " + std::to_string(code));
      }
    }
  }

private:
  struct Pending {
    int device = 0;
    CUevent done = nullptr;
    int* host = nullptr;
    size_t count = 0;
    std::vector<std::pair<size_t, std::string>> failing; // kernel index, name; in plan order
    size_t capacity = 0;
    std::shared_ptr<int> owner; // a captured graph's words, not the free list's
  };

  void queue(const CudaDriver& driver, CUstream stream, Pending p) {
    cudaCheck(driver.cuEventCreate(&p.done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    cudaCheck(driver.cuEventRecord(p.done, stream), "cuEventRecord");
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(std::move(p));
  }
  std::mutex mutex_;
  std::deque<Pending> pending_;
  std::vector<std::pair<int*, size_t>> free_; // pinned words and their capacity
};

class CudaExecutor : public Executor {
public:
  CudaExecutor(const Plan& plan, const CudaModule& module, Allocator& allocator, CudaStream where,
               bool deterministic)
      : plan_(plan), module_(module), allocator_(allocator), where_(where), driver_(cudaDriver()),
        stream_(static_cast<CUstream>(where.stream)), deterministic_(deterministic) {}

  ~CudaExecutor() override {
    if (status_) allocator_.release(status_);
    if (workspace_) allocator_.release(workspace_);
  }

  void begin(const sym::Binding& binding, const std::vector<int64_t>& symbols) override {
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    cudaCheck(driver_.cuStreamIsCapturing(stream_, &capture), "cuStreamIsCapturing");
    capturing_ = capture == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (!capturing_) // while capturing, events of earlier work may not be queried
      StatusChecks::instance().check(driver_, false); // an earlier run's error, before more work
    if (plan_.launches.size() != plan_.kernels.size())
      throw Error(ErrorCode::Malformed,
                  "runtime: a CUDA plan of " + std::to_string(plan_.kernels.size()) +
                      " kernels with " + std::to_string(plan_.launches.size()) + " launches");
    binding_ = &binding;
    symbols_ = &symbols;
    for (uint32_t k = 0; k < plan_.kernels.size(); ++k) {
      auto fn = static_cast<CUfunction>(module_.function(where_.device, k));
      uint32_t shared = plan_.launches[k].sharedBytes;
      if (shared > kDefaultSharedBytes)
        cudaCheck(driver_.cuFuncSetAttribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                             static_cast<int>(shared)),
                  "cuFuncSetAttribute");
      functions_.push_back(fn);
    }
  }

  void runKernel(uint32_t kernel, char* const* buffers) override {
    const Launch& launch = plan_.launches.at(kernel);
    if (!launch.aligned.empty() && !alignedInRun(launch, buffers, *binding_)) {
      if (launch.unaligned >= 0)
        runKernel(static_cast<uint32_t>(launch.unaligned), buffers); // the element-by-element twin
      else
        runOnAlignedCopies(kernel, buffers);
      return;
    }
    int64_t items = sym::evaluate(launch.items, *binding_);
    if (items <= 0) return; // nothing to do: launch nothing
    int64_t blocks = std::min<int64_t>((items - 1) / launch.itemsPerBlock + 1, INT32_MAX);
    if (launch.waves > 0) {
      int64_t wave =
          module_.residentBlocks(where_.device, kernel, launch.threads, launch.sharedBytes);
      blocks = std::min<int64_t>(blocks, wave * launch.waves);
    }
    // The parameters: buffers' element 0, symbol values, the status word (the
    // vectors are the executor's, reused: a run launches hundreds of kernels).
    pointers_.clear();
    for (uint32_t b : launch.buffers) {
      if (!buffers[b])
        throw Error(ErrorCode::Internal, "runtime: " + plan_.kernels[kernel] + " reads buffer " +
                                             plan_.buffers.at(b).name +
                                             ", which holds no memory now");
      pointers_.push_back(reinterpret_cast<CUdeviceptr>(buffers[b]));
    }
    values_.clear();
    for (uint32_t slot : launch.symbols) values_.push_back(symbols_->at(slot));
    int* status = nullptr;
    if (launch.mayFail) {
      status = statusWords() + kernel;
      failing_.push_back(kernel);
    }
    args_.clear();
    for (CUdeviceptr& p : pointers_) args_.push_back(&p);
    for (int64_t& v : values_) args_.push_back(&v);
    args_.push_back(&status);
    cudaCheck(driver_.cuLaunchKernel(functions_[kernel], static_cast<unsigned>(blocks), 1, 1,
                                     launch.threads, 1, 1, launch.sharedBytes, stream_, args_.data(),
                                     nullptr),
              "cuLaunchKernel");
  }

  void callExtern(const Step& step, const std::vector<Tensor>& inputs,
                  const std::vector<ir::Attr>& attrs, const Tensor& out,
                  const std::vector<Tensor>& results) override {
    detail::CudaCallContext context{driver_,
                                    stream_,
                                    where_.device,
                                    allocator_,
                                    [this](size_t& bytes) { return workspace(bytes); },
                                    !deterministic_,
                                    capturing_};
    if (detail::isFlashAttention(step.op)) {
      detail::cudaFlashAttention(step.op, inputs, attrs, out, results,
                                 [&](const char* attr) { return libraryKernel(step, attr); },
                                 context);
      return;
    }
    if (detail::cudaMatrixProduct(step.op, inputs, attrs, out, results, context)) return;
    throw Error(ErrorCode::Unsupported, "runtime: no CUDA routine for the extern call " + step.op +
                                            (results.empty() ? "" : " of several results"));
  }

  void end() override {
    if (failing_.empty()) return; // nothing can have failed
    std::vector<std::pair<size_t, std::string>> failing;
    for (uint32_t k : failing_) failing.emplace_back(k, plan_.kernels[k]);
    if (capturing_) { // each replay copies the words to the graph's own host memory
      size_t count = plan_.kernels.size();
      void* host = nullptr;
      cudaCheck(driver_.cuMemAllocHost(&host, count * sizeof(int)), "cuMemAllocHost");
      int device = where_.device;
      std::shared_ptr<int> words(static_cast<int*>(host), [device](int* p) {
        try {
          CudaContextScope scope(device);
          cudaDriver().cuMemFreeHost(p);
        } catch (const Error&) { // the driver may be gone at exit
        }
      });
      cudaCheck(driver_.cuMemcpyDtoHAsync(words.get(), reinterpret_cast<CUdeviceptr>(status_),
                                          count * sizeof(int), stream_),
                "cuMemcpyDtoHAsync");
      replayStatus_ = std::make_shared<ReplayStatus>(std::make_shared<ReplayStatus::State>(
          ReplayStatus::State{device, std::move(words), count, std::move(failing)}));
      return;
    }
    StatusChecks& checks = StatusChecks::instance();
    checks.add(driver_, where_.device, stream_, static_cast<const int*>(status_),
               plan_.kernels.size(), std::move(failing));
    if (synchronousChecks()) checks.check(driver_, true);
  }

  std::shared_ptr<const ReplayStatus> replayStatus() const { return replayStatus_; }

  int64_t readInt(const Tensor& t) override {
    Tensor host = toHost(t);
    return detail::readInt(host);
  }

  // On the host: the count decides the result's size, which the host needs
  // anyway, and a tensor whose non-zeros are looked for is mostly a mask.
  // TODO(issue 9): a device kernel (count + scan) for large inputs.
  void nonzero(const Tensor& t, const std::function<Tensor(int64_t)>& output) override {
    Tensor in = toHost(t);
    Tensor out = output(detail::countNonzero(in));
    size_t bytes = static_cast<size_t>(extent(out.sizes, out.strides)) * sizeof(int64_t);
    if (bytes == 0) return;
    std::vector<int64_t> rows(bytes / sizeof(int64_t));
    Tensor hostOut = out;
    hostOut.data = rows.data();
    detail::fillNonzero(in, hostOut);
    cudaCheck(driver_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(out.data),
                                    reinterpret_cast<CUdeviceptr>(rows.data()), bytes, stream_),
              "cuMemcpyAsync");
    cudaCheck(driver_.cuStreamSynchronize(stream_), "cuStreamSynchronize"); // `rows` goes now
  }

  // Host memory: the value is known here, the device has no use for it.
  Tensor symIntOutput(int64_t value, RunResult& result) override {
    result.hostInts.push_back(value);
    return {ir::DType::Int64, &result.hostInts.back(), {}, {}};
  }

private:
  // A copy in host memory of the bytes `t` spans (its data pointing into `hostCopy_`),
  // once the stream's work before it is done.
  Tensor toHost(const Tensor& t) {
    size_t bytes = static_cast<size_t>(extent(t.sizes, t.strides)) * ir::elementSize(t.dtype);
    hostCopy_.assign(bytes, std::byte{0});
    if (bytes)
      cudaCheck(driver_.cuMemcpyDtoHAsync(hostCopy_.data(), reinterpret_cast<CUdeviceptr>(t.data),
                                          bytes, stream_),
                "cuMemcpyDtoHAsync");
    cudaCheck(driver_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    Tensor host = t;
    host.data = hostCopy_.data();
    return host;
  }

  // One status int per kernel (set only by those that may fail), zeroed
  // before the first of them runs.
  int* statusWords() {
    if (!status_) {
      size_t count = plan_.kernels.size();
      status_ = allocator_.allocate(count * sizeof(int));
      cudaCheck(driver_.cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(status_), 0, count, stream_),
                "cuMemsetD32Async");
    }
    return static_cast<int*>(status_);
  }

  // A 16-byte path without a twin where an input's memory is not aligned (a
  // view at an odd storage offset): the launch reads a copy of that input (its
  // bytes from element 0 to its last element) in scratch memory, released after
  // it in stream order. Other memory is the run's, aligned by the Allocator's
  // contract: a failing access there is an Error.
  void runOnAlignedCopies(uint32_t kernel, char* const* buffers) {
    const Launch& launch = plan_.launches[kernel];
    std::vector<char*> mended(buffers, buffers + plan_.buffers.size());
    std::deque<detail::Scratch> copies;
    for (const AlignedAccess& a : launch.aligned) {
      auto id = static_cast<size_t>(a.buffer);
      if (a.buffer < 0 || mended[id] != buffers[id] ||
          reinterpret_cast<uintptr_t>(buffers[id]) % a.bytes == 0)
        continue;
      const PlanBuffer& b = plan_.buffers.at(id);
      if (b.input < 0)
        throw Error(ErrorCode::Internal, "runtime: " + plan_.kernels[kernel] + " takes " + b.name +
                                             " as " + std::to_string(a.bytes) +
                                             "-byte aligned, and its memory is not");
      size_t bytes = bytesOf(b.layout, *binding_);
      void* copy = copies.emplace_back(allocator_, bytes).data;
      cudaCheck(driver_.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(copy),
                                      reinterpret_cast<CUdeviceptr>(buffers[id]), bytes, stream_),
                "cuMemcpyAsync");
      mended[id] = static_cast<char*>(copy);
    }
    if (!alignedInRun(launch, mended.data(), *binding_))
      throw Error(ErrorCode::Internal, "runtime: " + plan_.kernels[kernel] +
                                           " has an unaligned access no copy mends, and no twin");
    runKernel(kernel, mended.data());
  }

  // The artifact's kernel the step's attribute `attr` names.
  CUfunction libraryKernel(const Step& step, const char* attr) {
    for (const ir::Attr& a : step.attrs)
      if (a.name == attr)
        if (const auto* name = std::get_if<std::string>(&a.value))
          for (size_t k = 0; k < plan_.kernels.size(); ++k)
            if (plan_.kernels[k] == *name) return functions_[k];
    throw Error(ErrorCode::Malformed, "runtime: the extern call " + step.op + " names no " +
                                          attr + " of the artifact");
  }

  void* workspace(size_t& bytes) {
    if (!workspace_) workspace_ = allocator_.allocate(kWorkspaceBytes);
    bytes = kWorkspaceBytes;
    return workspace_;
  }

  const Plan& plan_;
  const CudaModule& module_;
  Allocator& allocator_;
  CudaStream where_;
  const CudaDriver& driver_;
  CUstream stream_;
  bool deterministic_; // products take the heuristic's algorithm (runCuda)
  const sym::Binding* binding_ = nullptr;
  const std::vector<int64_t>* symbols_ = nullptr;
  std::vector<CUfunction> functions_;
  std::vector<CUdeviceptr> pointers_; // runKernel's parameters
  std::vector<int64_t> values_;
  std::vector<void*> args_;
  std::vector<uint32_t> failing_; // kernels launched that may fail, in order
  void* status_ = nullptr;
  void* workspace_ = nullptr;
  std::vector<std::byte> hostCopy_;
  bool capturing_ = false; // the stream captures a graph: end() makes a ReplayStatus
  std::shared_ptr<const ReplayStatus> replayStatus_;
};

} // namespace

void ReplayStatus::replaying() const {
  const CudaDriver& driver = cudaDriver();
  CudaContextScope scope(state_->device);
  StatusChecks::instance().checkBefore(driver, state_->words.get());
}

void ReplayStatus::replayed(CudaStream where) const {
  const CudaDriver& driver = cudaDriver();
  CudaContextScope scope(where.device);
  StatusChecks& checks = StatusChecks::instance();
  checks.addReplay(driver, state_->device, static_cast<CUstream>(where.stream), state_->words,
                   state_->count, state_->failing);
  if (synchronousChecks()) checks.check(driver, true);
}

void* CudaAllocator::allocate(size_t bytes) {
  const CudaDriver& d = cudaDriver();
  CudaContextScope scope(where_.device);
  CUdeviceptr p = 0;
  cudaCheck(d.cuMemAllocAsync(&p, std::max<size_t>(bytes, 1), static_cast<CUstream>(where_.stream)),
            "cuMemAllocAsync");
  return reinterpret_cast<void*>(p);
}

void CudaAllocator::release(void* data) {
  try { // called from destructors: a failure here is lost, never thrown
    CudaContextScope scope(where_.device);
    cudaDriver().cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(data),
                                static_cast<CUstream>(where_.stream));
  } catch (const Error&) {
  }
}

CudaModule::CudaModule(std::string image, std::vector<std::string> kernels)
    : image_(std::move(image)), kernels_(std::move(kernels)) {}

CudaModule::~CudaModule() {
  for (auto& [device, loaded] : loaded_) {
    try {
      CudaContextScope scope(device);
      cudaDriver().cuModuleUnload(static_cast<CUmodule>(loaded.module));
    } catch (const Error&) { // the driver may be gone at exit
    }
  }
}

void* CudaModule::function(int device, uint32_t index) const {
  if (index >= kernels_.size())
    throw Error(ErrorCode::NotFound, "runtime: kernel " + std::to_string(index) + " of " +
                                         std::to_string(kernels_.size()));
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = loaded_.find(device);
  if (it == loaded_.end()) {
    const CudaDriver& d = cudaDriver();
    CudaContextScope scope(device);
    if (image_.empty())
      throw Error(ErrorCode::Malformed, "runtime: a CUDA artifact without a cubin");
    CUmodule module = nullptr;
    cudaCheck(d.cuModuleLoadData(&module, image_.data()), "cuModuleLoadData");
    Loaded loaded{module, {}, {}};
    for (const std::string& name : kernels_) {
      CUfunction fn = nullptr;
      CUresult r = d.cuModuleGetFunction(&fn, module, name.c_str());
      if (r != CUDA_SUCCESS) {
        d.cuModuleUnload(module);
        if (r == CUDA_ERROR_NOT_FOUND)
          throw Error(ErrorCode::NotFound, "runtime: no kernel " + name + " in the cubin");
        cudaCheck(r, "cuModuleGetFunction");
      }
      loaded.functions.push_back(fn);
    }
    it = loaded_.emplace(device, std::move(loaded)).first;
  }
  return it->second.functions[index];
}

int64_t CudaModule::residentBlocks(int device, uint32_t index, uint32_t threads,
                                   uint32_t sharedBytes) const {
  auto fn = static_cast<CUfunction>(function(device, index));
  std::lock_guard<std::mutex> lock(mutex_);
  Loaded& loaded = loaded_.at(device);
  if (loaded.resident.empty()) loaded.resident.assign(kernels_.size(), 0);
  if (loaded.resident[index] == 0) {
    const CudaDriver& d = cudaDriver();
    CUdevice handle = 0;
    int sms = 0, perSM = 0;
    cudaCheck(d.cuDeviceGet(&handle, device), "cuDeviceGet");
    cudaCheck(d.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, handle),
              "cuDeviceGetAttribute");
    cudaCheck(d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&perSM, fn, static_cast<int>(threads),
                                                            sharedBytes),
              "cuOccupancyMaxActiveBlocksPerMultiprocessor");
    loaded.resident[index] = std::max<int64_t>(int64_t{sms} * perSM, 1);
  }
  return loaded.resident[index];
}

void checkCudaErrors() {
  if (!cudaAvailable()) return; // nothing ever ran
  StatusChecks::instance().check(cudaDriver(), true);
}

RunResult runCuda(const Plan& plan, const CudaModule& module, const std::vector<Tensor>& inputs,
                  Allocator& allocator, CudaStream where, const PlanFacts* facts,
                  bool deterministic) {
  cudaDriver(); // Error{Unavailable} before anything else
  CudaContextScope scope(where.device);
  CudaExecutor executor(plan, module, allocator, where, deterministic);
  RunResult result = run(plan, executor, inputs, allocator, facts);
  result.replayStatus = executor.replayStatus();
  return result;
}

} // namespace kiln::runtime
