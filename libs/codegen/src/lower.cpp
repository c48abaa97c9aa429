// Lowering, node by node in graph order: each value becomes a stored buffer
// or a body over index variables that its consumers inline (see lower.h).
#include "kiln/codegen/lower.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "kiln/codegen/product_epilogues.h"
#include "kiln/ir/pad_products.h"
#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

#include "flash_attention.h"
#include "kiln/ir/attention.h"

namespace kiln::codegen {
namespace {

using ir::TensorMeta;
using ir::ValueId;
using Index = std::vector<sym::Expr>;

using ir::opmath;

// What lowering knows of one graph value.
struct Lowered {
  enum Kind { Tensor, SymInt, Tuple } kind = Tensor;
  sym::Expr symInt;
  std::vector<Lowered> pieces;
  TensorMeta meta;
  // Stored: `buffer` holds the storage, its element 0 at the value's inferred
  // storage offset `base`.
  std::optional<BufferId> buffer;
  sym::Expr base;
  // Not stored: the element at index `vars` is `body`.
  Index vars;
  Scalar body;
  // A view of a body folded into its index: the value it views (a body when
  // folded), which realizing stores so that the view aliases it.
  std::optional<ValueId> viewed;
  // A one-hot scatter_add into zeros (Lowering::oneHot): along `dim` a row
  // holds src's one element where index names it; its sum along that dim
  // is the element (sumOfOneHot).
  struct OneHot;
  std::shared_ptr<const OneHot> oneHot;
};

struct Lowered::OneHot {
  Lowered index, src;
  size_t dim;
};

bool isProduct(const std::string& op) {
  return op == "mm" || op == "bmm" || op == "matmul";
}

// The products a library may run, by their result's dtype (LowerOptions).
bool isLibraryProduct(const std::string& op) {
  return isProduct(op) || op == "addmm";
}

// Which composite nodes stay whole for the target's library calls.
std::function<bool(const ir::Graph&, const ir::Node&)> keptFor(const LowerOptions& options) {
  return [&options](const ir::Graph& g, const ir::Node& n) {
    if (options.flashAttention && detail::flashAttentionTakes(g, n)) return true;
    // Kept for findGeluPairs; lowered through its decomposition where no call takes it.
    if (options.biasEpilogues && geluOfABiasedProduct(g, n)) return true;
    if (!options.externOps.count(n.target)) return false;
    if (!isLibraryProduct(n.target) || !n.value.isTensor()) return true;
    return options.externProductDTypes.count(n.value.tensor().dtype) > 0;
  };
}

ReduceOp reduceOpOf(const std::string& op) {
  if (op == "sum" || op == "mean") return ReduceOp::Sum;
  if (op == "prod") return ReduceOp::Prod;
  if (op == "amax") return ReduceOp::Max;
  if (op == "amin") return ReduceOp::Min;
  if (op == "argmax") return ReduceOp::ArgMax;
  if (op == "argmin") return ReduceOp::ArgMin;
  if (op == "any") return ReduceOp::Any;
  if (op == "all") return ReduceOp::All;
  return ReduceOp::None;
}

bool isUnaryMath(const std::string& op) {
  for (const char* u : {"exp",  "exp2",  "log",  "log1p",   "expm1", "sqrt",       "rsqrt", "sin",
                        "cos",  "tan",   "tanh", "sigmoid", "erf",   "reciprocal", "neg",   "abs",
                        "relu", "floor", "ceil", "round",   "trunc", "sign"})
    if (op == u) return true;
  return false;
}

bool isComparison(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}

bool isArithmetic(const std::string& op) {
  for (const char* b : {"add", "sub", "mul", "div", "pow", "maximum", "minimum", "fmod",
                        "remainder", "bitwise_and", "bitwise_or", "bitwise_xor"})
    if (op == b) return true;
  return false;
}

class Lowering {
public:
  Lowering(const ir::Graph& graph, const LowerOptions& options)
      : graph_(&graph), table_(graph.symbols()), options_(options) {}

  // Every cast of the lowering: a value rounded to f16/bf16 and read back stays
  // rounded under LowerOptions::emulatePrecisionCasts (loop_ir's cast folds it).
  Scalar cast(DType dtype, Scalar arg) const {
    return codegen::cast(dtype, std::move(arg), !options_.emulatePrecisionCasts);
  }

  Program run() {
    countUses();
    findWrittenStorage();
    findExternInputs();
    findAttentionPairs();
    findBiasGradPairs();
    findGeluPairs();
    findReluEpilogues();
    for (ValueId id = 0; id < graph_->size(); ++id) {
      const ir::Node& node = graph_->node(id);
      values_.push_back(node.kind == ir::NodeKind::Placeholder ? lowerPlaceholder(node, id)
                                                               : lowerCall(node, id));
      Lowered& v = values_.back();
      // A body read more than once is stored when it is big, and when a library
      // call will store it anyway: its other readers then load it rather than
      // recompute it (a bias grad summing the cat of attention's three grads
      // read them through the cat's index arithmetic: 107 µs against ~25).
      if (v.kind == Lowered::Tensor && !v.buffer && uses_[id] > 1 &&
          (opCount(v.body) > kInlineLimit || externInput_[id]))
        realize(v);
      // An output is stored where it is computed: its buffer then joins the
      // kernel of its neighbours (a layer's residual sum, saved for the
      // backward, is written by the layer_norm kernel reading it), where
      // stored after the graph it got a kernel of its own recomputing it.
      if (v.kind == Lowered::Tensor && !v.buffer && output_[id]) realize(v);
    }
    for (ValueId out : graph_->outputs()) {
      Lowered& v = values_.at(out);
      if (v.kind == Lowered::SymInt) {
        Output o;
        o.symInt = v.symInt;
        program_.outputs.push_back(o);
        continue;
      }
      if (v.kind != Lowered::Tensor)
        throw Error(ErrorCode::Unsupported, "codegen: a tuple graph output (take its pieces)");
      realize(v);
      TensorMeta view = v.meta;
      view.storageOffset = v.meta.storageOffset - v.base;
      program_.outputs.push_back({*v.buffer, view, {}});
    }
    return std::move(program_);
  }

private:
  void countUses() {
    uses_.assign(graph_->size(), 0);
    for (const ir::Node& n : graph_->nodes())
      for (ValueId in : n.inputs) ++uses_.at(in);
    output_.assign(graph_->size(), false);
    for (ValueId out : graph_->outputs()) {
      ++uses_.at(out);
      output_.at(out) = true;
    }
  }

  // Whether each value shares its storage with a tensor a mutation writes:
  // views, pieces and reshapes (which may view) alias their input, a mutation's
  // result the tensor it writes.
  void findWrittenStorage() {
    std::vector<ValueId> storage(graph_->size());
    std::vector<bool> written(graph_->size(), false);
    for (ValueId id = 0; id < graph_->size(); ++id) {
      const ir::Node& n = graph_->node(id);
      storage[id] = id;
      if (n.kind == ir::NodeKind::Placeholder) continue;
      const ir::OpInfo& info = ir::getOp(n.target);
      const std::string& op = n.target;
      if (info.mutates) {
        storage[id] = storage[*info.mutates == 0 ? n.inputs.front() : n.inputs.back()];
        written[storage[id]] = true;
      } else if (ir::isViewOp(op) || n.value.isTuple() || op == "getitem" || op == "reshape" ||
                 op == "flatten" || op == "contiguous") {
        storage[id] = storage[n.inputs.front()];
      }
    }
    written_.assign(graph_->size(), false);
    for (ValueId id = 0; id < graph_->size(); ++id) written_[id] = written[storage[id]];
  }

  // The values a library call reads (stored for it), and the contiguous values
  // a reshape of which it reads (the reshape of their buffer is a view).
  void findExternInputs() {
    externInput_.assign(graph_->size(), false);
    for (ValueId id = graph_->size(); id-- > 0;) {
      const ir::Node& n = graph_->node(id);
      if (n.kind == ir::NodeKind::Placeholder || !n.value.isTensor()) continue;
      if (isExtern(n, n.value.tensor())) {
        for (ValueId in : n.inputs) externInput_[in] = true;
      } else if (externInput_[id] && (n.target == "reshape" || n.target == "view")) {
        ValueId in = n.inputs.front();
        if (graph_->meta(in).isContiguous()) externInput_[in] = true;
      }
    }
  }

  // Flash attention's calls of two results: the attention_lse a forward of
  // the same inputs and attributes writes too (the partitioner puts one beside
  // each attention forward whose backward reads it), and the [dk, dv] an
  // attention_grad_query of the same operands computes with dq (cuDNN's
  // backward makes all three at once).
  void findAttentionPairs() {
    if (!options_.flashAttention) return;
    pairUp("scaled_dot_product_attention", "attention_lse");
    pairUp("attention_grad_query", "attention_grad_key_value");
  }

  // A bias grad and the product of its weight grad, which sums the same rows
  // (productSummingRows; biasGradsAfterProducts put the sum after it): one
  // cuBLASLt call, the sum written by its epilogue, where a column sum of
  // its own would read the grad again (GPT-2's fc1: [8192, 3072] bf16).
  void findBiasGradPairs() {
    if (!options_.biasEpilogues || hasMutations(*graph_)) return;
    for (ValueId id = 0; id < graph_->size(); ++id) {
      std::optional<ValueId> product = productSummingRows(*graph_, id);
      if (!product || *product > id || resultOfCall_.count(*product) ||
          !isExtern(graph_->node(*product), graph_->meta(*product)))
        continue;
      resultOfCall_[*product] = id;
      callOfResult_[id] = *product;
    }
  }

  // Whether a bias grad paired with `product` (findBiasGradPairs) is better a
  // column sum of the kernel computing dy (LowerOptions::biasGradsInKernels):
  // dy is a body or a pointwise buffer of kiln's, and the sum is not one the
  // scheduler could not join there (LowerOptions::biasGradEpilogues).
  bool biasGradInKernels(const ir::Node& product, ValueId sum) const {
    if (!options_.biasGradsInKernels || graph_->node(sum).target != "sum" ||
        options_.biasGradEpilogues.count(sum))
      return false;
    const Lowered& dy = values_.at(product.inputs[0]);
    return !dy.buffer || isPointwise(program_.buffers[*dy.buffer]);
  }

