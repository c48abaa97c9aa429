// The tracer's variables: what a value on the symbolic stack is.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/guards/guard_set.h"
#include "kiln/ir/graph.h"
#include "kiln/schema/tracer.capnp.h"

namespace kiln::tracer {

using Path = std::vector<guards::Step>;

enum class Kind : uint8_t {
  None,
  Bool,     // constant, or symbolic (`symbolic` is a relation)
  Int,      // `symbolic`: a constant or an expression over sizes
  Float,    // `number`; a traced one (`traced`) is graph value `value` (0-d f64), `number` its value now
  Str,
  Ellipsis,
  Tensor,   // graph value `value`
  Tuple,
  List,
  Dict,     // keys and items
  Range,    // items: start, stop, step (Ints)
  Slice,    // items: start, stop, step (None or Int)
  Iterator, // items, next
  Null,     // the NULL of the call protocol
  Function, // a user function: code + defaults + closure cells
  Cell,     // items[0]: its contents (absent: empty)
  Builtin,  // a callable known by qualified name (`name`)
  PyModule, // a Python module (`name`)
  NnModule, // an nn.Module described at `path`
  Object,   // another object described at `path`; or, without one, an instance the traced code
            // made: its class `cls`, its __dict__ `attrs`, a dict layout's items `storage`
  Method,   // `self`'s attribute `name`, bound
  DType,
  Device,
  TypeObject,
  GradMode, // torch.no_grad() / enable_grad() as a context manager: `boolean` = enabled
  Autocast, // torch.autocast(...) as a context manager: `name` its device type, `dtype`, `boolean` = enabled
  Set,      // a set the traced code made: its distinct items, in insertion order
  Super,    // super(): `cls` the class it starts after, `self` the instance
};

struct VarNode;
using Var = std::shared_ptr<VarNode>;

struct FunctionInfo {
  schema::Code::Reader code;
  std::vector<Var> defaults;
  std::vector<std::pair<std::string, Var>> kwDefaults;
  std::vector<Var> closure; // Cells, in co_freevars order
  std::string module;       // whose globals it reads
  std::optional<std::vector<guards::Step>> path; // where the function object is, when described
};

struct VarNode {
  Kind kind = Kind::None;
  bool boolean = false;
  double number = 0;
  std::string name; // Str's value, Builtin/PyModule's name, Method's attribute
  sym::Expr symbolic;
  ir::ValueId value = 0;
  std::vector<Var> items;
  std::vector<Var> keys;
  size_t next = 0;
  Var self;
  Var cls;     // a made Object's class (a TypeObject of the call), Super's starting class
  Var attrs;   // a made Object's __dict__ (a Dict of str keys)
  Var storage; // a made Object's dict items (Dict), where its layout is dict or OrderedDict
  std::string layout; // a made Object's: "object", "dict" or "OrderedDict"
  std::shared_ptr<FunctionInfo> function;
  DType dtype = DType::Float32;
  ir::Device device;
  guards::TypeRef type;
  std::vector<guards::TypeRef> mro; // a module's or object's type's __mro__, as described
  std::optional<Path> path; // where it came from in the call, for its guards
  std::optional<schema::ObjectDesc::Reader> desc;
  bool isList = false; // a List made by the traced code (a side effect when mutated, otherwise)
  bool traced = false; // a Float the graph computes (see floats.cpp)
  bool shared = false; // a Cell of the call (a closure's): a write to it is the caller's to see
};

inline Var make(Kind kind) {
  auto v = std::make_shared<VarNode>();
  v->kind = kind;
  return v;
}

inline Var none() { return make(Kind::None); }

inline Var boolean(bool b) {
  Var v = make(Kind::Bool);
  v->boolean = b;
  return v;
}

inline Var integer(sym::Expr e) {
  Var v = make(Kind::Int);
  v->symbolic = e;
  return v;
}

inline Var floating(double d) {
  Var v = make(Kind::Float);
  v->number = d;
  return v;
}

inline Var string(std::string s) {
  Var v = make(Kind::Str);
  v->name = std::move(s);
  return v;
}

inline Var sequence(Kind kind, std::vector<Var> items) {
  Var v = make(kind);
  v->items = std::move(items);
  return v;
}

inline Var builtin(std::string name) {
  Var v = make(Kind::Builtin);
  v->name = std::move(name);
  return v;
}

inline Var method(Var self, std::string name) {
  Var v = make(Kind::Method);
  v->self = std::move(self);
  v->name = std::move(name);
  return v;
}

// A tensor's shape is a torch.Size: a Tuple of this type.
inline guards::TypeRef sizeType() { return {"torch", "Size"}; }
inline bool isSize(const Var& v) { return v->kind == Kind::Tuple && v->type.module == "torch" && v->type.qualname == "Size"; }

// torch.return_types' named tuples (max and min along a dim): (values, indices).
inline bool isReturnType(const Var& v) { return v->kind == Kind::Tuple && v->type.module == "torch.return_types"; }

std::string kindName(Kind kind);

} // namespace kiln::tracer
