// torch.ops.aten.<op>[.<overload>] calls: an overload's arguments bound by its schema,
// then called as the torch function or Tensor method of the op's name.
#include "aten.h"

#include <algorithm>

namespace kiln::tracer {

namespace {

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool isNumber(const Var& v) { return v->kind == Kind::Int || v->kind == Kind::Float || v->kind == Kind::Bool; }

// Whether `v` is a value of schema type `type`, as the dispatcher converts Python values:
// a tensor only where the schema takes one.
bool fits(const std::string& type, const Var& v) {
  if (startsWith(type, "Optional[")) return v->kind == Kind::None || fits(type.substr(9, type.size() - 10), v);
  if (startsWith(type, "List[")) {
    if (v->kind != Kind::List && v->kind != Kind::Tuple) return false;
    std::string item = type.substr(5, type.size() - 6);
    return std::all_of(v->items.begin(), v->items.end(), [&](const Var& x) { return fits(item, x); });
  }
  if (type == "Tensor") return v->kind == Kind::Tensor || isNumber(v); // a number is wrapped, as torch's form wraps it
  if (type == "number") return isNumber(v);
  if (type == "int" || type == "SymInt") return v->kind == Kind::Int;
  if (type == "float") return v->kind == Kind::Float || v->kind == Kind::Int;
  if (type == "bool") return v->kind == Kind::Bool;
  if (type == "str") return v->kind == Kind::Str;
  if (type == "ScalarType") return v->kind == Kind::DType;
  if (type == "Device") return v->kind == Kind::Device || v->kind == Kind::Str;
  return false; // Layout, MemoryFormat, Generator, Dimname, ...: not bound by kiln
}

// A torch.return_types tuple as the plain tuple an ATen op returns.
Var plain(const Var& v) {
  if (!isReturnType(v)) return v;
  return sequence(Kind::Tuple, v->items);
}

} // namespace

std::string atenName(schema::AtenOp::Reader op) {
  std::string qualified = op.getQualifiedName().cStr();
  return "torch.ops.aten." + qualified.substr(qualified.find("::") + 2);
}

Var callAten(TraceState& s, schema::AtenOp::Reader op, std::vector<Var> args, const Kwargs& kwargs,
             const std::function<Var(schema::Constant::Reader)>& constant) {
  std::string name = op.getTorchName().cStr();
  std::string what = atenName(op);
  if (!op.getOverload()) {
    // The packet picks its overload by the arguments' types, as the torch form does.
    if (kwarg(kwargs, "out")) unsupported(what + "(out=...)");
    auto r = callTorch(s, name, std::move(args), kwargs);
    if (!r) unsupported(what + ": kiln does not map " + name);
    return plain(*r);
  }
  auto schema = op.getArguments();
  std::vector<std::optional<Var>> bound(schema.size());
  size_t next = 0;
  for (size_t k = 0; k < schema.size() && next < args.size(); ++k)
    if (!schema[k].getKwargOnly()) bound[k] = args[next++];
  if (next < args.size()) unsupported(what + ": " + std::to_string(args.size()) + " positional arguments");
  for (const auto& [key, value] : kwargs) {
    size_t k = 0;
    while (k < schema.size() && key != schema[k].getName().cStr()) ++k;
    if (k == schema.size()) unsupported(what + ": no argument named '" + key + "'");
    if (bound[k]) unsupported(what + ": argument '" + key + "' given twice");
    bound[k] = value;
  }
  // The torch form's call: positional arguments up to the last one given (defaults fill
  // the gaps), keyword-only ones by name where given.
  std::vector<Var> positional;
  Kwargs keywords;
  size_t lastGiven = 0;
  for (size_t k = 0; k < schema.size(); ++k)
    if (bound[k] && !schema[k].getKwargOnly()) lastGiven = k + 1;
  for (size_t k = 0; k < schema.size(); ++k) {
    auto a = schema[k];
    std::string argName = a.getName().cStr();
    if (!bound[k]) {
      if (!a.getHasDefault()) unsupported(what + ": missing argument '" + argName + "'");
      if (!a.getKwargOnly() && k < lastGiven) positional.push_back(constant(a.getDefault()));
      continue;
    }
    if (!fits(a.getType().cStr(), *bound[k]))
      unsupported(what + ": argument '" + argName + "' is a " + kindName((*bound[k])->kind) + ", not " +
                  a.getType().cStr());
    if (a.getKwargOnly())
      keywords.emplace_back(argName, *bound[k]);
    else
      positional.push_back(*bound[k]);
  }
  auto r = callTorch(s, name, std::move(positional), keywords);
  if (!r) unsupported(what + ": kiln does not map " + name);
  return plain(*r);
}

} // namespace kiln::tracer
