// Internal to libs/codegen: the buffers of a program laid out in host memory
// for one run of the loop evaluator: symbols bound from the inputs, inputs
// used in place, every other buffer allocated zeroed, extern calls run as the
// runtime runs them, outputs copied out.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "kiln/runtime/runtime.h"
#include "kiln/codegen/loop_ir.h"
#include "kiln/ir/interpreter.h"
#include "kiln/sym/eval.h"

namespace kiln::codegen::detail {

struct Storage {
  DType dtype = DType::Float32;
  std::byte* data = nullptr; // element 0
  int64_t elements = 0;
};

class HostBuffers {
public:
  // Error{InvalidArgument} when the inputs disagree with the graph's placeholders.
  HostBuffers(const Program& program, const ir::Graph& graph, std::vector<ir::HostTensor> inputs);

  sym::Binding& binding() { return binding_; }
  const Storage& storage(BufferId id) const { return storage_.at(id); }
  // Element 0 of every buffer, by id: what a kernel takes.
  char* const* pointers() const { return pointers_.data(); }

  // Runs an extern buffer's call into its storage (runtime::runExtern).
  void runExtern(BufferId id);

  // A graph output as a tensor owning a copy of its buffer's bytes.
  ir::HostTensor output(const Output& out) const;

private:
  void bindSymbols(const ir::Graph& graph);
  ir::HostTensor view(BufferId id, const ir::TensorMeta& meta) const;
  runtime::Tensor tensor(BufferId id, const ir::TensorMeta& meta) const;

  const Program& program_;
  std::vector<ir::HostTensor> inputs_;
  sym::Binding binding_;
  std::vector<Storage> storage_;
  std::vector<char*> pointers_;
  std::vector<std::vector<std::byte>> owned_;
};

} // namespace kiln::codegen::detail