  // A tanh GELU of a biased product (geluProduct): the product's call
  // computes it in cuBLASLt's epilogue as its further result, its own being
  // the pre-activation the backward reads (GPT-2's fc1: no kernel reading the
  // product and writing the gelu, 50 MB each way a layer).
  void findGeluPairs() {
    if (!options_.biasEpilogues || hasMutations(*graph_)) return;
    for (ValueId id = 0; id < graph_->size(); ++id) {
      std::optional<ValueId> product = geluProduct(*graph_, id);
      if (!product || resultOfCall_.count(*product) ||
          !isExtern(graph_->node(*product), graph_->meta(*product)))
        continue;
      resultOfCall_[*product] = id;
      callOfResult_[id] = *product;
    }
  }

  // A ReLU of a product read by it alone (reluProduct): the product's call
  // applies it in cuBLASLt's epilogue, and the relu's value is the call's
  // result (an MLP's hidden layer: no kernel reading the product to write
  // its relu).
  void findReluEpilogues() {
    if (!options_.biasEpilogues || hasMutations(*graph_)) return;
    for (ValueId id = 0; id < graph_->size(); ++id) {
      std::optional<ValueId> product = reluProduct(*graph_, id, uses_);
      if (!product || resultOfCall_.count(*product) ||
          !isExtern(graph_->node(*product), graph_->meta(*product)))
        continue;
      reluOfProduct_[id] = *product;
      productsWithRelu_.insert(*product);
    }
  }

  // Pairs each `second` node with a `first` node of the same inputs and
  // attributes (canonical, defaults dropped: is_causal and scale).
  void pairUp(const char* first, const char* second) {
    std::vector<ValueId> firsts;
    for (ValueId id = 0; id < graph_->size(); ++id) {
      const ir::Node& n = graph_->node(id);
      if (n.kind == ir::NodeKind::Call && n.target == first &&
          detail::flashAttentionTakes(*graph_, n))
        firsts.push_back(id);
    }
    for (ValueId id = 0; id < graph_->size(); ++id) {
      const ir::Node& n = graph_->node(id);
      if (n.kind != ir::NodeKind::Call || n.target != second ||
          !detail::flashAttentionTakes(*graph_, n) || !n.value.tensor().isContiguous())
        continue;
      for (auto f = firsts.begin(); f != firsts.end(); ++f) {
        const ir::Node& call = graph_->node(*f);
        bool same = n.target == "attention_lse" ? ir::lseOfAttention(call, n)
                                                : call.inputs == n.inputs && call.attrs == n.attrs;
        if (!same) continue;
        resultOfCall_[*f] = id;
        callOfResult_[id] = *f;
        firsts.erase(f); // one further result a call
        break;
      }
    }
  }

  // Fresh index variables, one per range, named <prefix><n>; constant ranges
  // bound them (which lets index arithmetic simplify).
  Index freshVars(const char* prefix, const Shape& ranges) {
    Index vars;
    for (sym::Expr size : ranges) {
      std::string name;
      do name = prefix + std::to_string(nextVar_++);
      while (table_.lookup(name));
      std::optional<int64_t> n = size.asInteger();
      sym::Range range{0, n && *n > 0 ? *n - 1 : sym::kInf};
      vars.push_back(table_.declare(name, std::nullopt, range));
    }
    return vars;
  }

  BufferId addBuffer(Buffer buffer) {
    buffer.name = buffer.kind == BufferKind::Input
                      ? buffer.name
                      : "buf" + std::to_string(program_.buffers.size());
    program_.buffers.push_back(std::move(buffer));
    return static_cast<BufferId>(program_.buffers.size() - 1);
  }

  // The element of `v` at `idx` (one index per dim of v).
  Scalar loadAt(const Lowered& v, const Index& idx) {
    if (v.buffer) {
      sym::Expr flat = v.meta.storageOffset - v.base;
      for (size_t k = 0; k < idx.size(); ++k) flat = flat + idx[k] * v.meta.strides[k];
      return load(v.meta.dtype, *v.buffer, flat);
    }
    std::unordered_map<sym::Expr, sym::Expr> bind;
    for (size_t k = 0; k < idx.size(); ++k) bind.emplace(v.vars[k], idx[k]);
    return withFreshIndirect(substitute(v.body, bind));
  }

  // `s` with the symbols its indirect loads bind renamed afresh: a body inlined
  // twice into a kernel must not bind one symbol twice.
  Scalar withFreshIndirect(const Scalar& s) {
    std::vector<Scalar> args;
    for (const Scalar& a : s->args) args.push_back(withFreshIndirect(a));
    if (s->kind == ScalarKind::Load && !s->indirect.empty()) {
      Index symbols = freshVars("t", Shape(s->indirect.size(), table_.integer(0)));
      std::unordered_map<sym::Expr, sym::Expr> rename;
      for (size_t k = 0; k < symbols.size(); ++k) rename.emplace(s->indirect[k], symbols[k]);
      return indirectLoad(s->dtype, s->buffer, sym::substitute(s->index, rename),
                          std::move(symbols), std::move(args), s->indirectSizes);
    }
    return withArgs(s, std::move(args));
  }

  // `s` with other arguments (itself when they are the same).
  static Scalar withArgs(const Scalar& s, std::vector<Scalar> args) {
    if (args == s->args) return s;
    ScalarNode n = *s;
    n.args = std::move(args);
    return std::make_shared<const ScalarNode>(std::move(n));
  }

  // `v`'s index for the output index `idx` of an op that broadcast v to `sizes`.
  Index broadcastIndex(const TensorMeta& v, const Index& idx, const Shape& sizes) {
    Index out;
    size_t lead = sizes.size() - v.dim();
    for (size_t k = 0; k < v.dim(); ++k) {
      bool broadcast = v.sizes[k].asInteger() == 1 && sizes[lead + k].asInteger() != 1;
      out.push_back(broadcast ? table_.integer(0) : idx[lead + k]);
    }
    return out;
  }

  // Stores a body into a new buffer laid out as its meta; a folded view stores
  // the value it views instead, and views that.
  void realize(Lowered& v) {
    if (v.buffer) return;
    if (v.viewed) {
      Lowered& viewed = values_.at(*v.viewed);
      realize(viewed);
      v.buffer = viewed.buffer;
      v.base = viewed.base; // as lowerView's views of stored values
      return;
    }
    Buffer b;
    b.kind = BufferKind::Computed;
    b.layout = v.meta;
    b.layout.storageOffset = table_.integer(0);
    b.loops.vars = v.vars;
    b.loops.ranges = v.meta.sizes;
    b.loops.body = cast(v.meta.dtype, v.body);
    inMemoryOrder(b);
    v.buffer = addBuffer(std::move(b));
    v.base = v.meta.storageOffset;
  }

  // A value stored in a permuted layout (a weight's grad as the transpose of
  // the product that made it) loops over its dims in memory order, the
  // largest stride outermost: neighbouring items store (and mostly read)
  // neighbouring elements. The buffer's layout lists its dims in that order
  // too (readers index it through the value's own strides).
  static void inMemoryOrder(Buffer& b) {
    std::vector<int64_t> strides;
    for (sym::Expr s : b.layout.strides) {
      std::optional<int64_t> v = s.asInteger();
      if (!v) return;
      strides.push_back(*v);
    }
    std::vector<size_t> order(strides.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t c) { return strides[a] > strides[c]; });
    if (std::is_sorted(order.begin(), order.end())) return;
    Buffer permuted = b;
    for (size_t k = 0; k < order.size(); ++k) {
      permuted.layout.sizes[k] = b.layout.sizes[order[k]];
      permuted.layout.strides[k] = b.layout.strides[order[k]];
      permuted.loops.vars[k] = b.loops.vars[order[k]];
      permuted.loops.ranges[k] = b.loops.ranges[order[k]];
    }
    b = std::move(permuted);
  }

  Lowered pointwise(const TensorMeta& meta, const std::function<Scalar(const Index&)>& fn) {
    Lowered v;
    v.meta = meta;
    v.vars = freshVars("i", meta.sizes);
    v.body = cast(meta.dtype, fn(v.vars));
    return v;
  }

  Lowered lowerPlaceholder(const ir::Node& node, ValueId id) {
    Lowered v;
    uint32_t placeholder = inputCount_++; // the run's inputs are every placeholder, symbolic ints too
    if (node.value.isSymInt()) {
      v.kind = Lowered::SymInt;
      v.symInt = node.value.symInt();
      return v;
    }
    Buffer b;
    b.kind = BufferKind::Input;
    b.name = node.target;
    b.layout = node.value.tensor();
    b.layout.storageOffset = table_.integer(0);
    b.placeholder = placeholder;
    (void)id;
    v.meta = node.value.tensor();
    v.base = v.meta.storageOffset;
    v.buffer = addBuffer(std::move(b));
    return v;
  }

  // --- arguments ---

  struct Args {
    std::unique_ptr<ir::OpCall> call;
    std::vector<const ir::Value*> inputs;
    std::vector<ir::Attr> attrs;
  };

  Args bind(const ir::Node& node) {
    Args a;
    for (ValueId in : node.inputs) a.inputs.push_back(&graph_->value(in));
    a.attrs = node.attrs;
    a.call = std::make_unique<ir::OpCall>(ir::getOp(node.target), a.inputs, a.attrs, table_);
    return a;
  }

  // The lowered input bound to a tensor argument, or nullptr when absent.
  Lowered* inputOf(const ir::Node& node, const Args& a, std::string_view arg) {
    const ir::Value* v = a.call->input(arg);
    if (!v) return nullptr;
    for (size_t i = 0; i < a.inputs.size(); ++i)
      if (a.inputs[i] == v) return &values_.at(node.inputs[i]);
    return nullptr;
  }

  // A Scalar argument's dtype and kind for type promotion.
  void addOperand(ir::ResultType& rt, const ir::Node& node, const Args& a, std::string_view arg) {
    if (!a.call->has(arg)) return;
    if (Lowered* in = inputOf(node, a, arg)) {
      if (in->kind == Lowered::SymInt) return rt.add(DType::Int64, ir::Operand::Scalar);
      return rt.add(in->meta.dtype, in->meta.dim() ? ir::Operand::Tensor : ir::Operand::ZeroDim);
    }
    const ir::AttrValue& v = a.call->attr(arg);
    DType t = std::holds_alternative<double>(v) ? DType::Float64
              : std::holds_alternative<bool>(v) ? DType::Bool
                                                : DType::Int64;
    rt.add(t, ir::Operand::Scalar);
  }

