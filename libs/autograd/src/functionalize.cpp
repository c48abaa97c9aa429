// functionalize(): mutation ops rewritten as their functional op, writes through
// views scattered into the base, stale aliases regenerated, an epilogue of the
// mutated inputs' new values.
#include "kiln/autograd/functionalize.h"

#include <map>
#include <set>

#include "kiln/autograd/grad_builder.h"
#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/ir/passes.h"

namespace kiln::autograd {
namespace {

[[noreturn]] void unsupported(const std::string& message) {
  throw Error(ErrorCode::Unsupported, "functionalize: " + message);
}

bool sameShape(const ir::Shape& a, const ir::Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i]) && !provable(sym::eq(a[i], b[i]))) return false;
  return true;
}

class Functionalizer {
public:
  explicit Functionalizer(const ir::Graph& in) : in_(in), out_{ir::Graph(in.symbols())} {}

  Functionalized run() {
    for (ValueId id = 0; id < in_.size(); ++id) visit(id);
    std::vector<ValueId> outputs;
    for (ValueId o : in_.outputs()) outputs.push_back(resolve(o));
    out_.userOutputs = outputs.size();
    for (size_t i = 0; i < placeholders_.size(); ++i)
      if (version_[placeholders_[i]] > 0) {
        outputs.push_back(resolve(placeholders_[i]));
        out_.mutatedInputs.push_back(i);
      }
    out_.graph.setOutputs(std::move(outputs));
    out_.graph = ir::eliminateDeadCode(out_.graph);
    return std::move(out_);
  }

private:
  ir::Graph& g() { return out_.graph; }

  // A view of its first input: always (view ops, split's pieces), or where the input is
  // provably contiguous (reshape, flatten, contiguous); nullopt: it may or may not be one.
  std::optional<bool> isView(const ir::Node& n) const {
    if (ir::isViewOp(n.target) || n.target == "split" || n.target == "split_with_sizes" ||
        n.target == "chunk" || n.target == "unbind")
      return true;
    if (n.target == "getitem") return views_.count(canon(n.inputs[0])) > 0;
    if (n.target == "reshape" || n.target == "flatten" || n.target == "contiguous") {
      if (in_.meta(n.inputs[0]).isContiguous()) return true;
      return std::nullopt;
    }
    return false;
  }

  ValueId canon(ValueId v) const {
    auto it = canon_.find(v);
    return it == canon_.end() ? v : it->second;
  }

  void visit(ValueId id) {
    const ir::Node& n = in_.node(id);
    base_[id] = id;
    if (n.kind == ir::NodeKind::Placeholder) {
      placeholders_.push_back(id);
      cur_[id] = g().append(n);
      return;
    }
    const ir::OpInfo& op = ir::getOp(n.target);
    if (op.mutates) return mutation(id, n, op);
    std::vector<ValueId> inputs;
    for (ValueId in : n.inputs) inputs.push_back(resolve(in));
    cur_[id] = g().call(n.target, inputs, n.attrs);
    if (n.inputs.empty()) return;
    ValueId src = canon(n.inputs[0]);
    std::optional<bool> view = isView(n);
    if (!view) { // reshape of a value of unknown layout: writes to either side are refused
      uncertain_.insert(base_[src]);
      uncertain_.insert(id);
    } else if (*view) {
      views_.insert(id);
      base_[id] = base_[src];
      chain_[id] = chain_[src];
      chain_[id].push_back(id);
      seen_[id] = version_[base_[id]];
    }
  }

  // The current value of v: an alias whose base was written since is replayed from it.
  ValueId resolve(ValueId v) {
    v = canon(v);
    ValueId b = base_.at(v);
    if (b != v && seen_[v] != version_[b]) {
      cur_[v] = replay(chain_[v], resolve(b));
      seen_[v] = version_[b];
    }
    return cur_.at(v);
  }

  // The view nodes of `chain` applied to `x` (their other inputs as they are now).
  ValueId replay(const std::vector<ValueId>& chain, ValueId x) {
    for (ValueId step : chain) {
      const ir::Node& n = in_.node(step);
      std::vector<ValueId> inputs{x};
      for (size_t i = 1; i < n.inputs.size(); ++i) inputs.push_back(resolve(n.inputs[i]));
      x = g().call(n.target, inputs, n.attrs);
    }
    return x;
  }

