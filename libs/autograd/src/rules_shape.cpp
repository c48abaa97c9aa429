// Derivative rules of reductions, views, matrix products, indexing and dropout.
#include "rules_impl.h"

#include <numeric>

#include "kiln/common/error.h"
#include "kiln/ir/attention.h"

namespace kiln::autograd::detail {
namespace {

bool keepdim(RuleContext& c) {
  const AttrValue* k = c.attr("keepdim");
  return k && std::get<bool>(*k);
}

// A reduction's grad (or result) with the reduced dims back in, size 1.
ValueId restoreDims(RuleContext& c, ValueId v) {
  if (keepdim(c) || c.meta(0).dim() == 0) return v;
  for (int64_t d : reducedDims(c.node, c.meta(0).dim()))
    v = c.g.call("unsqueeze", {v}, {{"dim", d}});
  return v;
}

Grads sum(RuleContext& c) {
  ir::TensorMeta self = c.meta(0);
  return {expandBack(c.g, *c.grad, self, reducedDims(c.node, self.dim()), keepdim(c))};
}

Grads mean(RuleContext& c) {
  ir::TensorMeta self = c.meta(0);
  std::vector<int64_t> dims = reducedDims(c.node, self.dim());
  sym::Expr count = c.g.symbols().integer(1);
  for (int64_t d : dims)
    if (self.dim()) count = count * self.sizes[d];
  ValueId g = withScalar(c.g, "div", *c.grad, count);
  return {expandBack(c.g, g, self, dims, keepdim(c))};
}

// prod: the product of the others, zeros included: out / x where no zero is
// reduced; where exactly one is, the product of the nonzeros at its place.
Grads prod(RuleContext& c) {
  Ops o{c.g};
  ValueId x = c.in(0);
  ir::TensorMeta self = c.meta(0);
  std::vector<Attr> along;
  if (c.attr("dim")) along = {{"dim", *c.attr("dim")}, {"keepdim", true}};
  ValueId g = restoreDims(c, *c.grad), y = restoreDims(c, c.out);
  if (self.dtype != c.outMeta().dtype) x = o.call("to_dtype", {x}, {{"dtype", c.outMeta().dtype}});
  ValueId zero = o.cmp("eq", x, 0.0);
  ValueId zeros = o.call("sum", {zero}, along);
  ValueId others = o.call("prod", {o.call("where", {zero, x}, {{"self", 1.0}})}, along);
  ValueId none = o.cmp("eq", zeros, 0.0);
  ValueId single = o.both(zero, o.cmp("eq", zeros, 1.0));
  ValueId d = o.call("where", {none, o.div(y, x), o.keep(single, others)});
  return {o.mul(g, d)};
}

// amax and amin: the grad is shared evenly by the elements equal to the result.
Grads extremum(RuleContext& c) {
  Ops o{c.g};
  ValueId hit = o.cmp("eq", c.in(0), restoreDims(c, c.out));
  std::vector<int64_t> dims = reducedDims(c.node, c.meta(0).dim());
  ValueId count = o.call("sum", {hit}, {{"dim", dims}, {"keepdim", true}});
  return {o.keep(hit, o.div(restoreDims(c, *c.grad), count))};
}

Grads reshapeBack(RuleContext& c) {
  return {c.g.call("reshape", {*c.grad}, {{"size", sizesAttr(c.meta(0).sizes)}})};
}

Grads permute(RuleContext& c) {
  auto dims = std::get<std::vector<int64_t>>(*c.attr("dims"));
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[dims[i]] = static_cast<int64_t>(i);
  return {c.g.call("permute", {*c.grad}, {{"dims", inverse}})};
}

Grads transpose(RuleContext& c) {
  return {c.g.call("transpose", {*c.grad}, {{"dim0", *c.attr("dim0")}, {"dim1", *c.attr("dim1")}})};
}

int64_t intAttr(RuleContext& c, std::string_view name, int64_t fallback) {
  const AttrValue* v = c.attr(name);
  return v && std::holds_alternative<int64_t>(*v) ? std::get<int64_t>(*v) : fallback;
}

// Python's start of a slice of `size`, wrapped and clamped.
sym::Expr sliceStart(Graph& g, int64_t start, sym::Expr size) {
  sym::Expr s = start < 0 ? size + start : g.symbols().integer(start);
  return sym::max(sym::min(s, size), 0);
}

Grads slice(RuleContext& c) {
  ir::TensorMeta self = c.meta(0);
  int64_t dim = intAttr(c, "dim", 0);
  sym::Expr start = sliceStart(c.g, intAttr(c, "start", 0), self.sizes[dim]);
  return {scatterSlice(c.g, *c.grad, self, dim, start, intAttr(c, "step", 1))};
}

Grads narrow(RuleContext& c) {
  ir::TensorMeta self = c.meta(0);
  int64_t dim = intAttr(c, "dim", 0), start = intAttr(c, "start", 0);
  sym::Expr at = start < 0 ? self.sizes[dim] + start : c.g.symbols().integer(start);
  return {scatterSlice(c.g, *c.grad, self, dim, at, 1), std::nullopt};
}

Grads select(RuleContext& c) {
  ir::TensorMeta self = c.meta(0);
  int64_t dim = intAttr(c, "dim", 0), index = intAttr(c, "index", 0);
  sym::Expr at = index < 0 ? self.sizes[dim] + index : c.g.symbols().integer(index);
  ValueId g = c.g.call("unsqueeze", {*c.grad}, {{"dim", dim}});
  return {scatterSlice(c.g, g, self, dim, at, 1)};
}

// as_strided: the grad added up per storage element (a scatter over the positions the view
// reads), then read back with the input's own geometry — divided, where that geometry may
// read an element more than once (an expanded input), by how many times it does: torch's
// as_strided_backward shares a storage element's grad among the input elements it is.
Grads asStrided(RuleContext& c) {
  Ops o{c.g};
  ir::TensorMeta self = c.meta(0), out = c.outMeta();
  sym::Expr offset = self.storageOffset;
  const std::string device = ir::toString(self.device);
  if (const AttrValue* a = c.attr("storage_offset")) {
    if (auto* i = std::get_if<int64_t>(a))
      offset = c.g.symbols().integer(*i);
    else if (auto* e = std::get_if<sym::Expr>(a))
      offset = *e;
  } else if (c.arg("storage_offset")) {
    throw Error(ErrorCode::Unsupported,
                "backward of as_strided: a storage offset given as a value");
  }
  auto last = [](const ir::TensorMeta& m, sym::Expr start) { // the last position read, plus 1
    for (size_t k = 0; k < m.dim(); ++k) start = start + (m.sizes[k] - 1) * m.strides[k];
    return start + 1;
  };
  sym::Expr length = sym::max(last(self, self.storageOffset), last(out, offset));
  // Each element's storage position, flat: start + sum_k i_k * stride_k.
  auto positions = [&](const ir::TensorMeta& m, sym::Expr start) {
    ir::Shape ones(m.dim(), c.g.symbols().integer(1));
    ValueId position =
        o.call("reshape",
               {o.call("arange", {}, {{"end", start + 1}, {"start", start}, {"device", device}})},
               {{"size", sizesAttr(ones)}});
    for (size_t k = 0; k < m.dim(); ++k) {
      ir::Shape along = ones;
      along[k] = m.sizes[k];
      ValueId i =
          o.call("reshape", {o.call("arange", {}, {{"end", m.sizes[k]}, {"device", device}})},
                 {{"size", sizesAttr(along)}});
      position = o.add(position, withScalar(c.g, "mul", i, m.strides[k]));
    }
    sym::Expr n = ir::numel(m.sizes, c.g.symbols());
    return o.call("reshape", {o.call("expand", {position}, {{"size", sizesAttr(m.sizes)}})},
                  {{"size", sizesAttr({n})}});
  };
  ir::TensorMeta storage =
      ir::TensorMeta::contiguous(self.dtype, {length}, c.g.symbols(), self.device);
  auto perStorageElement = [&](const ir::TensorMeta& m, sym::Expr start, ValueId values) {
    ValueId flat =
        o.call("reshape", {values}, {{"size", sizesAttr({ir::numel(m.sizes, c.g.symbols())})}});
    return o.call("scatter_add", {zerosOf(c.g, storage), positions(m, start), flat},
                  {{"dim", int64_t{0}}});
  };
  auto asSelf = [&](ValueId buffer) {
    return o.call("as_strided", {buffer},
                  {{"size", sizesAttr(self.sizes)},
                   {"stride", sizesAttr(self.strides)},
                   {"storage_offset", self.storageOffset}});
  };
  ValueId grad = asSelf(perStorageElement(out, offset, *c.grad));
  if (self.isContiguous()) return {grad}; // each storage element read once
  ValueId ones = o.call(
      "ones", {}, {{"size", sizesAttr(self.sizes)}, {"dtype", self.dtype}, {"device", device}});
  return {o.call("div", {grad, asSelf(perStorageElement(self, self.storageOffset, ones))})};
}

// cat: the grad split back into the inputs' sizes (an empty 1-d input, which
// torch's legacy rule skips, gets none).
Grads cat(RuleContext& c) {
  Ops o{c.g};
  int64_t dim = intAttr(c, "dim", 0);
  size_t rank = c.outMeta().dim();
  std::vector<sym::Expr> sizes;
  std::vector<size_t> taking;
  for (size_t i = 0; i < c.node.inputs.size(); ++i) {
    ir::TensorMeta m = c.meta(i);
    if (m.dim() == 1 && rank > 1 && provable(sym::eq(m.sizes[0], 0))) continue;
    sizes.push_back(m.sizes[dim]);
    taking.push_back(i);
  }
  ValueId parts = o.call("split_with_sizes", {*c.grad}, {{"split_sizes", sizes}, {"dim", dim}});
  Grads r(c.node.inputs.size());
  for (size_t k = 0; k < taking.size(); ++k)
    r[taking[k]] = o.call("getitem", {parts}, {{"index", static_cast<int64_t>(k)}});
  return r;
}

Grads stack(RuleContext& c) {
  Ops o{c.g};
  ValueId parts = o.call("unbind", {*c.grad}, {{"dim", intAttr(c, "dim", 0)}});
  Grads r;
  for (size_t k = 0; k < c.node.inputs.size(); ++k)
    r.push_back(o.call("getitem", {parts}, {{"index", static_cast<int64_t>(k)}}));
  return r;
}

// split, split_with_sizes, chunk: the pieces' grads joined (zeros for unused
// pieces); unbind: stacked.
Grads join(RuleContext& c) {
  Ops o{c.g};
  const ir::Value::Tuple pieces = c.g.value(c.out).tuple();
  std::vector<ValueId> grads;
  for (size_t k = 0; k < pieces.size(); ++k)
    grads.push_back(c.pieceGrads[k] ? *c.pieceGrads[k] : zerosOf(c.g, pieces[k]));
  int64_t dim = intAttr(c, "dim", 0);
  Grads r(c.node.inputs.size());
  r[0] = o.call(c.node.target == "unbind" ? "stack" : "cat", grads, {{"dim", dim}});
  return r;
}

ValueId mT(Ops& o, ValueId x) {
  int64_t n = static_cast<int64_t>(o.g.meta(x).dim());
  return o.call("transpose", {x}, {{"dim0", n - 2}, {"dim1", n - 1}});
}

// A matrix stored column-major: the transpose of a contiguous one, as a
// linear layer's weight.t().
bool columnMajor(const ir::TensorMeta& m) {
  return m.dim() == 2 && !m.isContiguous() && m.strides[0].asInteger() == std::optional<int64_t>(1);
}

// x @ y, computed as (yᵀ @ xᵀ)ᵀ when the product should come out in the layout
// of a column-major operand: the grad of a linear layer's weight.t() is then the
// transpose of a contiguous product, so the weight's own grad is contiguous, as
// torch's mm_mat1_backward/mm_mat2_backward lay it out (autograd would copy a
// grad whose strides differ from its parameter's).
ValueId product(Ops& o, const char* op, ValueId x, ValueId y, bool columnMajorResult) {
  if (!columnMajorResult) return o.call(op, {x, y});
  return mT(o, o.call(op, {mT(o, y), mT(o, x)}));
}

Grads mm(RuleContext& c) {
  Ops o{c.g};
  const char* op = c.node.target == "bmm" ? "bmm" : "mm";
  ValueId a = c.in(0), b = c.in(1), g = *c.grad;
  Grads r(2);
  if (c.needs[0]) r[0] = product(o, op, g, mT(o, b), columnMajor(c.meta(0)));
  if (c.needs[1]) r[1] = product(o, op, mT(o, a), g, columnMajor(c.meta(1)));
  return r;
}

// [..., M, K] as the matrix [... * M, K].
ValueId rowsOf(Ops& o, ValueId x) {
  const ir::Shape sizes = o.g.meta(x).sizes;
  sym::Expr rows = sizes[0];
  for (size_t k = 1; k + 1 < sizes.size(); ++k) rows = rows * sizes[k];
  return o.call("reshape", {x}, {{"size", sizesAttr(ir::Shape{rows, sizes.back()})}});
}

// matmul: 1-d operands made matrices (a row, a column), the grad given their
// dims back; batch dims broadcast (backward() sums them back).
Grads matmul(RuleContext& c) {
  Ops o{c.g};
  ValueId a = c.in(0), b = c.in(1), g = *c.grad;
  bool rowA = c.meta(0).dim() == 1, colB = c.meta(1).dim() == 1;
  ir::Shape gs = c.g.meta(g).sizes;
  if (rowA) {
    a = o.call("unsqueeze", {a}, {{"dim", int64_t{0}}});
    gs.insert(gs.end() - (colB ? 0 : 1), c.g.symbols().integer(1));
  }
  if (colB) {
    b = o.call("unsqueeze", {b}, {{"dim", int64_t{-1}}});
    gs.push_back(c.g.symbols().integer(1));
  }
  g = o.call("reshape", {g}, {{"size", sizesAttr(gs)}});
  Grads r(2);
  if (c.needs[0]) {
    ValueId ga = o.call("matmul", {g, mT(o, b)});
    r[0] = rowA ? o.call("squeeze", {ga}, {{"dim", std::vector<int64_t>{-2}}}) : ga;
  }
  if (c.needs[1] && !colB && c.meta(1).dim() == 2 && c.g.meta(a).dim() > 2) {
    // A weight shared across a batch: one product over the batch's rows, not a
    // product per batch element summed afterwards (a [batch, K, N] intermediate).
    r[1] = product(o, "mm", mT(o, rowsOf(o, a)), rowsOf(o, g), columnMajor(c.meta(1)));
  } else if (c.needs[1]) {
    ValueId ga = mT(o, a);
    ValueId gb = colB ? o.call("matmul", {ga, g})
                      : product(o, "matmul", ga, g, columnMajor(c.meta(1)));
    r[1] = colB ? o.call("squeeze", {gb}, {{"dim", std::vector<int64_t>{-1}}}) : gb;
  }
  return r;
}

ValueId asInt64(Ops& o, ValueId index) {
  if (o.g.meta(index).dtype == DType::Int64) return index;
  return o.call("to_dtype", {index}, {{"dtype", DType::Int64}});
}

// index_select: the grad scattered back along dim.
Grads indexSelect(RuleContext& c) {
  Ops o{c.g};
  ir::TensorMeta self = c.meta(0);
  if (self.dim() == 0) return {o.call("reshape", {*c.grad}, {{"size", std::vector<int64_t>{}}})};
  int64_t dim = intAttr(c, "dim", 0);
  ir::TensorMeta gm = c.g.meta(*c.grad);
  ir::Shape along(gm.dim(), c.g.symbols().integer(1));
  along[dim] = gm.sizes[dim];
  ValueId index = o.call("reshape", {asInt64(o, c.in(1))}, {{"size", sizesAttr(along)}});
  index = o.call("expand", {index}, {{"size", sizesAttr(gm.sizes)}});
  return {o.call("scatter_add", {zerosOf(c.g, self), index, *c.grad}, {{"dim", dim}})};
}

Grads gather(RuleContext& c) {
  Ops o{c.g};
  return {
      o.call("scatter_add", {o.zerosLike(c.in(0)), c.in(1), *c.grad}, {{"dim", *c.attr("dim")}}),
      std::nullopt};
}

// embedding: the rows' grads added into the weight's (torch's embedding_dense_backward).
Grads embedding(RuleContext& c) {
  Ops o{c.g};
  ir::TensorMeta w = c.meta(0), idx = c.meta(1);
  sym::Expr n = ir::numel(idx.sizes, c.g.symbols());
  ir::Shape rows = {n, w.sizes[1]};
  ValueId index = o.call("reshape", {asInt64(o, c.in(1))},
                         {{"size", sizesAttr({n, c.g.symbols().integer(1)})}});
  index = o.call("expand", {index}, {{"size", sizesAttr(rows)}});
  ValueId g = o.call("reshape", {*c.grad}, {{"size", sizesAttr(rows)}});
  return {o.call("scatter_add", {zerosOf(c.g, w), index, g}, {{"dim", int64_t{0}}}), std::nullopt};
}

Grads scatterAdd(RuleContext& c) {
  Ops o{c.g};
  return {*c.grad, std::nullopt, o.call("gather", {*c.grad, c.in(1)}, {{"dim", *c.attr("dim")}})};
}

// dropout: the same mask, replayed from the seed and offset on the grad itself
// (dropout(g): g where the element is kept, times 1 / (1 - p) in opmath, as
// eager's backward scales it), so the backward keeps the seed alone, not the
// input for its shape.
Grads dropout(RuleContext& c) {
  Ops o{c.g};
  const AttrValue* train = c.attr("train");
  if (train && !std::get<bool>(*train)) return {*c.grad};
  std::vector<Attr> attrs;
  if (c.attr("p")) attrs.push_back({"p", *c.attr("p")});
  return {o.call("dropout", {*c.grad, c.in(1), c.in(2)}, attrs)};
}

// softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), along dim.
Grads softmax(RuleContext& c) {
  Ops o{c.g};
  std::vector<Attr> along = {{"dim", std::vector<int64_t>{intAttr(c, "dim", 0)}},
                             {"keepdim", true}};
  ValueId y = c.out, g = *c.grad;
  if (c.outMeta().dim() == 0) along.clear();
  if (c.node.target == "softmax") return {o.mul(y, o.sub(g, o.call("sum", {o.mul(g, y)}, along)))};
  return {o.sub(g, o.mul(o.unary("exp", y), o.call("sum", {g}, along)))};
}

} // namespace

// scaled_dot_product_attention (with a mask that needs no grad: backward()
// keeps only those whole), as flash attention's backward: nothing of the [L, S] scores is
// saved; the pieces recompute them from q and k with each row's logsumexp
// (and, with dropout, which weights were dropped from the seed and offset).
Grads attention(RuleContext& c) {
  Ops o{c.g};
  ValueId q = c.in(0), k = c.in(1), v = c.in(2), g = *c.grad;
  std::vector<Attr> attrs = {{"is_causal", c.attr("is_causal") ? *c.attr("is_causal") : false}};
  if (const AttrValue* scale = c.attr("scale")) attrs.push_back({"scale", *scale});
  std::optional<ValueId> mask = ir::attentionMask(c.node);
  std::vector<ValueId> lseOperands = {q, k, v};
  if (mask) lseOperands.push_back(*mask);
  ValueId lse = o.call("attention_lse", lseOperands, attrs);
  // The grads of dropped weights: the forward's random stream again.
  std::vector<ValueId> operands = {g, q, k, v, c.out, lse};
  if (mask) operands.push_back(*mask);
  std::optional<std::pair<ValueId, ValueId>> stream = ir::attentionStream(c.node);
  if (stream && !mask) attrs.push_back({"attn_mask", std::monostate{}}); // the stream binds past it
  if (stream) {
    operands.push_back(stream->first);
    operands.push_back(stream->second);
    attrs.push_back({"dropout_p", ir::attentionDropout(c.node)});
  }
  Grads r(3);
  if (c.needs[0]) r[0] = o.call("attention_grad_query", operands, attrs);
  if (c.needs[1] || c.needs[2]) {
    ValueId kv = o.call("attention_grad_key_value", operands, attrs);
    std::vector<sym::Expr> widths = {c.meta(1).sizes.back(), c.meta(2).sizes.back()};
    ValueId pieces =
        o.call("split_with_sizes", {kv}, {{"split_sizes", widths}, {"dim", int64_t{-1}}});
    for (int64_t i : {0, 1}) r[1 + i] = o.call("getitem", {pieces}, {{"index", i}});
  }
  return r;
}

void addShapeRules(RuleTable& r) {
  r["sum"] = sum;
  r["mean"] = mean;
  r["prod"] = prod;
  r["amax"] = r["amin"] = extremum;
  for (const char* n : {"view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze"})
    r[n] = reshapeBack;
  r["expand"] = [](RuleContext& c) { return Grads{*c.grad}; }; // backward() sums it back
  r["permute"] = permute;
  r["transpose"] = transpose;
  r["slice"] = slice;
  r["narrow"] = narrow;
  r["select"] = select;
  r["as_strided"] = asStrided;
  r["cat"] = cat;
  r["stack"] = stack;
  for (const char* n : {"split", "split_with_sizes", "chunk", "unbind"}) r[n] = join;
  r["mm"] = r["bmm"] = mm;
  r["matmul"] = matmul;
  r["index_select"] = indexSelect;
  r["gather"] = gather;
  r["embedding"] = embedding;
  r["scatter_add"] = scatterAdd;
  r["dropout"] = dropout;
  r["softmax"] = r["log_softmax"] = opmath<softmax>;
  r["scaled_dot_product_attention"] = attention;
}

} // namespace kiln::autograd::detail