  // A Scalar or Tensor argument's element for the output index `idx` over `sizes`.
  Scalar operand(const ir::Node& node, const Args& a, std::string_view arg, const Index& idx,
                 const Shape& sizes) {
    if (Lowered* in = inputOf(node, a, arg)) {
      if (in->kind == Lowered::SymInt) return indexOf(DType::Int64, in->symInt);
      return loadAt(*in, broadcastIndex(in->meta, idx, sizes));
    }
    const ir::AttrValue& v = a.call->attr(arg);
    if (auto* d = std::get_if<double>(&v)) return constantF(DType::Float64, *d);
    if (auto* b = std::get_if<bool>(&v)) return constantI(DType::Bool, *b);
    if (auto* i = std::get_if<int64_t>(&v)) return constantI(DType::Int64, *i);
    if (auto* e = std::get_if<sym::Expr>(&v)) return indexOf(DType::Int64, *e);
    throw Error(ErrorCode::Internal, "codegen: argument " + std::string(arg) + " has no value");
  }

  // --- ops ---

  Lowered lowerCall(const ir::Node& node, ValueId id) {
    const std::string& op = node.target;
    const ir::OpInfo& info = ir::getOp(op);
    if (info.mutates) return lowerMutation(node, info, id);
    if (op == "item" || op == "_assert_scalar") return lowerRuntimeStep(node);
    Args a = bind(node);
    if (node.value.isSymInt()) {
      Lowered v;
      v.kind = Lowered::SymInt;
      v.symInt = node.value.symInt();
      return v;
    }
    if (node.value.isTuple()) return lowerPieces(node, id, a);
    if (reluOfProduct_.count(id)) return values_.at(node.inputs[0]); // the epilogue's result
    const TensorMeta& meta = node.value.tensor();
    if (op == "gelu" && !callOfResult_.count(id)) return lowerComposite(node); // kept, untaken
    if (op == "getitem") {
      Lowered piece = values_.at(node.inputs[0]).pieces.at(std::get<int64_t>(node.attrs[0].value));
      return piece;
    }
    if (ir::isViewOp(op)) return lowerView(node, id, a, meta);
    if (isExtern(node, meta) || op == "nonzero" || callOfResult_.count(id))
      return lowerExtern(node, id, meta);
    if (isProduct(op)) return lowerProduct(node, meta);
    if (op == "dropout") return lowerDropout(node, a, meta);
    if (op == "scatter_add") return lowerScatterAdd(node, a, meta);
    if (ReduceOp r = reduceOpOf(op); r != ReduceOp::None)
      return lowerReduction(node, id, a, meta, r);
    if (std::optional<Lowered> v = lowerPointwise(node, a, meta)) return std::move(*v);
    if (std::optional<Lowered> v = lowerCopy(node, id, a, meta)) return std::move(*v);
    if (std::optional<Lowered> v = lowerCreation(node, a, meta)) return std::move(*v);
    if (std::optional<Lowered> v = lowerIndexing(node, a, meta)) return std::move(*v);
    throw Error(ErrorCode::Unsupported, "codegen: no lowering for op '" + op + "' yet");
  }

  // An in-place or out= op: its functional op's result, stored into the
  // written tensor's memory (an alias buffer, never fused); its value is that
  // tensor. Bodies that read the tensor's memory are stored first, so they
  // read it as it was; a result that reads it is stored apart first too.
  Lowered lowerMutation(const ir::Node& node, const ir::OpInfo& info, ValueId id) {
    ValueId written = *info.mutates == 0 ? node.inputs.front() : node.inputs.back();
    if (values_.at(written).kind != Lowered::Tensor)
      throw Error(ErrorCode::Unsupported, "codegen: " + node.target + " writes a non-tensor");
    realize(values_.at(written));
    BufferId memory = *values_.at(written).buffer;
    for (Lowered& v : values_) {
      if (v.kind == Lowered::Tensor && !v.buffer && reads(v.body, memory)) realize(v);
      for (Lowered& piece : v.pieces) // of a split folded into its input's body
        if (!piece.buffer && reads(piece.body, memory)) realize(piece);
    }
    ir::Node functional = node;
    functional.target = info.functional;
    if (*info.mutates != 0) functional.inputs.pop_back();
    std::vector<const ir::Value*> ins;
    for (ValueId in : functional.inputs) ins.push_back(&graph_->value(in));
    functional.value = ir::inferCall(functional.target, ins, functional.attrs, table_);
    // As torch (and the interpreter): sum, mean and prod into a wider
    // floating out accumulate in out's dtype.
    const ir::TensorMeta& out = graph_->value(written).tensor();
    ir::TensorMeta r = functional.value.tensor();
    bool accumulates =
        info.functional == "sum" || info.functional == "mean" || info.functional == "prod";
    if (*info.mutates != 0 && accumulates && ir::isFloating(r.dtype) && ir::isFloating(out.dtype) &&
        elementSize(out.dtype) > elementSize(r.dtype)) {
      r.dtype = out.dtype;
      functional.value = r;
    }
    Lowered result = ir::getOp(functional.target).decompose ? lowerComposite(functional)
                                                            : lowerCall(functional, id);
    if (result.kind != Lowered::Tensor)
      throw Error(ErrorCode::Unsupported, "codegen: " + node.target + " of a non-tensor result");
    if (!result.buffer && reads(result.body, memory)) realize(result);
    const Lowered& target = values_.at(written);
    Buffer b;
    b.kind = BufferKind::Computed;
    b.layout = target.meta;
    b.layout.storageOffset = target.meta.storageOffset - target.base;
    b.aliasOf = memory;
    b.loops.ranges = target.meta.sizes;
    b.loops.vars = freshVars("i", target.meta.sizes);
    b.loops.body = cast(target.meta.dtype, loadAt(result, b.loops.vars));
    addBuffer(std::move(b));
    Lowered v;
    v.meta = target.meta;
    v.buffer = target.buffer;
    v.base = target.base;
    return v;
  }

  // A composite op met outside the decomposed graph (the functional op of
  // gelu_ or softmax_out): its decomposition, lowered with its inputs bound to
  // the values lowered so far.
  Lowered lowerComposite(const ir::Node& node) {
    ir::Graph sub(table_);
    std::vector<ValueId> ins;
    for (ValueId in : node.inputs) ins.push_back(sub.placeholder("in", graph_->value(in)));
    sub.setOutputs({sub.call(node.target, ins, node.attrs)});
    ir::Graph core = ir::decompose(sub, keptFor(options_));
    std::vector<Lowered> inner;
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      inner.push_back(values_.at(node.inputs[k]));
      inner.back().viewed.reset(); // names an outer value: realized, it is stored apart
    }
    std::vector<bool> written(core.size(), false); // the decomposition writes nothing
    std::swap(values_, inner);
    std::swap(written_, written);
    const ir::Graph* outer = graph_;
    graph_ = &core;
    try {
      for (ValueId k = static_cast<ValueId>(node.inputs.size()); k < core.size(); ++k)
        values_.push_back(lowerCall(core.node(k), k));
    } catch (...) {
      graph_ = outer;
      std::swap(values_, inner);
      std::swap(written_, written);
      throw;
    }
    Lowered result = values_.at(core.outputs().at(0));
    result.viewed.reset(); // names a value of the decomposition
    graph_ = outer;
    std::swap(values_, inner);
    std::swap(written_, written);
    // realized values of the decomposition stay buffers; bodies stay bodies
    return result;
  }

  static bool reads(const Scalar& s, BufferId buffer) {
    if (s->kind == ScalarKind::Load && s->buffer == buffer) return true;
    for (const Scalar& a : s->args)
      if (reads(a, buffer)) return true;
    return false;
  }

  // A view of a stored value aliases its storage, with the view's meta. A view
  // of a body is a body too: the input's body read at the input index the
  // view's index maps to (viewIndex), fused into whatever reads it. The body is
  // stored first (and viewed) when a mutation writes the storage the view
  // would share, which must then be memory; for as_strided, which may overlap
  // its elements; and for an expand of a body bigger than kInlineLimit, which
  // each broadcast element would recompute.
  Lowered lowerView(const ir::Node& node, ValueId id, const Args& a, const TensorMeta& meta) {
    ValueId input = node.inputs[0];
    Lowered& in = values_.at(input);
    bool recomputed = node.target == "expand" && meta.sizes != in.meta.sizes;
    if (!in.buffer && !written_.at(id) && !(recomputed && opCount(in.body) > kInlineLimit)) {
      Lowered v;
      v.meta = meta;
      v.vars = freshVars("i", meta.sizes);
      if (std::optional<Index> at = viewIndex(node.target, a, in.meta, meta, v.vars)) {
        v.body = loadAt(in, *at);
        v.viewed = in.viewed ? *in.viewed : input;
        return v;
      }
    }
    realize(in);
    Lowered v;
    v.meta = meta;
    v.buffer = in.buffer;
    // Inferred offsets, as_strided's too, are in the coordinates of the root's
    // storage: the view keeps its input's base.
    v.base = in.base;
    return v;
  }