  void mutation(ValueId id, const ir::Node& n, const ir::OpInfo& op) {
    const bool outForm = ir::isOutForm(op);
    const size_t written = outForm ? n.inputs.size() - 1 : 0;
    const ValueId target = canon(n.inputs.at(written));
    const ir::TensorMeta& tm = in_.meta(target);
    std::vector<ValueId> inputs;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (i != written || !outForm) inputs.push_back(resolve(n.inputs[i]));
    ValueId r = g().call(op.functional, inputs, n.attrs);
    if (!sameShape(g().meta(r).sizes, tm.sizes)) {
      if (outForm)
        unsupported(n.target + " into an `out` of other sizes (torch resizes it): " +
                    ir::toString(g().meta(r)) + " into " + ir::toString(tm));
      r = g().call("expand", {r}, {{"size", sizesAttr(tm.sizes)}});
    }
    if (g().meta(r).dtype != tm.dtype) r = g().call("to_dtype", {r}, {{"dtype", tm.dtype}});
    write(target, r, n.target);
    canon_[id] = target;
  }

  void write(ValueId target, ValueId value, const std::string& op) {
    ValueId b = base_.at(target);
    if (uncertain_.count(b) || uncertain_.count(target))
      unsupported(op + " writes a tensor that a reshape may or may not alias (its input is not "
                       "known to be contiguous)");
    if (b != target) {
      for (ValueId step : chain_[target])
        if (in_.node(step).target == "as_strided") unsupported(op + " through an as_strided view");
      cur_[b] = scatterInto(resolve(b), in_.meta(b), chain_[target], value);
    }
    cur_[target] = value;
    seen_[target] = ++version_[b];
  }

  // `base` with the elements `chain` views of it replaced by `value`: the view's positions
  // in the base are the chain replayed on arange(numel), and scattered through them.
  ValueId scatterInto(ValueId base, const ir::TensorMeta& bm, const std::vector<ValueId>& chain,
                      ValueId value) {
    sym::SymbolTable& t = g().symbols();
    const sym::Expr n = ir::numel(bm.sizes, t);
    const std::string device = ir::toString(bm.device);
    ValueId index =
        g().call("arange", {}, {{"end", n}, {"dtype", ir::DType::Int64}, {"device", device}});
    index = g().call("reshape", {index}, {{"size", sizesAttr(bm.sizes)}});
    const ir::TensorMeta& vm = g().meta(value);
    const AttrValue flat = std::vector<sym::Expr>{ir::numel(vm.sizes, t)};
    ValueId positions = g().call("reshape", {replay(chain, index)}, {{"size", flat}});
    ValueId values = g().call("reshape", {value}, {{"size", flat}});
    const ir::TensorMeta line = ir::TensorMeta::contiguous(bm.dtype, {n}, t, bm.device);
    ValueId scattered =
        g().call("scatter_add", {zerosOf(g(), line), positions, values}, {{"dim", int64_t{0}}});
    ir::TensorMeta counts = line;
    counts.dtype = ir::DType::Int64;
    ValueId ones = g().call("ones_like", {positions});
    ValueId hits =
        g().call("scatter_add", {zerosOf(g(), counts), positions, ones}, {{"dim", int64_t{0}}});
    ValueId hit = withScalar(g(), "gt", hits, int64_t{0});
    ValueId old = g().call("reshape", {base}, {{"size", std::vector<sym::Expr>{n}}});
    ValueId merged = g().call("where", {hit, scattered, old});
    return g().call("reshape", {merged}, {{"size", sizesAttr(bm.sizes)}});
  }

  const ir::Graph& in_;
  Functionalized out_;
  std::vector<ValueId> placeholders_;
  std::map<ValueId, ValueId> cur_;                // old id -> its current value in out_
  std::map<ValueId, ValueId> canon_;              // a mutation node -> the tensor it wrote
  std::map<ValueId, ValueId> base_;               // old id -> the value owning its storage
  std::map<ValueId, std::vector<ValueId>> chain_; // a view -> the view nodes from its base
  std::map<ValueId, size_t> version_;             // a base -> how many writes it had
  std::map<ValueId, size_t> seen_;                // a view -> its base's version it reflects
  std::set<ValueId> views_;                       // values (tuples too) that view their input
  std::set<ValueId> uncertain_;                   // may alias, may not: writes refused
};

} // namespace

bool mutates(const ir::Graph& graph) {
  for (const ir::Node& n : graph.nodes())
    if (n.kind == ir::NodeKind::Call && ir::getOp(n.target).mutates) return true;
  return false;
}

Functionalized functionalize(const ir::Graph& graph) {
  return Functionalizer(graph).run();
}

} // namespace kiln::autograd
