#include "kiln/ir/graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kiln/common/error.h"
#include "kiln/ir/op_registry.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir {

bool sameAttrValue(const AttrValue& a, const AttrValue& b) {
  const double* x = std::get_if<double>(&a);
  const double* y = std::get_if<double>(&b);
  if (x && y && std::isnan(*x) && std::isnan(*y)) return true;
  return a == b;
}

namespace {

const char* kindName(const Value& v) {
  return v.isTensor() ? "a tensor" : v.isSymInt() ? "a symbolic scalar" : "a tuple";
}

} // namespace

const TensorMeta& Value::tensor() const {
  if (!isTensor())
    throw Error(ErrorCode::InvalidArgument, std::string(kindName(*this)) + " is not a tensor");
  return std::get<TensorMeta>(v_);
}

sym::Expr Value::symInt() const {
  if (!isSymInt())
    throw Error(ErrorCode::InvalidArgument,
                std::string(kindName(*this)) + " is not a symbolic scalar");
  return std::get<sym::Expr>(v_);
}

const Value::Tuple& Value::tuple() const {
  if (!isTuple())
    throw Error(ErrorCode::InvalidArgument, std::string(kindName(*this)) + " is not a tuple");
  return std::get<Tuple>(v_);
}

std::string toString(const Value& v) {
  if (v.isTensor()) return toString(v.tensor());
  if (v.isSymInt()) return "sym(" + sym::toString(v.symInt()) + ")";
  std::string out = "(";
  for (size_t i = 0; i < v.tuple().size(); ++i) out += (i ? ", " : "") + toString(v.tuple()[i]);
  return out + ")";
}

namespace {

std::string formatDouble(double d) { // the shortest text that reads back as d
  char buf[32];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d || std::isnan(d)) break;
  }
  std::string s = buf;
  if (s.find_first_of(".eni") == std::string::npos) s += ".0"; // 2 -> 2.0; keep inf, nan
  return s;
}

template <typename T, typename F> std::string list(const std::vector<T>& xs, F&& f) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? ", " : "") + f(xs[i]);
  return out + "]";
}

} // namespace

std::string toString(const AttrValue& v) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return formatDouble(d); }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(const std::string& s) const { return "'" + s + "'"; }
    std::string operator()(const std::vector<int64_t>& xs) const {
      return list(xs, [](int64_t i) { return std::to_string(i); });
    }
    std::string operator()(sym::Expr e) const { return sym::toString(e); }
    std::string operator()(const std::vector<sym::Expr>& xs) const {
      return list(xs, [](sym::Expr e) { return sym::toString(e); });
    }
    std::string operator()(DType t) const { return std::string(name(t)); }
  };
  return std::visit(Visitor{}, v);
}

const AttrValue* Node::attr(std::string_view name) const {
  for (const Attr& a : attrs)
    if (a.name == name) return &a.value;
  return nullptr;
}

ValueId Graph::placeholder(std::string name, Value value) {
  if (value.isTuple())
    throw Error(ErrorCode::InvalidArgument,
                "placeholder '" + name + "': a tuple cannot be an input");
  if (value.isTensor()) {
    TensorMeta meta = value.tensor();
    if (meta.sizes.size() != meta.strides.size())
      throw Error(ErrorCode::InvalidArgument,
                  "placeholder '" + name + "': sizes and strides differ in length");
    if (meta.storageOffset.isNull()) meta.storageOffset = table_->integer(0);
    value = Value(std::move(meta));
  }
  return append(Node{NodeKind::Placeholder, std::move(name), {}, {}, std::move(value)});
}

ValueId Graph::call(std::string_view op, std::vector<ValueId> inputs, std::vector<Attr> attrs) {
  std::vector<const Value*> values;
  for (ValueId id : inputs) {
    if (id >= nodes_.size())
      throw Error(ErrorCode::InvalidArgument,
                  std::string(op) + ": input %" + std::to_string(id) + " is not defined");
    values.push_back(&nodes_[id].value);
  }
  Value result = inferCall(op, values, attrs, *table_);
  return append(Node{NodeKind::Call, std::string(op), std::move(inputs), std::move(attrs),
                     std::move(result)});
}

void Graph::setOutputs(std::vector<ValueId> outputs) {
  for (ValueId id : outputs) {
    if (id >= nodes_.size())
      throw Error(ErrorCode::InvalidArgument, "output %" + std::to_string(id) + " is not defined");
    if (nodes_[id].value.isTuple())
      throw Error(ErrorCode::InvalidArgument,
                  "output %" + std::to_string(id) + " is a tuple; return its getitems");
  }
  outputs_ = std::move(outputs);
}

ValueId Graph::append(Node node) {
  nodes_.push_back(std::move(node));
  return static_cast<ValueId>(nodes_.size() - 1);
}

const Node& Graph::node(ValueId id) const {
  if (id >= nodes_.size())
    throw Error(ErrorCode::InvalidArgument, "no value %" + std::to_string(id));
  return nodes_[id];
}

std::vector<sym::Expr> mentionedSymbols(const Graph& graph) {
  std::vector<sym::Expr> out;
  auto add = [&](sym::Expr e) {
    if (e.isNull()) return;
    for (sym::Expr s : sym::freeSymbols(e))
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  auto addMeta = [&](const TensorMeta& m) {
    for (sym::Expr e : m.sizes) add(e);
    for (sym::Expr e : m.strides) add(e);
    add(m.storageOffset);
  };
  for (const Node& n : graph.nodes()) {
    if (n.value.isSymInt()) add(n.value.symInt());
    if (n.value.isTensor()) addMeta(n.value.tensor());
    if (n.value.isTuple())
      for (const TensorMeta& m : n.value.tuple()) addMeta(m);
    for (const Attr& a : n.attrs) {
      if (auto* e = std::get_if<sym::Expr>(&a.value)) add(*e);
      if (auto* es = std::get_if<std::vector<sym::Expr>>(&a.value))
        for (sym::Expr e : *es) add(e);
    }
  }
  std::sort(out.begin(), out.end(),
            [](sym::Expr a, sym::Expr b) { return sym::compare(a, b) < 0; });
  return out;
}

} // namespace kiln::ir