  // The index of the view's input that the view's index `i` reads, per view
  // op; nullopt for as_strided.
  std::optional<Index> viewIndex(const std::string& op, const Args& a, const TensorMeta& in,
                                 const TensorMeta& out, const Index& i) {
    size_t rank = in.dim();
    auto dimArg = [&](const char* arg, size_t of) {
      int64_t d = a.call->intArg(arg);
      return static_cast<size_t>(d < 0 ? d + int64_t(std::max<size_t>(of, 1)) : d);
    };
    sym::Expr zero = table_.integer(0);
    if (op == "detach") return i;
    if (rank == 0 && (op == "permute" || op == "transpose" || op == "squeeze")) return i;
    if (op == "permute" || op == "transpose") { // out dim k is in dim dims[k]
      std::vector<int64_t> dims;
      for (size_t k = 0; k < rank; ++k) dims.push_back(int64_t(k));
      if (op == "permute")
        dims = a.call->intList("dims");
      else
        std::swap(dims[dimArg("dim0", rank)], dims[dimArg("dim1", rank)]);
      Index at(rank);
      for (size_t k = 0; k < rank; ++k)
        at[static_cast<size_t>(dims[k] < 0 ? dims[k] + int64_t(rank) : dims[k])] = i[k];
      return at;
    }
    if (op == "expand") { // new leading dims dropped; a dim broadcast from 1 reads 0
      size_t lead = out.dim() - rank;
      Index at;
      for (size_t k = 0; k < rank; ++k)
        at.push_back(out.sizes[lead + k] == in.sizes[k] ? i[lead + k] : zero);
      return at;
    }
    if (op == "squeeze") { // a dropped dim (chosen, of size 1) reads 0
      std::vector<bool> chosen(rank, !a.call->has("dim"));
      if (a.call->has("dim"))
        for (int64_t d : a.call->intList("dim")) chosen.at(d < 0 ? d + int64_t(rank) : d) = true;
      Index at;
      size_t next = 0;
      for (size_t k = 0; k < rank; ++k) {
        bool dropped = chosen[k] && sym::staticallyKnown(sym::eq(in.sizes[k], 1)) == true;
        at.push_back(dropped ? zero : i.at(next++));
      }
      if (next != out.dim()) return std::nullopt;
      return at;
    }
    if (op == "unsqueeze") {
      Index at = i;
      at.erase(at.begin() + static_cast<std::ptrdiff_t>(dimArg("dim", out.dim())));
      return at;
    }
    if (op == "select" || op == "narrow" || op == "slice") {
      size_t d = dimArg("dim", rank);
      sym::Expr size = in.sizes[d];
      Index at = i;
      if (op == "select") { // the index inserted along dim (negative from the end)
        int64_t index = a.call->intArg("index");
        at.insert(at.begin() + static_cast<std::ptrdiff_t>(d),
                  index < 0 ? size + index : table_.integer(index));
      } else if (op == "narrow") { // start + i; a negative start counts from max(size, 1)
        int64_t start = a.call->intArg("start");
        at[d] = (start < 0 ? sym::max(size, 1) + start : table_.integer(start)) + i[d];
      } else { // start + step * i, the start clamped as Python's slices
        sym::Expr start = zero;
        if (a.call->has("start")) {
          int64_t s = a.call->intArg("start");
          start = sym::max(sym::min(s < 0 ? size + s : table_.integer(s), size), 0);
        }
        at[d] = start + i[d] * a.call->intArg("step");
      }
      return at;
    }
    if (op == "unflatten") { // the new dims' row-major position along dim
      size_t d = dimArg("dim", rank), parts = out.dim() - rank + 1;
      sym::Expr flat = zero;
      for (size_t k = d; k < d + parts; ++k) flat = flat * out.sizes[k] + i[k];
      Index at(i.begin(), i.begin() + static_cast<std::ptrdiff_t>(d));
      at.push_back(flat);
      at.insert(at.end(), i.begin() + static_cast<std::ptrdiff_t>(d + parts), i.end());
      return at;
    }
    if (op == "view" || op == "reshape" || op == "flatten" || op == "contiguous")
      return rowMajorIndex(i, out.sizes, in.sizes); // contiguous: as a view (lowerCopy)
    return std::nullopt;
  }

  // The index into `from` at the same row-major position as `i` in `sizes`
  // (reshape, view). The dims fall into consecutive groups of equal products
  // (view(b, s, h, d) of [b, s, h*d]: [b], [s], [h, d] against [h*d]), and
  // each group maps on its own: the group's flat position, unflattened with
  // floor-div and mod where `from` has several dims in it. Where sizes do not
  // say which product is smaller, the rest is one group.
  Index rowMajorIndex(const Index& i, const Shape& sizes, const Shape& from) {
    sym::Expr zero = table_.integer(0), one = table_.integer(1);
    for (const Shape* s : {&sizes, &from}) // no element: nothing is read (nor divided by 0)
      for (sym::Expr size : *s)
        if (size.asInteger() == 0) return Index(from.size(), zero);
    Index at(from.size());
    for (size_t o = 0, n = 0; o < sizes.size() || n < from.size();) {
      size_t oEnd = o, nEnd = n;
      sym::Expr outProduct = one, inProduct = one;
      while (oEnd < sizes.size() || nEnd < from.size()) {
        if (oEnd > o && nEnd > n && outProduct == inProduct) break;
        bool smallerOut = sym::staticallyKnown(sym::lt(outProduct, inProduct)) == true;
        if (nEnd == from.size() || (oEnd < sizes.size() && (oEnd == o || smallerOut)))
          outProduct = outProduct * sizes[oEnd++];
        else
          inProduct = inProduct * from[nEnd++];
      }
      sym::Expr flat = zero;
      for (size_t k = o; k < oEnd; ++k) flat = flat * sizes[k] + i[k];
      for (size_t k = nEnd; k-- > n;) {
        at[k] = k == n ? flat : sym::mod(flat, from[k]);
        flat = sym::floorDiv(flat, from[k]);
      }
      o = oEnd;
      n = nEnd;
    }
    return at;
  }

  // split, split_with_sizes, chunk and unbind: views of consecutive pieces
  // along dim, each folded as narrow or select when the input is a body (as
  // lowerView).
  Lowered lowerPieces(const ir::Node& node, ValueId id, const Args& a) {
    ValueId input = node.inputs[0];
    Lowered& in = values_.at(input);
    bool fold = !in.buffer && !written_.at(id);
    if (!fold) realize(in);
    size_t rank = in.meta.dim();
    int64_t dim = a.call->intArg("dim");
    size_t d = static_cast<size_t>(dim < 0 ? dim + int64_t(rank) : dim);
    bool unbind = node.target == "unbind";
    sym::Expr start = table_.integer(0);
    Lowered v;
    v.kind = Lowered::Tuple;
    for (const TensorMeta& m : node.value.tuple()) {
      Lowered piece;
      piece.meta = m;
      if (fold) {
        piece.vars = freshVars("i", m.sizes);
        Index at = piece.vars;
        if (unbind)
          at.insert(at.begin() + static_cast<std::ptrdiff_t>(d), start);
        else
          at[d] = start + at[d];
        piece.body = loadAt(in, at);
        piece.viewed = in.viewed ? *in.viewed : input;
      } else {
        piece.buffer = in.buffer;
        piece.base = in.base;
      }
      start = unbind ? start + 1 : start + m.sizes[d];
      v.pieces.push_back(std::move(piece));
    }
    return v;
  }

  // Whether the target runs this node as a library call (LowerOptions).
  bool isExtern(const ir::Node& node, const TensorMeta& meta) {
    if (options_.flashAttention && detail::flashAttentionTakes(*graph_, node)) return true;
    if (!options_.externOps.count(node.target)) return false;
    if (!isLibraryProduct(node.target)) return true;
    for (ValueId in : node.inputs)
      if (graph_->value(in).isTensor() && graph_->value(in).tensor().dtype != meta.dtype)
        return false;
    return options_.externProductDTypes.count(meta.dtype) > 0;
  }

  Lowered lowerExtern(const ir::Node& node, ValueId id, const TensorMeta& meta) {
    if (auto f = callOfResult_.find(id); f != callOfResult_.end())
      return lowerPair(f->second, id).second;
    if (auto l = resultOfCall_.find(id); l != resultOfCall_.end()) {
      if (!biasGradInKernels(node, l->second)) return lowerPair(id, l->second).first;
      kernelBiasGrads_.insert(l->second); // a column sum of its own: unpaired
      callOfResult_.erase(l->second);
      resultOfCall_.erase(l);
    }
    Lowered v;
    v.meta = meta;
    v.base = meta.storageOffset;
    Buffer call = externBuffer(node, meta);
    if (productsWithRelu_.count(id)) call.call.attrs.push_back({"epilogue", std::string("relu")});
    v.buffer = addBuffer(std::move(call));
    return v;
  }

  // A call and its further result (findAttentionPairs, findBiasGradPairs,
  // findGeluPairs): one call of two results, made when the first of the two
  // nodes is lowered.
  std::pair<Lowered, Lowered> lowerPair(ValueId first, ValueId second) {
    auto [at, fresh] = pairs_.try_emplace(first);
    if (fresh) {
      const ir::Node& node = graph_->node(first);
      Lowered& out = at->second.first;
      out.meta = node.value.tensor();
      out.base = out.meta.storageOffset;
      Buffer call = externBuffer(node, out.meta);
      if (node.target == "attention_grad_query" && detail::flashKernelsRun(*graph_, node))
        call.call.attrs.push_back(
            {"kv_kernel", detail::flashAttentionKernel(*graph_, graph_->node(second))});
      if (graph_->node(second).target == "sum") // the product's first operand's row sums
        call.call.attrs.push_back({"epilogue", std::string("bias_grad")});
      if (graph_->node(second).target == "gelu") // the gelu of the product and bias
        call.call.attrs.push_back({"epilogue", std::string("gelu_tanh_aux")});
      Lowered& rows = at->second.second;
      rows.meta = graph_->meta(second);
      rows.base = rows.meta.storageOffset;
      Buffer result;
      result.kind = BufferKind::ExternResult;
      result.layout = rows.meta;
      result.layout.storageOffset = table_.integer(0);
      out.buffer = addBuffer(std::move(call));
      rows.buffer = addBuffer(std::move(result));
      program_.buffers[*out.buffer].call.results.push_back(*rows.buffer);
    }
    return at->second;
  }

  // An extern buffer of this layout calling the node's op on its inputs, stored first.
  Buffer externBuffer(const ir::Node& node, const TensorMeta& meta) {
    Buffer b;
    b.kind = BufferKind::Extern;
    b.layout = meta;
    b.layout.storageOffset = table_.integer(0);
    b.call.op = node.target;
    b.call.attrs = node.attrs;
    if (options_.flashAttention && detail::flashKernelsRun(*graph_, node)) {
      b.call.attrs.push_back({"kernel", detail::flashAttentionKernel(*graph_, node)});
      b.call.attrs.push_back({"block_rows", detail::flashAttentionBlockRows(node)});
      if (node.target == "attention_grad_query" || node.target == "attention_grad_key_value")
        b.call.attrs.push_back({"delta_kernel", detail::flashAttentionDeltaKernel(*graph_, node)});
    }
    for (ValueId in : node.inputs) {
      Lowered& v = values_.at(in);
      if (v.kind != Lowered::Tensor)
        throw Error(ErrorCode::Unsupported, "codegen: extern " + node.target +
                                                " with a non-tensor input is not supported yet");
      realize(v);
      TensorMeta view = v.meta;
      view.storageOffset = v.meta.storageOffset - v.base;
      b.call.inputs.push_back(*v.buffer);
      b.call.inputViews.push_back(view);
    }
    return b;
  }

