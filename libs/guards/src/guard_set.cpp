#include "kiln/guards/guard_set.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"

namespace kiln::guards {

bool Step::isRoot() const {
  return kind == StepKind::Arg || kind == StepKind::Kwarg || kind == StepKind::Global ||
         kind == StepKind::Closure || kind == StepKind::Default || kind == StepKind::KwDefault || kind == StepKind::Module;
}

Step arg(uint32_t index, std::string name) { return {StepKind::Arg, index, std::move(name)}; }
Step kwarg(std::string name) { return {StepKind::Kwarg, 0, std::move(name)}; }
Step global(std::string name) { return {StepKind::Global, 0, std::move(name)}; }
Step closure(uint32_t index, std::string name) { return {StepKind::Closure, index, std::move(name)}; }
Step attr(std::string name) { return {StepKind::Attr, 0, std::move(name)}; }
Step item(int64_t index) { return {StepKind::Index, index, {}}; }
Step key(std::string name) { return {StepKind::Key, 0, std::move(name)}; }
Step intKey(int64_t key) { return {StepKind::IntKey, key, {}}; }
Step size(uint32_t dim) { return {StepKind::Size, dim, {}}; }
Step stride(uint32_t dim) { return {StepKind::Stride, dim, {}}; }
Step value() { return {StepKind::Value, 0, {}}; }
Step hasAttr(std::string name) { return {StepKind::HasAttr, 0, std::move(name)}; }
Step pyModule(std::string name) { return {StepKind::Module, 0, std::move(name)}; }
Step classAttr(uint32_t from, std::string name) { return {StepKind::ClassAttr, from, std::move(name)}; }
Step defaultArg(uint32_t index) { return {StepKind::Default, index, {}}; }
Step kwDefault(std::string name) { return {StepKind::KwDefault, 0, std::move(name)}; }

std::string TypeRef::text() const { return module.empty() ? qualname : module + "." + qualname; }

namespace {

std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'' || c == '\\') out += '\\';
    out += c;
  }
  return out + "'";
}

std::string floatText(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  std::string s = text;
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string staticText(const StaticInt& v) { return v ? std::to_string(*v) : "?"; }

} // namespace

std::string Constant::text() const {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(bool b) const { return b ? "True" : "False"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return floatText(d); }
    std::string operator()(const std::string& s) const { return quoted(s); }
    std::string operator()(const Tuple& t) const {
      std::string out = "(";
      for (size_t k = 0; k < t.size(); ++k) out += (k ? ", " : "") + t[k].text();
      return out + (t.size() == 1 ? ",)" : ")");
    }
  };
  return std::visit(Visitor{}, value);
}

bool operator==(const Constant& a, const Constant& b) {
  if (a.value.index() != b.value.index()) return false;
  if (auto x = std::get_if<double>(&a.value)) {
    double y = std::get<double>(b.value);
    return (std::isnan(*x) && std::isnan(y)) || *x == y;
  }
  return a.value == b.value;
}

Check typeIs(TypeRef type) {
  Check c;
  c.kind = Check::Kind::Type;
  c.type = std::move(type);
  return c;
}

Check identityIs(Identity identity) {
  Check c;
  c.kind = Check::Kind::Identity;
  c.identity = std::move(identity);
  return c;
}

Check equals(Constant value) {
  Check c;
  c.kind = Check::Kind::Equals;
  c.equals = std::move(value);
  return c;
}

Check lengthIs(uint64_t length) {
  Check c;
  c.kind = Check::Kind::Length;
  c.length = length;
  return c;
}

Check dictKeysAre(std::vector<Constant> keys, bool ordered) {
  Check c;
  c.kind = Check::Kind::DictKeys;
  c.dictKeys = {std::move(keys), ordered};
  return c;
}

Check tensorMatches(TensorCheck tensor) {
  if (tensor.strides.size() != tensor.sizes.size())
    throw Error(ErrorCode::InvalidArgument, "tensor guard: " + std::to_string(tensor.sizes.size()) +
                                                " sizes but " + std::to_string(tensor.strides.size()) + " strides");
  Check c;
  c.kind = Check::Kind::Tensor;
  c.tensor = std::move(tensor);
  return c;
}

