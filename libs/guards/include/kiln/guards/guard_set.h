// kiln::guards::GuardSet: what must hold of a call for a compiled entry to
// serve it. A tree of source paths from the call's roots (argument, keyword,
// global, closure cell) through attributes, items and tensor sizes, with
// checks at its nodes, the call's shape, the global state the graph depends
// on, and symbolic shape guards over symbols read from int-valued nodes.
// Nodes are shared: asking twice for the same step from the same parent gives
// the same node, so equal paths are walked once. See docs/guards.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "kiln/common/dtype.h"
#include "kiln/ir/tensor_meta.h"
#include "kiln/sym/expr.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::guards {

enum class StepKind : uint8_t { Arg, Kwarg, Global, Closure, Attr, Index, Key, IntKey, Size, Stride, Default, KwDefault, Value, HasAttr, Module, ClassAttr };

struct Step {
  StepKind kind = StepKind::Arg;
  int64_t index = 0; // Arg, Closure, Index, IntKey, Size, Stride, Default
  std::string name;  // Arg (its parameter), Kwarg, Global, Closure (its variable), Attr, Key, KwDefault, HasAttr

  bool isRoot() const;
  friend bool operator<(const Step& a, const Step& b) {
    return std::tie(a.kind, a.index, a.name) < std::tie(b.kind, b.index, b.name);
  }
  friend bool operator==(const Step& a, const Step& b) {
    return a.kind == b.kind && a.index == b.index && a.name == b.name;
  }
};

Step arg(uint32_t index, std::string name);
Step kwarg(std::string name);
Step global(std::string name);
Step closure(uint32_t index, std::string name);
Step attr(std::string name);
Step item(int64_t index);
Step key(std::string name);
Step intKey(int64_t key);
Step size(uint32_t dim);
Step stride(uint32_t dim);
Step defaultArg(uint32_t index); // the called function's __defaults__[index]
Step kwDefault(std::string name); // its __kwdefaults__[name]
Step value();                     // a 0-d CPU tensor's .item() (an int or a float)
Step hasAttr(std::string name);   // hasattr(., name): a bool
Step pyModule(std::string name);  // sys.modules[name]: an imported module, a path's root
Step classAttr(uint32_t from, std::string name); // a class's raw attribute, looked up from __mro__[from]

struct TypeRef {
  std::string module, qualname;
  std::string text() const; // "torch.Tensor"
  friend bool operator==(const TypeRef& a, const TypeRef& b) {
    return a.module == b.module && a.qualname == b.qualname;
  }
};

// A Python constant: None, bool, int, float, str or a tuple of them. Equality
// is Python's `==` with the type too (True is not 1; 1.0 is not 1; nan == nan
// here, as the guard means "the same constant").
struct Constant {
  using Tuple = std::vector<Constant>;
  std::variant<std::monostate, bool, int64_t, double, std::string, Tuple> value;

  std::string text() const; // Python's repr
  friend bool operator==(const Constant& a, const Constant& b);
  friend bool operator!=(const Constant& a, const Constant& b) { return !(a == b); }
};

// A static size, stride or offset; nullopt: dynamic (a symbol stands for it).
using StaticInt = std::optional<int64_t>;

struct TensorCheck {
  DType dtype = DType::Float32;
  ir::Device device;
  bool requiresGrad = false;
  std::vector<StaticInt> sizes; // the dim count is sizes.size()
  std::vector<StaticInt> strides;
  StaticInt storageOffset = 0;
};

struct Identity {
  uint64_t id = 0;
  uint64_t scope = 0; // the recording process's token
  std::string label;
};

struct DictKeys {
  std::vector<Constant> keys;
  bool ordered = false;
};

struct Check {
  enum class Kind : uint8_t { Type, Identity, Equals, Length, DictKeys, Tensor }; // cheapest first
  Kind kind = Kind::Type;
  TypeRef type;
  Identity identity;
  Constant equals;
  uint64_t length = 0;
  DictKeys dictKeys;
  TensorCheck tensor;
};

Check typeIs(TypeRef type);
Check identityIs(Identity identity);
Check equals(Constant value);
Check lengthIs(uint64_t length);
Check dictKeysAre(std::vector<Constant> keys, bool ordered);
Check tensorMatches(TensorCheck tensor);

struct Node {
  int32_t parent = -1; // -1: a root step
  Step step;
  std::vector<Check> checks;
};

struct CallShape {
  uint32_t positional = 0;
  std::vector<std::string> keywords; // sorted
};

struct Autocast {
  ir::DeviceType device = ir::DeviceType::Cpu;
  bool enabled = false;
  DType dtype = DType::BFloat16;
  friend bool operator==(const Autocast& a, const Autocast& b) {
    return a.device == b.device && a.enabled == b.enabled && a.dtype == b.dtype;
  }
  // Whether `got` is as this guard says: on or off, and the dtype only where
  // it is on (off, torch reads no autocast dtype; the guard's text says "off").
  bool holds(const Autocast& got) const {
    return device == got.device && enabled == got.enabled && (!enabled || dtype == got.dtype);
  }
};

// Process-wide state; unset fields are not checked (a CallInput sets them all).
struct GlobalState {
  std::optional<bool> gradEnabled;
  std::optional<DType> defaultDtype;
  std::optional<bool> deterministic;
  std::vector<Autocast> autocast;
};

struct SymbolSource {
  sym::Expr symbol;
  uint32_t node = 0; // an int-valued node (a Size or Stride step, or an int argument)
};

class GuardSet {
public:
  GuardSet();
  GuardSet(GuardSet&&) noexcept;
  GuardSet& operator=(GuardSet&&) noexcept;
  ~GuardSet();

  // The node for `step` from `parent` (-1 for a root step), made on first use.
  uint32_t node(int32_t parent, const Step& step);
  // The node of a whole path from a root: node(node(node(-1, a), b), c).
  uint32_t path(const std::vector<Step>& steps);
  void check(uint32_t node, Check check);
  // s = the int at `node` (declared in this set's table on first use).
  sym::Expr symbol(const std::string& name, uint32_t node);
  void shapeGuard(sym::Expr relation); // must be a relation over this set's symbols
  // Replaces every shape guard (as the shapes service's simplify returns them),
  // each checked as shapeGuard checks it; on an error the set is left as it was.
  void replaceShapeGuards(const std::vector<sym::Expr>& relations);

  CallShape call;
  GlobalState globals;

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<SymbolSource>& symbols() const { return symbols_; }
  const std::vector<sym::Expr>& shapeGuards() const { return shapeGuards_; }
  sym::SymbolTable& table() { return *table_; }
  const sym::SymbolTable& table() const { return *table_; }

  // The source text of a node: L['x'], L['self'].blocks[3].attn, G['helper'],
  // L['x'].size()[0] (Dynamo's spelling, so messages read the same).
  std::string source(uint32_t node) const;
  // Every guard, one per line, in the order of `source` texts (kiln explain).
  std::string text() const;

private:
  std::unique_ptr<sym::SymbolTable> table_;
  std::vector<Node> nodes_;
  std::map<std::pair<int32_t, Step>, uint32_t> index_;
  std::vector<SymbolSource> symbols_;
  std::vector<sym::Expr> shapeGuards_;
};

// One check in words, as its failure message starts: "L['x'].size()[0] == 8",
// "type(L['n']) is builtins.int", "len(L['xs']) == 3".
std::string describe(const std::string& source, const Check& check);

} // namespace kiln::guards