  // item (binding its unbacked symbol from a tensor's element) and _assert_scalar:
  // steps of the plan that the runtime runs itself (no memory of their own;
  // the 0-d buffer only orders them among the other steps). Their value is the
  // symbolic scalar the graph gave them.
  Lowered lowerRuntimeStep(const ir::Node& node) {
    addBuffer(externBuffer(node, TensorMeta::contiguous(DType::Int64, {}, table_)));
    Lowered v;
    v.kind = Lowered::SymInt;
    v.symInt = node.value.symInt();
    return v;
  }

  // A matrix product as a loop reduction: out[..., i, j] = sum_k a[..., i, k] * b[..., k, j],
  // torch.matmul's forms (a 1-d a is one row, a 1-d b one column, which the result
  // drops; batch dims broadcast), the products and the sum in opmath.
  Lowered lowerProduct(const ir::Node& node, const TensorMeta& meta) {
    const Lowered& a = values_.at(node.inputs[0]);
    const Lowered& b = values_.at(node.inputs[1]);
    bool rowA = a.meta.dim() == 1, columnB = b.meta.dim() == 1;
    size_t rank = meta.dim(), batch = rank - (rowA ? 0 : 1) - (columnB ? 0 : 1);
    Buffer buffer;
    buffer.kind = BufferKind::Computed;
    buffer.layout = meta;
    buffer.layout.storageOffset = table_.integer(0);
    Loops& l = buffer.loops;
    l.reduce = ReduceOp::Sum;
    l.accumulator = opmath(meta.dtype);
    l.ranges = meta.sizes;
    l.vars = freshVars("i", meta.sizes);
    l.reductionRanges = {a.meta.sizes.back()};
    l.reductionVars = freshVars("r", l.reductionRanges);
    sym::Expr k = l.reductionVars[0];
    auto batchIndex = [&](const TensorMeta& m, size_t matrixDims) { // right-aligned, broadcast
      Index idx;
      size_t own = m.dim() - matrixDims;
      for (size_t d = 0; d < own; ++d) {
        size_t at = batch - own + d;
        bool broadcast = m.sizes[d].asInteger() == 1 && meta.sizes[at].asInteger() != 1;
        idx.push_back(broadcast ? table_.integer(0) : l.vars[at]);
      }
      return idx;
    };
    Index ai = batchIndex(a.meta, rowA ? 1 : 2), bi = batchIndex(b.meta, columnB ? 1 : 2);
    if (!rowA) ai.push_back(l.vars[batch]);
    ai.push_back(k);
    bi.push_back(k);
    if (!columnB) bi.push_back(l.vars[rank - 1]);
    l.body = binary("mul", l.accumulator, cast(l.accumulator, loadAt(a, ai)),
                    cast(l.accumulator, loadAt(b, bi)));
    Lowered v;
    v.meta = meta;
    v.base = meta.storageOffset;
    v.buffer = addBuffer(std::move(buffer));
    return v;
  }

  // dropout: the input where the element's draw (Philox, counter offset + its
  // row-major position) is >= p, times 1 / (1 - p) in opmath; 0 elsewhere (the
  // interpreter's stream, docs/ir.md). train=False copies.
  Lowered lowerDropout(const ir::Node& node, const Args& a, const TensorMeta& meta) {
    const Lowered& x = *inputOf(node, a, "input");
    const Lowered& seed = *inputOf(node, a, "seed");
    const Lowered& offset = *inputOf(node, a, "offset");
    if (!a.call->boolArg("train"))
      return pointwise(meta, [&](const Index& i) { return loadAt(x, i); });
    double p = a.call->floatArg("p");
    DType compute = opmath(meta.dtype);
    return pointwise(meta, [&](const Index& i) {
      sym::Expr position = table_.integer(0);
      for (size_t k = 0; k < i.size(); ++k) position = position * meta.sizes[k] + i[k];
      Scalar counter = binary("add", DType::Int64, cast(DType::Int64, loadAt(offset, {})),
                              indexOf(DType::Int64, position));
      Scalar draw = philox(cast(DType::Int64, loadAt(seed, {})), counter);
      Scalar kept =
          binary("mul", compute, cast(compute, loadAt(x, i)), constantF(compute, 1 / (1 - p)));
      return where(binary("ge", DType::Bool, draw, constantF(DType::Float64, p)), kept,
                   constantF(compute, 0));
    });
  }

  // scatter_add: self copied into a buffer of the result's layout, then a
  // scatter over index's shape adding src's element to the element that index
  // names along dim (Loops::scatter), in that buffer's memory (an alias buffer:
  // a kernel of its own). 0-d and 1-d tensors stand for each other, as in torch.
  Lowered lowerScatterAdd(const ir::Node& node, const Args& a, const TensorMeta& meta) {
    const Lowered& self = *inputOf(node, a, "self");
    Lowered& index = *inputOf(node, a, "index");
    Lowered& src = *inputOf(node, a, "src");
    size_t rank = meta.dim(), indexRank = index.meta.dim();
    int64_t d = a.call->intArg("dim");
    size_t dim = static_cast<size_t>(d < 0 ? d + int64_t(std::max<size_t>(rank, 1)) : d);
    if (std::optional<Lowered> hot = oneHot(self, index, src, meta, dim)) return *hot;
    Lowered result = pointwise(meta, [&](const Index& i) { return loadAt(self, i); });
    realize(result);
    Buffer b;
    b.kind = BufferKind::Computed;
    b.layout = meta;
    b.layout.storageOffset = table_.integer(0);
    b.aliasOf = result.buffer;
    Loops& l = b.loops;
    l.ranges = index.meta.sizes;
    l.vars = freshVars("i", l.ranges);
    bool atomic = options_.unorderedScatter &&
                  (meta.dtype == DType::Float32 || meta.dtype == DType::Float64 ||
                   meta.dtype == DType::Int32 || meta.dtype == DType::Int64);
    l.scatterDim = atomic ? l.vars.size() : dim;
    auto at = [&](size_t r) { // the loop's index in a tensor of r dims
      Index idx;
      for (size_t k = 0; k < r; ++k) idx.push_back(k < indexRank ? l.vars[k] : table_.integer(0));
      return idx;
    };
    l.body = cast(meta.dtype, loadAt(src, at(src.meta.dim())));
    sym::Expr picked = freshVars("t", {table_.integer(0)})[0];
    Index dest = at(rank);
    if (rank) dest[dim] = picked;
    sym::Expr flat = table_.integer(0);
    for (size_t k = 0; k < rank; ++k) flat = flat + dest[k] * meta.strides[k];
    l.scatter = indirectLoad(meta.dtype, *result.buffer, flat, {picked},
                             {cast(DType::Int64, loadAt(index, l.vars))},
                             {rank ? meta.sizes[dim] : table_.integer(1)});
    addBuffer(std::move(b));
    return result;
  }

  // scatter_add into zeros of one value per row (an index of size 1 along
  // `dim`, the result's size elsewhere): cross entropy's grad. Each element is
  // the row's value where the row's index names it, else 0: a body that fuses
  // into its readers, where a scatter would store the zeros first (GPT-2's
  // 8192 x 50257 f32: 0.5 ms of stores, then as much again to read them). The
  // index is checked as the scatter checks it, once per element.
  std::optional<Lowered> oneHot(const Lowered& self, Lowered& index, Lowered& src,
                                const TensorMeta& meta, size_t dim) {
    bool zeros = !self.buffer && !self.viewed && constantValue(self.body) == 0.0;
    if (!zeros || meta.dim() == 0 || index.meta.dim() != meta.dim() ||
        index.meta.sizes[dim].asInteger() != 1 || src.meta.dim() != meta.dim())
      return std::nullopt;
    for (size_t k = 0; k < meta.dim(); ++k)
      if (k != dim && (index.meta.sizes[k] != meta.sizes[k] || src.meta.sizes[k] != meta.sizes[k]))
        return std::nullopt;
    realize(index); // both one element a row: stored, the body stays small
    realize(src);
    Lowered hot = pointwise(meta, [&](const Index& i) {
      Index row = i;
      row[dim] = table_.integer(0);
      Scalar named = checkedIndex(index, row, meta.sizes[dim]);
      return where(binary("eq", DType::Bool, named, indexOf(DType::Int64, i[dim])),
                   cast(meta.dtype, loadAt(src, row)), zeroOf(meta.dtype));
    });
    hot.oneHot = std::make_shared<const Lowered::OneHot>(Lowered::OneHot{index, src, dim});
    return hot;
  }

  // A one-hot's stored index at `row`, as int64, checked to lie in [0, size).
  Scalar checkedIndex(const Lowered& index, const Index& row, sym::Expr size) {
    Scalar at = loadAt(index, row);
    sym::Expr checked = freshVars("t", {table_.integer(0)})[0];
    return cast(DType::Int64, indirectLoad(index.meta.dtype, *index.buffer, at->index, {checked},
                                           {cast(DType::Int64, at)}, {size}));
  }

  Scalar zeroOf(DType t) { return ir::isFloating(t) ? constantF(t, 0) : constantI(t, 0); }

  // The sum of a one-hot value along its hot dim alone: each row's element,
  // its index checked as the one-hot checks it (cross entropy's grad through
  // log_softmax's backward: the sum over GPT-2's 50257 logits a row was a
  // reduction loop over the row's compares, then another kernel over the row).
  std::optional<Lowered> sumOfOneHot(const Lowered& in, const std::vector<bool>& reduced,
                                     bool keepdim, const TensorMeta& meta) {
    if (!in.oneHot || in.buffer) return std::nullopt;
    const Lowered::OneHot& hot = *in.oneHot;
    for (size_t k = 0; k < reduced.size(); ++k)
      if (reduced[k] != (k == hot.dim)) return std::nullopt;
    return pointwise(meta, [&](const Index& i) {
      Index row = i;
      if (keepdim)
        row[hot.dim] = table_.integer(0);
      else
        row.insert(row.begin() + static_cast<std::ptrdiff_t>(hot.dim), table_.integer(0));
      Scalar named = checkedIndex(hot.index, row, in.meta.sizes[hot.dim]);
      // Always true: the load checks the index is in the row.
      Scalar inRow = binary("ge", DType::Bool, named, constantI(DType::Int64, 0));
      return where(inRow, cast(meta.dtype, loadAt(hot.src, row)), zeroOf(meta.dtype));
    });
  }