GuardSet::GuardSet() : table_(std::make_unique<sym::SymbolTable>()) {}
GuardSet::GuardSet(GuardSet&&) noexcept = default;
GuardSet& GuardSet::operator=(GuardSet&&) noexcept = default;
GuardSet::~GuardSet() = default;

uint32_t GuardSet::node(int32_t parent, const Step& step) {
  if (step.isRoot() != (parent < 0))
    throw Error(ErrorCode::InvalidArgument, "guard path: a root step must start the path, and only it");
  if (parent >= static_cast<int32_t>(nodes_.size()))
    throw Error(ErrorCode::InvalidArgument, "guard path: no node " + std::to_string(parent));
  auto [it, fresh] = index_.emplace(std::make_pair(parent, step), static_cast<uint32_t>(nodes_.size()));
  if (fresh) nodes_.push_back({parent, step, {}});
  return it->second;
}

uint32_t GuardSet::path(const std::vector<Step>& steps) {
  if (steps.empty()) throw Error(ErrorCode::InvalidArgument, "guard path: empty");
  int32_t at = -1;
  for (const Step& s : steps) at = static_cast<int32_t>(node(at, s));
  return static_cast<uint32_t>(at);
}

void GuardSet::check(uint32_t node, Check check) {
  if (node >= nodes_.size()) throw Error(ErrorCode::InvalidArgument, "guard: no node " + std::to_string(node));
  for (const Check& c : nodes_[node].checks)
    if (c.kind == check.kind && describe("", c) == describe("", check)) return;
  nodes_[node].checks.push_back(std::move(check));
}

sym::Expr GuardSet::symbol(const std::string& name, uint32_t node) {
  if (node >= nodes_.size()) throw Error(ErrorCode::InvalidArgument, "guard: no node " + std::to_string(node));
  for (const SymbolSource& s : symbols_)
    if (s.symbol.name() == name) {
      if (s.node != node)
        throw Error(ErrorCode::InvalidArgument, "guard symbol " + name + " read from both " +
                                                    source(s.node) + " and " + source(node));
      return s.symbol;
    }
  sym::Expr s = table_->declare(name, std::nullopt, sym::Range::unbounded());
  symbols_.push_back({s, node});
  return s;
}

void GuardSet::shapeGuard(sym::Expr relation) {
  if (!relation.isBool()) throw Error(ErrorCode::InvalidArgument, "shape guard is not a relation: " + sym::toString(relation));
  if (&relation.table() != table_.get())
    throw Error(ErrorCode::InvalidArgument, "shape guard of another symbol table");
  if (auto known = relation.asBoolean()) {
    if (*known) return;
    throw Error(ErrorCode::InvalidArgument, "shape guard is always false");
  }
  for (sym::Expr s : sym::freeSymbols(relation)) {
    bool sourced = false;
    for (const SymbolSource& src : symbols_) sourced = sourced || src.symbol == s;
    if (!sourced) throw Error(ErrorCode::InvalidArgument, "shape guard names " + s.name() + ", which no source reads");
  }
  for (sym::Expr g : shapeGuards_)
    if (g == relation) return;
  shapeGuards_.push_back(relation);
}

void GuardSet::replaceShapeGuards(const std::vector<sym::Expr>& relations) {
  std::vector<sym::Expr> before = std::move(shapeGuards_);
  shapeGuards_.clear();
  try {
    for (sym::Expr g : relations) shapeGuard(g);
  } catch (...) {
    shapeGuards_ = std::move(before);
    throw;
  }
}

