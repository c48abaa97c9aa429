// The graph's textual form, FX-like: the main debugging view.
//
//   symbol s0 in [2, inf] hint 8
//   %0 : f32[s0, 768] = placeholder("x")
//   %1 : f32[768] = placeholder("bias")
//   %2 : f32[s0, 768] = add(%0, %1)
//   %3 : f32[s0, 1] = sum(%2, dim=[1], keepdim=True)
//   return (%2, %3)
//
// A symbol line for each symbol the graph mentions; then one line per node:
// inputs in order, then the attributes that differ from their default as
// name=value; types as TensorMeta's toString (strides only when not contiguous).
#pragma once

#include <string>

#include "kiln/ir/graph.h"

namespace kiln::ir {

std::string print(const Graph& graph);

} // namespace kiln::ir