  Lowered lowerReduction(const ir::Node& node, ValueId nodeId, const Args& a,
                         const TensorMeta& meta, ReduceOp r) {
    const std::string& op = node.target;
    Lowered& in = values_.at(node.inputs[0]);
    size_t rank = in.meta.dim();
    std::vector<bool> reduced(rank, !a.call->has("dim"));
    if (a.call->has("dim")) {
      std::vector<int64_t> dims = a.call->intList("dim");
      if (dims.empty()) reduced.assign(rank, true);
      for (int64_t d : dims)
        if (rank) reduced.at(static_cast<size_t>(d < 0 ? d + int64_t(rank) : d)) = true;
    }
    bool keepdim = a.call->boolArg("keepdim");
    if (op == "sum")
      if (std::optional<Lowered> picked = sumOfOneHot(in, reduced, keepdim, meta)) return *picked;
    Shape reductionRanges;
    for (size_t k = 0; k < rank; ++k)
      if (reduced[k]) reductionRanges.push_back(in.meta.sizes[k]);

    DType out = meta.dtype;
    Buffer b;
    b.kind = BufferKind::Computed;
    Loops& l = b.loops;
    l.reduce = r;
    l.ranges = meta.sizes;
    l.vars = freshVars("i", meta.sizes);
    l.reductionRanges = reductionRanges;
    l.reductionVars = freshVars("r", reductionRanges);
    Index idx;
    size_t outDim = 0, redDim = 0;
    for (size_t k = 0; k < rank; ++k) {
      if (reduced[k]) {
        idx.push_back(l.reductionVars[redDim++]);
        if (keepdim) ++outDim;
      } else {
        idx.push_back(l.vars[outDim++]);
      }
    }
    Scalar element = loadAt(in, idx);
    switch (r) {
    case ReduceOp::Sum:
    case ReduceOp::Prod:
      l.accumulator = opmath(out);
      element = cast(l.accumulator, cast(out, element));
      break;
    case ReduceOp::Max:
    case ReduceOp::Min:
    case ReduceOp::ArgMax:
    case ReduceOp::ArgMin:
      l.accumulator = opmath(in.meta.dtype);
      element = cast(l.accumulator, element);
      break;
    case ReduceOp::Any:
    case ReduceOp::All:
      l.accumulator = DType::Bool;
      element = cast(DType::Bool, element);
      break;
    case ReduceOp::None: break;
    }
    l.body = element;
    b.layout = meta;
    b.layout.storageOffset = table_.integer(0);
    if (op == "mean") b.layout.dtype = l.accumulator;
    size_t before = program_.buffers.size();
    if (options_.splitReductions)
      splitReduction(b.loops, in.buffer && isPointwise(program_.buffers[*in.buffer])
                                  ? kColumnsKernelSplit
                                  : kColumnSumSplit);
    BufferId id = addBuffer(std::move(b));
    if (kernelBiasGrads_.count(nodeId)) // what reads dy: the partials, where split
      program_.kernelBiasGrads.push_back({nodeId, id > before ? BufferId(before) : id});
    Lowered v;
    v.meta = meta;
    v.buffer = id;
    v.base = meta.storageOffset;
    if (op != "mean") return v;
    // mean: the sum, then a pointwise division by the count
    Lowered sum = v;
    sum.meta.dtype = l.accumulator;
    sym::Expr count = table_.integer(1);
    for (sym::Expr s : reductionRanges) count = count * s;
    DType acc = program_.buffers[id].loops.accumulator;
    return pointwise(meta, [&, sum](const Index& i) {
      return binary("div", acc, loadAt(sum, i), cast(acc, indexOf(DType::Int64, count)));
    });
  }

