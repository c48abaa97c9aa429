// Helpers rules build grads with.
#include "kiln/autograd/grad_builder.h"

#include "kiln/common/error.h"
#include "kiln/sym/range.h"

namespace kiln::autograd {

bool provable(sym::Expr condition) {
  return sym::staticallyKnown(condition) == std::optional<bool>(true);
}

ValueId withScalar(Graph& g, std::string_view op, ValueId x, AttrValue other) {
  return g.call(op, {x}, {{"other", std::move(other)}});
}

AttrValue sizesAttr(const ir::Shape& sizes) {
  return std::vector<sym::Expr>(sizes);
}

ValueId zerosOf(Graph& g, const ir::TensorMeta& like) {
  return g.call("zeros", {},
                {{"size", sizesAttr(like.sizes)},
                 {"dtype", like.dtype},
                 {"device", ir::toString(like.device)}});
}

ValueId reduceTo(Graph& g, ValueId grad, const ir::TensorMeta& target) {
  const ir::TensorMeta have = g.meta(grad); // a copy: calls grow the graph
  if (have.dim() < target.dim())
    throw Error(ErrorCode::Internal, "autograd: a grad of " + ir::toString(have) +
                                         " for an input of " + ir::toString(target));
  size_t lead = have.dim() - target.dim();
  std::vector<int64_t> leading, ones;
  for (size_t i = 0; i < lead; ++i) leading.push_back(static_cast<int64_t>(i));
  for (size_t i = 0; i < target.dim(); ++i)
    if (provable(sym::eq(target.sizes[i], 1)) && !provable(sym::eq(have.sizes[lead + i], 1)))
      ones.push_back(static_cast<int64_t>(i));
  if (!leading.empty()) grad = g.call("sum", {grad}, {{"dim", leading}});
  if (!ones.empty()) grad = g.call("sum", {grad}, {{"dim", ones}, {"keepdim", true}});
  if (g.meta(grad).dtype != target.dtype)
    grad = g.call("to_dtype", {grad}, {{"dtype", target.dtype}});
  return grad;
}

std::vector<int64_t> reducedDims(const ir::Node& node, size_t rank) {
  if (const AttrValue* v = node.attr("dim")) {
    if (auto* i = std::get_if<int64_t>(v)) return {*i};
    if (auto* l = std::get_if<std::vector<int64_t>>(v); l && !l->empty()) return *l;
  }
  std::vector<int64_t> all;
  for (size_t i = 0; i < rank; ++i) all.push_back(static_cast<int64_t>(i));
  return all;
}

ValueId expandBack(Graph& g, ValueId grad, const ir::TensorMeta& self,
                   const std::vector<int64_t>& dims, bool keepdim) {
  if (!keepdim && self.dim() > 0)
    for (int64_t d : dims) grad = g.call("unsqueeze", {grad}, {{"dim", d}}); // dims ascend
  return g.call("expand", {grad}, {{"size", sizesAttr(self.sizes)}});
}

ValueId scatterSlice(Graph& g, ValueId grad, const ir::TensorMeta& self, int64_t dim,
                     sym::Expr start, int64_t step) {
  const ir::TensorMeta gm = g.meta(grad);
  sym::Expr n = gm.sizes.at(dim);
  if (step == 1) { // zeros on either side: a cat, which fuses into the grad's producer
    std::vector<ValueId> pieces;
    auto zeros = [&](sym::Expr size) {
      if (size.asInteger() == std::optional<int64_t>(0)) return;
      ir::TensorMeta part = self;
      part.sizes = gm.sizes;
      part.sizes[static_cast<size_t>(dim)] = size;
      pieces.push_back(zerosOf(g, part));
    };
    zeros(start);
    pieces.push_back(grad);
    zeros(self.sizes.at(static_cast<size_t>(dim)) - start - n);
    if (pieces.size() == 1) return g.call("contiguous", {grad});
    return g.call("cat", pieces, {{"dim", dim}});
  }
  ValueId index =
      g.call("arange", {}, {{"end", start + n * step}, {"start", start}, {"step", step},
                            {"device", ir::toString(gm.device)}});
  ir::Shape along(gm.dim(), g.symbols().integer(1));
  along[dim] = n;
  index = g.call("reshape", {index}, {{"size", sizesAttr(along)}});
  index = g.call("expand", {index}, {{"size", sizesAttr(gm.sizes)}});
  return g.call("scatter_add", {zerosOf(g, self), index, grad}, {{"dim", dim}});
}

} // namespace kiln::autograd