std::string GuardSet::source(uint32_t node) const {
  const Node& n = nodes_.at(node);
  const Step& s = n.step;
  std::string base = n.parent >= 0 ? source(static_cast<uint32_t>(n.parent)) : "";
  switch (s.kind) {
  case StepKind::Arg:
  case StepKind::Kwarg: return "L[" + quoted(s.name) + "]";
  case StepKind::Global: return "G[" + quoted(s.name) + "]";
  case StepKind::Closure: return "C[" + quoted(s.name) + "]";
  case StepKind::Default: return "F.__defaults__[" + std::to_string(s.index) + "]";
  case StepKind::KwDefault: return "F.__kwdefaults__[" + quoted(s.name) + "]";
  case StepKind::Attr: return base + "." + s.name;
  case StepKind::Index:
  case StepKind::IntKey: return base + "[" + std::to_string(s.index) + "]";
  case StepKind::Key: return base + "[" + quoted(s.name) + "]";
  case StepKind::Size: return base + ".size()[" + std::to_string(s.index) + "]";
  case StepKind::Stride: return base + ".stride()[" + std::to_string(s.index) + "]";
  case StepKind::Value: return base + ".item()";
  case StepKind::HasAttr: return "hasattr(" + base + ", " + quoted(s.name) + ")";
  case StepKind::Module: return "sys.modules[" + quoted(s.name) + "]";
  case StepKind::ClassAttr: return "static(" + base + ".__mro__[" + std::to_string(s.index) + ":], " + quoted(s.name) + ")";
  }
  return base;
}

std::string describe(const std::string& src, const Check& c) {
  switch (c.kind) {
  case Check::Kind::Type: return "type(" + src + ") is " + c.type.text();
  case Check::Kind::Identity: {
    char id[32];
    std::snprintf(id, sizeof id, "%#llx", static_cast<unsigned long long>(c.identity.id));
    return src + " is " + c.identity.label + " (id " + id + ")";
  }
  case Check::Kind::Equals: return src + " == " + c.equals.text();
  case Check::Kind::Length: return "len(" + src + ") == " + std::to_string(c.length);
  case Check::Kind::DictKeys: {
    std::string keys;
    for (size_t k = 0; k < c.dictKeys.keys.size(); ++k) keys += (k ? ", " : "") + c.dictKeys.keys[k].text();
    return c.dictKeys.ordered ? "list(" + src + ".keys()) == [" + keys + "]"
                              : "set(" + src + ".keys()) == {" + keys + "}";
  }
  case Check::Kind::Tensor: {
    const TensorCheck& t = c.tensor;
    std::string sizes, strides;
    for (size_t k = 0; k < t.sizes.size(); ++k) {
      sizes += (k ? ", " : "") + staticText(t.sizes[k]);
      strides += (k ? ", " : "") + staticText(t.strides[k]);
    }
    return src + " is a tensor " + std::string(dtypeName(t.dtype)) + " " + ir::toString(t.device) + " size [" +
           sizes + "] stride [" + strides + "] offset " + staticText(t.storageOffset) +
           (t.requiresGrad ? " requires_grad" : "");
  }
  }
  return src;
}

std::string GuardSet::text() const {
  std::ostringstream out;
  out << "call: " << call.positional << " positional";
  for (const std::string& k : call.keywords) out << ", " << k << "=";
  out << "\n";
  if (globals.gradEnabled) out << "torch.is_grad_enabled() == " << (*globals.gradEnabled ? "True" : "False") << "\n";
  if (globals.defaultDtype) out << "torch.get_default_dtype() == " << dtypeName(*globals.defaultDtype) << "\n";
  if (globals.deterministic)
    out << "torch.are_deterministic_algorithms_enabled() == " << (*globals.deterministic ? "True" : "False") << "\n";
  for (const Autocast& a : globals.autocast)
    out << "autocast(" << (a.device == ir::DeviceType::Cuda ? "cuda" : "cpu") << ") == "
        << (a.enabled ? std::string("on ") + std::string(dtypeName(a.dtype)) : std::string("off")) << "\n";
  for (uint32_t n = 0; n < nodes_.size(); ++n)
    for (const Check& c : nodes_[n].checks) out << describe(source(n), c) << "\n";
  for (const SymbolSource& s : symbols_) out << s.symbol.name() << " = " << source(s.node) << "\n";
  for (sym::Expr g : shapeGuards_) out << sym::toString(g) << "\n";
  return out.str();
}

} // namespace kiln::guards