  // The value that leaves a reduction's result as it is (an element past a
  // chunk's end); none for the arg-reductions.
  static std::optional<Scalar> identityOf(ReduceOp op, DType dtype) {
    bool floating = ir::isFloating(dtype);
    auto number = [&](int64_t v) { return floating ? constantF(dtype, static_cast<double>(v)) : constantI(dtype, v); };
    auto limit = [&](bool least) -> std::optional<Scalar> {
      if (floating) return constantF(dtype, least ? -INFINITY : INFINITY);
      switch (dtype) {
      case DType::Bool: return constantI(dtype, least ? 0 : 1);
      case DType::UInt8: return constantI(dtype, least ? 0 : 255);
      case DType::Int8: return constantI(dtype, least ? INT8_MIN : INT8_MAX);
      case DType::Int16: return constantI(dtype, least ? INT16_MIN : INT16_MAX);
      case DType::Int32: return constantI(dtype, least ? INT32_MIN : INT32_MAX);
      case DType::Int64: return constantI(dtype, least ? INT64_MIN : INT64_MAX);
      default: return std::nullopt;
      }
    };
    switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Any: return number(0);
    case ReduceOp::Prod:
    case ReduceOp::All: return number(1);
    case ReduceOp::Max: return limit(true);
    case ReduceOp::Min: return limit(false);
    default: return std::nullopt;
    }
  }

  // How a reduction is cut into chunks: the chunks' ranges and the ranges each
  // chunk reduces, each original reduction variable as an expression of the
  // fresh chunk and rest variables, and (where a chunk may run past the
  // reduction's end) the condition that an element lies inside it.
  struct Split {
    Shape chunkRanges, restRanges;
    Index chunkVars, restVars;
    std::unordered_map<sym::Expr, sym::Expr> bind; // reduction var -> its position
    sym::Expr inside;                              // null: every element is
  };

  // Static sizes: a prefix of the reduction's dims taken whole, the next one cut
  // into equal parts.
  std::optional<Split> staticSplit(const Loops& l, int64_t rows, int64_t want, int64_t leastRows) {
    if (rows == 0) return std::nullopt; // nothing to split (and no dim to divide by)
    int64_t chunks = 1;
    size_t whole = 0; // reduction dims taken whole into the chunks
    int64_t cut = 1;  // parts of dim `whole`
    for (; whole < l.reductionRanges.size(); ++whole) {
      int64_t n = *l.reductionRanges[whole].asInteger();
      if (chunks * n <= want && rows / (chunks * n) >= leastRows) {
        chunks *= n;
        continue;
      }
      for (int64_t d = std::min(n - 1, want / chunks); d >= 2 && cut == 1; --d)
        if (n % d == 0 && rows / (chunks * d) >= leastRows) cut = d;
      chunks *= cut;
      break;
    }
    if (chunks < 2) return std::nullopt;
    Split split;
    split.chunkRanges.assign(l.reductionRanges.begin(),
                             l.reductionRanges.begin() + static_cast<std::ptrdiff_t>(whole));
    if (cut > 1) split.chunkRanges.push_back(table_.integer(cut));
    for (size_t k = whole; k < l.reductionRanges.size(); ++k)
      split.restRanges.push_back(k == whole && cut > 1
                                     ? table_.integer(*l.reductionRanges[k].asInteger() / cut)
                                     : l.reductionRanges[k]);
    split.chunkVars = freshVars("i", split.chunkRanges);
    split.restVars = freshVars("r", split.restRanges);
    for (size_t k = 0; k < l.reductionVars.size(); ++k) {
      sym::Expr v = k < whole ? split.chunkVars[k] : split.restVars[k - whole];
      if (k == whole && cut > 1) v = split.chunkVars[k] * split.restRanges[0] + split.restVars[0];
      split.bind.emplace(l.reductionVars[k], v);
    }
    return split;
  }

  // Sizes a symbol decides (a dynamic batch; the outputs' count too is
  // planned for its hint): the dim longest by the symbols' hints cut into `chunks` parts of ceil(n / chunks) elements, the last ones
  // short or empty — an element past the dim's end is the reduction's identity
  // (Where evaluates only the chosen branch: nothing is loaded there).
  std::optional<Split> symbolicSplit(const Loops& l, int64_t want, int64_t leastRows) {
    if (!identityOf(l.reduce, l.accumulator)) return std::nullopt;
    std::optional<int64_t> hinted = hintedNumel(l.reductionRanges);
    if (!hinted) return std::nullopt; // an unbacked size: no hint to plan by
    int64_t longest = 0;
    size_t dim = 0;
    for (size_t k = 0; k < l.reductionRanges.size(); ++k) {
      int64_t hint = *hintedNumel({l.reductionRanges[k]});
      if (hint > longest) longest = hint, dim = k;
    }
    int64_t chunks = std::min({want, *hinted / leastRows, longest});
    if (chunks < 2) return std::nullopt;
    Split split;
    sym::Expr n = l.reductionRanges[dim];
    sym::Expr part = sym::floorDiv(n + (chunks - 1), chunks);
    split.chunkRanges.push_back(table_.integer(chunks));
    split.restRanges = l.reductionRanges;
    split.restRanges[dim] = part;
    split.chunkVars = freshVars("i", split.chunkRanges);
    split.restVars = freshVars("r", split.restRanges);
    sym::Expr at = split.chunkVars[0] * part + split.restVars[dim];
    for (size_t k = 0; k < l.reductionVars.size(); ++k)
      split.bind.emplace(l.reductionVars[k], k == dim ? at : split.restVars[k]);
    split.inside = sym::lt(at, n);
    return split;
  }

  // How a column sum is cut into chunks (splitReduction): enough chunks for
  // about `threads` outputs' worth of partial sums, each over at least
  // `leastRows` rows.
  struct ColumnSplit {
    int64_t threads, leastRows;
  };
  // A column sum's kernel of its own: a thread per partial sum.
  static constexpr ColumnSplit kColumnSumSplit{int64_t{1} << 17, 32};
  // A sum of a stored pointwise buffer, which the scheduler joins to that
  // buffer's kernel where it is flat (a columns kernel: a bias grad that
  // biasGradInKernels left to dy's kernel): its threads take 8 columns each
  // (16 bytes of bf16) and 8 threads share a chunk's rows, so more chunks
  // fill the GPU; 128 rows a chunk or more keep the partials' own
  // sum small. Measured on an H100 (bench/gpu's MLP training, GELU's backward
  // of 8192x16384 bf16 with db1): 8 chunks 520 us, 16 chunks 441, 64 chunks
  // 431 (with the row loop unrolled twice 406, 128 chunks alike), where the
  // plain kernel took 365 and cuBLASLt's bias-grad epilogue 151 more.
  static constexpr ColumnSplit kColumnsKernelSplit{int64_t{1} << 20, 128};

  // A reduction whose outputs alone would leave a GPU idle (a column sum's
  // thread per output: fewer than ~2^17 of them; a row's block per output:
  // fewer than 128) becomes two: a buffer of partial results over chunks of the
  // reduction (staticSplit, symbolicSplit), laid out so that the partials'
  // reads are coalesced (chunks outermost for column sums, innermost for rows),
  // then `l` reduces those.
  void splitReduction(Loops& l, const ColumnSplit& split) {
    if (l.reduce == ReduceOp::ArgMax || l.reduce == ReduceOp::ArgMin) return;
    std::optional<int64_t> outputs = hintedNumel(l.ranges);
    if (!outputs) return;
    bool columns = reducesColumns(l);
    if (!columns && *outputs >= 128) return;
    int64_t want = (columns ? split.threads : 512) / std::max<int64_t>(*outputs, 1);
    int64_t leastRows = columns ? split.leastRows : 4096; // per chunk
    std::optional<int64_t> rows = staticNumel(l.reductionRanges);
    std::optional<Split> found =
        rows ? staticSplit(l, *rows, want, leastRows) : symbolicSplit(l, want, leastRows);
    if (!found) return;
    const Shape& chunkRanges = found->chunkRanges;
    const Shape& restRanges = found->restRanges;
    const Index& chunkVars = found->chunkVars;
    const Index& restVars = found->restVars;
    Index outVars = freshVars("i", l.ranges);
    std::unordered_map<sym::Expr, sym::Expr> bind = found->bind;
    for (size_t k = 0; k < l.vars.size(); ++k) bind.emplace(l.vars[k], outVars[k]);

    // The partials' dims: chunks then outputs for column sums, else the reverse.
    auto laidOut = [columns](std::vector<sym::Expr> chunk, const std::vector<sym::Expr>& out) {
      if (!columns) chunk.insert(chunk.begin(), out.begin(), out.end());
      else chunk.insert(chunk.end(), out.begin(), out.end());
      return chunk;
    };
    Buffer partial;
    partial.kind = BufferKind::Computed;
    Loops& p = partial.loops;
    p.reduce = l.reduce;
    p.accumulator = l.accumulator;
    p.vars = laidOut(chunkVars, outVars);
    p.ranges = laidOut(chunkRanges, l.ranges);
    p.reductionVars = restVars;
    p.reductionRanges = restRanges;
    p.body = substitute(l.body, bind);
    if (!found->inside.isNull())
      p.body = where(indexOf(DType::Bool, found->inside), p.body,
                     *identityOf(l.reduce, l.accumulator));
    partial.layout = TensorMeta::contiguous(l.accumulator, p.ranges, table_);

    l.reductionRanges = chunkRanges;
    l.reductionVars = freshVars("r", chunkRanges);
    Index at = laidOut(l.reductionVars, l.vars);
    sym::Expr flat = table_.integer(0);
    for (size_t k = 0; k < at.size(); ++k) flat = flat + at[k] * partial.layout.strides[k];
    l.body = load(l.accumulator, addBuffer(std::move(partial)), flat);
  }

  // The number a scalar always is (a constant, converted or not), if any.
  static std::optional<double> constantValue(const Scalar& s) {
    if (s->kind == ScalarKind::Cast) // to a floating dtype: whole numbers stay what they were
      return ir::isFloating(s->dtype) ? constantValue(s->args[0]) : std::nullopt;
    if (s->kind != ScalarKind::Constant) return std::nullopt;
    return ir::isFloating(s->dtype) ? s->number : static_cast<double>(s->integer);
  }

  std::optional<Lowered> lowerPointwise(const ir::Node& node, const Args& a,
                                        const TensorMeta& meta) {
    const std::string& op = node.target;
    const Shape& sizes = meta.sizes;
    DType out = meta.dtype;
    if (isUnaryMath(op)) {
      DType compute = opmath(out);
      return pointwise(meta, [&](const Index& i) {
        return unary(op, compute, cast(compute, operand(node, a, "self", i, sizes)));
      });
    }
    if (op == "logical_not" || op == "isnan" || op == "isinf") {
      return pointwise(meta, [&](const Index& i) {
        return unary(op, DType::Bool, operand(node, a, "self", i, sizes));
      });
    }
    if (op == "to_dtype")
      return pointwise(meta, [&](const Index& i) { return operand(node, a, "self", i, sizes); });
    if (op == "logical_and" || op == "logical_or") {
      return pointwise(meta, [&](const Index& i) {
        return binary(op, DType::Bool, operand(node, a, "self", i, sizes),
                      operand(node, a, "other", i, sizes));
      });
    }
    if (isComparison(op) || isArithmetic(op)) {
      ir::ResultType rt;
      addOperand(rt, node, a, "self");
      addOperand(rt, node, a, "other");
      DType promoted = rt.result();
      DType compute = opmath(isComparison(op) ? promoted : out);
      std::string name = op;
      if (op == "div" && a.call->has("rounding_mode")) {
        name = "div_" + a.call->string("rounding_mode"); // div_floor, div_trunc
        // torch rounds the quotient's steps to a half dtype before flooring or
        // truncating: these compute in the half dtype itself.
        if (out == DType::Float16 || out == DType::BFloat16) compute = out;
      }
      double alpha = a.call->takes("alpha") ? a.call->floatArg("alpha") : 1.0;
      return pointwise(meta, [&, name, alpha](const Index& i) {
        Scalar x = cast(compute, operand(node, a, "self", i, sizes));
        Scalar y = cast(compute, operand(node, a, "other", i, sizes));
        if (alpha != 1.0)
          y = binary("mul", compute, y,
                     ir::isFloating(compute) ? constantF(compute, alpha)
                                             : constantI(compute, static_cast<int64_t>(alpha)));
        // x ** 2 and x ** 3 (tanh GELU's cube, variances) as products, as torch's
        // pow_tensor_scalar and Inductor do: powf costs tens of instructions.
        std::optional<double> power = constantValue(y);
        if (name == "pow" && ir::isFloating(compute) && (power == 2.0 || power == 3.0)) {
          Scalar square = binary("mul", compute, x, x);
          return power == 2.0 ? square : binary("mul", compute, square, x);
        }
        return binary(name, isComparison(op) ? DType::Bool : compute, x, y);
      });
    }
    if (op == "where") {
      DType compute = opmath(out);
      return pointwise(meta, [&](const Index& i) {
        return where(cast(DType::Bool, operand(node, a, "condition", i, sizes)),
                     cast(compute, operand(node, a, "self", i, sizes)),
                     cast(compute, operand(node, a, "other", i, sizes)));
      });
    }
    if (op == "clamp") {
      DType compute = opmath(out);
      return pointwise(meta, [&](const Index& i) {
        Scalar x = cast(compute, operand(node, a, "self", i, sizes));
        if (a.call->has("min"))
          x = binary("clamp_min", compute, x, cast(compute, operand(node, a, "min", i, sizes)));
        if (a.call->has("max"))
          x = binary("clamp_max", compute, x, cast(compute, operand(node, a, "max", i, sizes)));
        return x;
      });
    }
    return std::nullopt;
  }

  // Copies: clone and contiguous read the input at the same index; reshape
  // and flatten at the same row-major position. A reshape, flatten or
  // contiguous of a contiguous value is a view of it, as in torch (lowerView),
  // and so is a reshape the graph gives strides a copy would not have (one of
  // a padded product's rows: [8192, 50257] as [8, 1024, 50257], rows 50264 apart):
  // of a stored value it aliases the storage, of a body it is a body that
  // realizing stores at its source, so that values reshaped apart (a grad read
  // as [b, t, c] by one product and as [b*t, c] by another) are stored once.
  std::optional<Lowered> lowerCopy(const ir::Node& node, ValueId id, const Args& a,
                                   const TensorMeta& meta) {
    const std::string& op = node.target;
    if (op == "reshape" || op == "flatten" || op == "contiguous") {
      const TensorMeta& from = values_.at(node.inputs[0]).meta;
      if (from.isContiguous() && meta.isContiguous() && from.storageOffset == meta.storageOffset)
        return lowerView(node, id, a, meta);
      if (op != "contiguous" && !meta.isContiguous()) return lowerView(node, id, a, meta);
    }
    if (op == "clone" || op == "contiguous") {
      const Lowered& in = values_.at(node.inputs[0]);
      return pointwise(meta, [&](const Index& i) { return loadAt(in, i); });
    }
    if (op == "reshape" || op == "flatten") {
      const Lowered& in = values_.at(node.inputs[0]);
      for (sym::Expr size : meta.sizes) // no element: nothing to read
        if (size.asInteger() == 0)
          return pointwise(meta, [&](const Index&) { return constantI(meta.dtype, 0); });
      return pointwise(meta, [&](const Index& i) {
        return loadAt(in, rowMajorIndex(i, meta.sizes, in.meta.sizes));
      });
    }
    if (op == "cat" || op == "stack") return lowerConcat(node, meta);
    return std::nullopt;
  }

  // The element comes from the input whose range along `dim` holds the index;
  // Where evaluates only the chosen branch, so the others never load.
  Lowered lowerConcat(const ir::Node& node, const TensorMeta& meta) {
    bool stack = node.target == "stack";
    int64_t dim =
        std::get<int64_t>(node.attr("dim") ? *node.attr("dim") : ir::AttrValue(int64_t{0}));
    size_t d = static_cast<size_t>(dim < 0 ? dim + int64_t(meta.dim()) : dim);
    return pointwise(meta, [&](const Index& i) {
      Scalar result;
      sym::Expr end = table_.integer(0);
      std::vector<std::pair<sym::Expr, Scalar>> branches; // (upper bound, element)
      for (ValueId id : node.inputs) {
        const Lowered& in = values_.at(id);
        if (!stack && in.meta.dim() == 1 && in.meta.sizes[0].asInteger() == 0 && meta.dim() != 1)
          continue; // torch's legacy empty 1-d inputs of cat
        sym::Expr start = end;
        end = stack ? end + 1 : end + in.meta.sizes[d];
        Index at = i;
        if (stack)
          at.erase(at.begin() + static_cast<std::ptrdiff_t>(d));
        else
          at[d] = i[d] - start;
        branches.push_back({end, cast(meta.dtype, loadAt(in, at))});
      }
      result = branches.back().second;
      for (size_t k = branches.size() - 1; k-- > 0;)
        result = where(indexOf(DType::Bool, sym::lt(i[d], branches[k].first)), branches[k].second,
                       result);
      return result;
    });
  }

  std::optional<Lowered> lowerCreation(const ir::Node& node, const Args& a,
                                       const TensorMeta& meta) {
    const std::string& op = node.target;
    std::string base = op.size() > 5 && op.compare(op.size() - 5, 5, "_like") == 0
                           ? op.substr(0, op.size() - 5)
                           : op;
    if (base == "zeros" || base == "empty") // empty is zeroed, as in the interpreter
      return pointwise(meta, [&](const Index&) { return constantI(meta.dtype, 0); });
    if (base == "ones")
      return pointwise(meta, [&](const Index&) { return constantI(meta.dtype, 1); });
    if (base == "full")
      return pointwise(meta, [&](const Index& i) {
        return cast(meta.dtype, operand(node, a, "fill_value", i, meta.sizes));
      });
    if (op == "arange") {
      return pointwise(meta, [&](const Index& i) {
        Scalar start =
            a.call->has("start") ? operand(node, a, "start", {}, {}) : constantI(DType::Int64, 0);
        Scalar step =
            a.call->has("step") ? operand(node, a, "step", {}, {}) : constantI(DType::Int64, 1);
        Scalar end = operand(node, a, "end", {}, {});
        bool integral = !ir::isFloating(start->dtype) && !ir::isFloating(step->dtype) &&
                        !ir::isFloating(end->dtype);
        DType compute = integral ? DType::Int64 : DType::Float64;
        return binary("add", compute, cast(compute, start),
                      binary("mul", compute, cast(compute, indexOf(DType::Int64, i[0])),
                             cast(compute, step)));
      });
    }
    return std::nullopt;
  }

  // index_select, embedding and gather: loads through a loaded index. A source
  // that is a small body is read in place at the picked index (loadThrough); a
  // big one is stored first, as each element gathered would recompute it.
  std::optional<Lowered> lowerIndexing(const ir::Node& node, const Args& a,
                                       const TensorMeta& meta) {
    const std::string& op = node.target;
    if (op != "index_select" && op != "embedding" && op != "gather") return std::nullopt;
    const Lowered& index = values_.at(node.inputs[1]);
    Lowered& source = values_.at(node.inputs[0]);
    if (!source.buffer && opCount(source.body) > kInlineLimit) realize(source);
    size_t dim = 0;
    if (op != "embedding") {
      int64_t d = a.call->intArg("dim");
      dim = static_cast<size_t>(d < 0 ? d + int64_t(std::max<size_t>(source.meta.dim(), 1)) : d);
    }
    return pointwise(meta, [&, dim](const Index& i) {
      sym::Expr picked = freshVars("t", {table_.integer(0)})[0];
      Index at;
      Scalar indexValue;
      if (op == "embedding") { // weight[indices[i0..ik-1], ik]
        Index outer(i.begin(), i.end() - 1);
        indexValue = loadAt(index, outer);
        at = {picked, i.back()};
      } else { // index_select: self[.., index[i_dim], ..]; gather: self[.., index[i], ..]
        if (op == "index_select")
          indexValue = loadAt(index, index.meta.dim() && !i.empty() ? Index{i[dim]} : Index{});
        else
          indexValue = loadAt(index, i);
        // self's index: `picked` along dim, the output's elsewhere (0 where a 0-d
        // index or output has no such dim; a 0-d self is read at 0, which
        // `picked` must be).
        for (size_t k = 0; k < source.meta.dim(); ++k)
          at.push_back(k == dim ? picked : k < i.size() ? i[k] : table_.integer(0));
      }
      sym::Expr bound = source.meta.dim() ? source.meta.sizes[dim] : table_.integer(1);
      Scalar value = cast(DType::Int64, indexValue);
      if (!source.buffer) {
        if (std::optional<Scalar> s = loadThrough(source, at, picked, value, bound)) return *s;
        realize(source);
      }
      sym::Expr flat = source.meta.storageOffset - source.base;
      for (size_t k = 0; k < at.size(); ++k) flat = flat + at[k] * source.meta.strides.at(k);
      return indirectLoad(source.meta.dtype, *source.buffer, flat, {picked}, {value}, {bound});
    });
  }

  // Body `v` read at `at`, which mentions `picked`: an index loaded at run time
  // (`value`, which must lie in [0, bound)). Each load of the body whose index
  // depends on it binds a symbol of its own to the value, and checks it.
  // nullopt when the body uses `picked` as a value (arange, cat's choice), or
  // when no load would check it whichever branches run.
  std::optional<Scalar> loadThrough(const Lowered& v, const Index& at, sym::Expr picked,
                                    const Scalar& value, sym::Expr bound) {
    Scalar body = loadAt(v, at);
    auto mentions = [picked](sym::Expr e) {
      std::vector<sym::Expr> symbols = sym::freeSymbols(e);
      return std::find(symbols.begin(), symbols.end(), picked) != symbols.end();
    };
    // Whether evaluating s surely runs a load that mentions picked: a where, a
    // logical and, a logical or may skip all but their first operand.
    std::function<bool(const Scalar&)> checks = [&](const Scalar& s) {
      if (s->kind == ScalarKind::Load && mentions(s->index)) return true;
      bool firstOnly =
          s->kind == ScalarKind::Where || s->op == "logical_and" || s->op == "logical_or";
      size_t n = firstOnly ? 1 : s->args.size();
      for (size_t k = 0; k < n; ++k)
        if (checks(s->args[k])) return true;
      return false;
    };
    if (!checks(body)) return std::nullopt;
    bool asValue = false;
    std::function<Scalar(const Scalar&)> bindPicked = [&](const Scalar& s) -> Scalar {
      if (s->kind == ScalarKind::IndexOf && mentions(s->index)) asValue = true;
      std::vector<Scalar> args;
      for (const Scalar& arg : s->args) args.push_back(bindPicked(arg));
      if (s->kind == ScalarKind::Load && mentions(s->index)) {
        sym::Expr own = freshVars("t", {table_.integer(0)})[0];
        std::vector<sym::Expr> symbols = s->indirect, sizes = s->indirectSizes;
        symbols.push_back(own);
        sizes.push_back(bound);
        args.push_back(value);
        return indirectLoad(s->dtype, s->buffer, sym::substitute(s->index, {{picked, own}}),
                            std::move(symbols), std::move(args), std::move(sizes));
      }
      return withArgs(s, std::move(args));
    };
    Scalar read = bindPicked(body);
    if (asValue) return std::nullopt;
    return read;
  }

  const ir::Graph* graph_; // the graph lowered (a composite's decomposition, for a while)
  sym::SymbolTable& table_;
  const LowerOptions& options_;
  std::vector<Lowered> values_;
  std::vector<size_t> uses_;
  std::vector<bool> output_; // graph outputs
  std::vector<bool> written_; // per value: a mutation writes its storage (findWrittenStorage)
  std::vector<bool> externInput_; // per value: a library call stores it (findExternInputs)
  // Calls and the further result each computes (findAttentionPairs,
  // findBiasGradPairs, findGeluPairs), and the pairs' values once lowered.
  std::map<ValueId, ValueId> resultOfCall_, callOfResult_;
  std::set<ValueId> kernelBiasGrads_;        // bias grads unpaired by biasGradInKernels
  std::map<ValueId, ValueId> reluOfProduct_; // findReluEpilogues: relu -> its product
  std::set<ValueId> productsWithRelu_;
  std::map<ValueId, std::pair<Lowered, Lowered>> pairs_;
  Program program_;
  uint32_t inputCount_ = 0;
  uint32_t nextVar_ = 0;
};

} // namespace

