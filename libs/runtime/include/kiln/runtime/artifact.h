// A compiled graph as the codegen service hands it out (schemas/codegen.capnp):
// the plan, the generated source, the compiled library's bytes and the
// explain view; and an artifact loaded for running.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kiln/runtime/cuda.h"
#include "kiln/runtime/plan.h"
#include "kiln/runtime/runtime.h"
#include "kiln/schema/codegen.capnp.h"

namespace kiln::runtime {

struct Artifact {
  std::string target; // "cpu", or "cuda:sm_90" (the architecture of the cubin)
  std::string key;    // what the cache stores it under
  Plan plan;
  std::string source;
  std::string library; // the shared object's bytes (CPU) or the cubin (CUDA)
  std::string explain;
};

void toWire(const Artifact& artifact, schema::Artifact::Builder out);
// Symbols are declared in `table`. Error{Malformed} for anything invalid.
Artifact fromWire(schema::Artifact::Reader in, sym::SymbolTable& table);
std::string toBytes(const Artifact& artifact);
Artifact fromBytes(std::string_view bytes, sym::SymbolTable& table);

// A shared object of kernels, loaded with dlopen; unloaded with its last owner.
class Library {
public:
  static std::shared_ptr<Library> load(const std::string& path); // Error{NotFound}
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  KernelFn kernel(const std::string& name) const; // Error{NotFound} when absent

private:
  explicit Library(void* handle) : handle_(handle) {}
  void* handle_;
};

// An artifact ready to run. CPU: its library written under `dir` (named by
// the artifact's key, written atomically, reused when present) and loaded.
// CUDA ("cuda:*"): its cubin kept, loaded into a device's context on the first
// run there (so a process that only inspects artifacts needs no driver).
class LoadedArtifact {
public:
  static std::shared_ptr<LoadedArtifact> load(std::string_view bytes, const std::string& dir);

  const Artifact& artifact() const { return artifact_; }
  bool onCuda() const { return module_ != nullptr; }
  // CUDA: the cubin's kernels (for CudaGraphRunner); null on the CPU.
  std::shared_ptr<const CudaModule> cudaModule() const { return module_; }

  // Runs on `inputs` (host tensors on the CPU; on CUDA device tensors of
  // `where.device`, work queued on `where.stream`: see runCuda).
  RunResult run(const std::vector<Tensor>& inputs, Allocator& allocator,
                CudaStream where = {}) const;

private:
  LoadedArtifact() = default;
  std::unique_ptr<sym::SymbolTable> table_;
  Artifact artifact_;
  std::shared_ptr<Library> library_;
  std::shared_ptr<const CudaModule> module_;
  PlanFacts facts_; // of artifact_.plan
  bool deterministic_ = false; // a "+deterministic" target (runCuda)
};

} // namespace kiln::runtime
