// Helpers rules build grads with: short spellings of IR calls, and the
// reduction of a broadcast grad back to an input's sizes and dtype.
#pragma once

#include <string_view>
#include <vector>

#include "kiln/ir/graph.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::autograd {

using ir::Attr;
using ir::AttrValue;
using ir::Graph;
using ir::ValueId;

// Whether a condition over sizes holds for every binding in the symbols' ranges.
bool provable(sym::Expr condition);

// `op` of a tensor and a number (or SymExpr) attribute: mul(x, other=2.0).
ValueId withScalar(Graph& g, std::string_view op, ValueId x, AttrValue other);
ValueId zerosOf(Graph& g, const ir::TensorMeta& like); // zeros of like's sizes and dtype

// Sums `grad` over the dims it was broadcast along (leading dims; dims where
// `target` has size 1) and casts it to target's dtype: torch's sum_to_size.
ValueId reduceTo(Graph& g, ValueId grad, const ir::TensorMeta& target);

// Undoes a reduction over `dims` of `self`: unsqueezes the reduced dims (when
// the reduction dropped them) and expands to self's sizes.
ValueId expandBack(Graph& g, ValueId grad, const ir::TensorMeta& self,
                   const std::vector<int64_t>& dims, bool keepdim);

// The dims a reduction node works on (its `dim` attribute, or all of them).
std::vector<int64_t> reducedDims(const ir::Node& node, size_t rank);

// Sizes as an attribute value.
AttrValue sizesAttr(const ir::Shape& sizes);

// Scatters `grad` (the values of a slice of `self` along `dim`: start, step,
// grad's size there) into zeros of self's sizes: the backward of slice,
// select and narrow. A slice of step 1 is padded with zeros instead (a cat,
// which fuses: a scatter is a kernel of its own, in order where not atomic).
ValueId scatterSlice(Graph& g, ValueId grad, const ir::TensorMeta& self, int64_t dim,
                     sym::Expr start, int64_t step);

} // namespace kiln::autograd
