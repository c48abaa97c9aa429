// kiln::program::CompiledProgram: a Program compiled for one target through a
// stack's codegen service and loaded in this process — the deploy path without
// Python. Runs on host memory (target "cpu") or on a CUDA device's memory
// ("cuda:sm_NN"), after Program::check accepted the inputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/client/stack.h"
#include "kiln/program/program.h"
#include "kiln/runtime/artifact.h"
#include "kiln/runtime/runtime.h"

namespace kiln::program {

// What one run returned: tensors in the target's memory, released with this
// object. An output may instead view a caller's input or a tensor the program
// stores (kept by the CompiledProgram), as the graph says.
class Outputs {
public:
  Outputs(runtime::RunResult result, std::shared_ptr<runtime::Allocator> allocator);
  Outputs(Outputs&&) noexcept = default;
  Outputs& operator=(Outputs&&) noexcept = default;
  ~Outputs();

  const std::vector<runtime::Tensor>& tensors() const { return result_.outputs; }
  size_t size() const { return result_.outputs.size(); }
  const runtime::Tensor& operator[](size_t i) const { return result_.outputs.at(i); }

private:
  runtime::RunResult result_;
  std::shared_ptr<runtime::Allocator> allocator_;
};

class CompiledProgram {
public:
  // `target`: "cpu", "cuda" (the capability of `device`), "cuda:sm_NN", or
  // empty for the graph's device. Libraries are kept under `libraryDir`
  // (empty: $KILN_CACHE_DIR, else ~/.cache/kiln). Errors of the stack as
  // Stack::compile gives them; Error{Unavailable} for CUDA without a driver.
  static CompiledProgram compile(Program program, client::Stack& stack, std::string target = {},
                                 int device = 0, std::string libraryDir = {});
  CompiledProgram(CompiledProgram&&) noexcept;
  CompiledProgram& operator=(CompiledProgram&&) noexcept;
  ~CompiledProgram();

  const Program& program() const { return *program_; }
  const std::string& target() const { return artifact_->artifact().target; }
  bool onCuda() const { return artifact_->onCuda(); }
  int device() const { return device_; }
  bool cacheHit() const { return cacheHit_; }

  // Runs on the user inputs (Program::userInputs() order): host tensors on the
  // CPU, device tensors of device() on CUDA (work queued on the legacy default
  // stream; the outputs are ready once it is synchronized). Error{InvalidArgument}
  // when Program::check refuses them.
  Outputs run(const std::vector<runtime::Tensor>& inputs) const;

private:
  CompiledProgram() = default;
  std::shared_ptr<const Program> program_;
  std::shared_ptr<runtime::LoadedArtifact> artifact_;
  std::vector<runtime::Tensor> constants_; // by input index; data null for user inputs
  std::shared_ptr<runtime::Allocator> allocator_;
  std::vector<void*> deviceConstants_; // CUDA copies of the stored tensors, released at the end
  int device_ = 0;
  bool cacheHit_ = false;
};

// The target a graph's values ask for: "cpu", or "cuda:sm_NN" for the
// capability of `device` when a value lives on a CUDA device.
std::string targetFor(const ir::Graph& graph, int device = 0);

} // namespace kiln::program