namespace {

// Attention calls kept whole with a bool mask (cuDNN's, flash_attention.h)
// take it as the bias cuDNN adds: 0 where the mask keeps a score, -inf where
// it drops one, in the query's dtype, over the mask's own sizes.
ir::Graph attentionBiases(const ir::Graph& graph) {
  return ir::mapNodes(graph, [&](ir::Graph& out, ValueId id, ir::Node n, const auto&) {
    std::optional<ValueId> mask = ir::attentionMask(graph.node(id));
    if (mask && graph.meta(*mask).dtype == DType::Bool &&
        detail::flashAttentionTakes(graph, graph.node(id))) {
      size_t at = *ir::attentionMaskInput(n);
      const TensorMeta& q = out.meta(n.inputs[at == 3 ? 0 : 1]); // after q, k, v or grad, q, ...
      ValueId zero = out.call("full", {},
                              {{"size", std::vector<int64_t>{}},
                               {"fill_value", 0.0},
                               {"dtype", q.dtype},
                               {"device", ir::toString(q.device)}});
      n.inputs[at] = out.call("where", {n.inputs[at], zero}, {{"other", -INFINITY}});
    }
    return out.append(std::move(n));
  });
}

} // namespace

Program lower(const ir::Graph& graph, const LowerOptions& options) {
  ir::Graph core = ir::decompose(graph, keptFor(options));
  if (options.flashAttention) core = attentionBiases(core);
  // Decompositions repeat pieces (a gelu's and its grad's tanh): computed once.
  core = ir::eliminateCommonSubexpressions(core);
  if (options.biasEpilogues) core = biasGradsAfterProducts(biasedProducts(core));
  if (options.padProductsFrom > 0) core = ir::padProducts(core, options.padProductsFrom);
  return Lowering(core, options).run();
}

} // namespace kiln::codegen
