// Runs a loop-level program element by element on the CPU: the oracle for
// lowering (its results must equal the reference interpreter's on the graph)
// and the meaning the emitters must reproduce. Each floating node rounds to
// its dtype (f32 nodes compute in f32, as an emitted kernel does); extern
// calls run through the reference interpreter.
#pragma once

#include <vector>

#include "kiln/codegen/loop_ir.h"
#include "kiln/ir/interpreter.h"

namespace kiln::codegen {

// `inputs`: one per graph placeholder, in order, laid out as the placeholders
// say (the graph's symbols are bound from their sizes, strides and offsets).
// Error{InvalidArgument} for inputs that disagree with the program or an index
// out of range (an embedding index, say); Error{Unsupported} for what the
// evaluator cannot run.
std::vector<ir::HostTensor> evaluate(const Program& program, const ir::Graph& graph,
                                     std::vector<ir::HostTensor> inputs);

} // namespace kiln::codegen
