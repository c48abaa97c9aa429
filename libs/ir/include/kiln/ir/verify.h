// The verifier: checks a graph's invariants, for graphs from readers and passes.
#pragma once

#include "kiln/ir/graph.h"

namespace kiln::ir {

// Checks that every input and output is defined before its use, that every
// call names a registered op with arguments its schema accepts, and that every
// stored value equals the one inference gives (so a getitem's index is in
// range and its input a tuple), and that no placeholder or output is a tuple.
// Error{InvalidArgument} naming
// the first bad node ("%3 (add): ...").
void verify(const Graph& graph);

} // namespace kiln::ir
