// Python floats the graph computes. A float argument that automatic dynamic made
// dynamic (it differed between calls, or mark_dynamic named it) is a 0-d f64 CPU
// graph input, and Python arithmetic on it records 0-d ops, so a learning rate
// that changes every step reuses one entry (unspecialized floats, the
// graph computing what Python computed). `.item()` of a floating tensor is one
// too, with no value known at trace time. Where Python needs the number (a
// branch, int(), a format, an op attribute that must be a constant), the float
// is specialised: the float inputs it is computed from are guarded equal to
// their values, a stricter guard than Dynamo's SymFloat relations but one that
// holds exactly when the trace does.
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "kiln/ir/dtype.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/range.h"
#include "tracer_state.h"

namespace kiln::tracer {

void TraceState::floatInput(ir::ValueId placeholder, const Path& path, double hint) {
  floatInputs_[placeholder] = {path, hint};
}

Var TraceState::tracedFloat(ir::ValueId value, double hint) {
  Var v = make(Kind::Float);
  v->traced = true;
  v->value = value;
  v->number = hint;
  return v;
}

double TraceState::number(const Var& v) {
  if (v->kind != Kind::Float) return static_cast<double>(concrete(v));
  if (!v->traced) return v->number;
  // The placeholders the value is computed from: each must be a float input.
  const char* fromData = "the value of a float computed from tensor data (.item()), where Python needs a number";
  std::set<ir::ValueId> seen;
  std::vector<ir::ValueId> work{v->value};
  std::vector<ir::ValueId> sources;
  while (!work.empty()) {
    ir::ValueId id = work.back();
    work.pop_back();
    if (!seen.insert(id).second) continue;
    const ir::Node& n = graph.node(id);
    if (dataFloats_.count(id)) unsupported(fromData);
    if (n.kind == ir::NodeKind::Placeholder) {
      if (!floatInputs_.count(id)) unsupported(fromData);
      sources.push_back(id);
      continue;
    }
    for (ir::ValueId in : n.inputs) work.push_back(in);
    for (const ir::Attr& a : n.attrs) // a symbolic size it was computed from (0.9 ** s0)
      if (const auto* e = std::get_if<sym::Expr>(&a.value)) concrete(integer(*e));
  }
  for (ir::ValueId id : sources) {
    const auto& [path, value] = floatInputs_.at(id);
    guards.check(guards.path(path), guards::equals(guards::Constant{value}));
  }
  v->traced = false; // every alias of it is this number now
  return v->number;
}

Var TraceState::itemFloat(const Var& t) {
  const ir::TensorMeta& m = meta(t);
  if (!sym::staticallyKnown(sym::eq(ir::numel(m.sizes, table), 1)).value_or(false))
    unsupported("item() of a tensor that may not have one element");
  Var value = float64Scalar(t);
  dataFloats_.insert(value->value);
  return tracedFloat(value->value, std::numeric_limits<double>::quiet_NaN());
}

Var TraceState::float64Scalar(const Var& t) {
  Var scalar = callOp("reshape", {t, sequence(Kind::Tuple, {})}, {});
  return op("to_dtype", {scalar->value}, {{"dtype", DType::Float64}});
}

namespace {

// Python's float arithmetic, for the value a traced result has now.
double pythonArith(const std::string& symbol, double x, double y) {
  if (symbol == "+") return x + y;
  if (symbol == "-") return x - y;
  if (symbol == "*") return x * y;
  if (symbol == "/") return x / y;
  if (symbol == "//") return std::floor(x / y);
  if (symbol == "%") return x - y * std::floor(x / y);
  return std::pow(x, y); // **
}

} // namespace

Var TraceState::floatArith(const std::string& symbol, const Var& a, const Var& b) {
  static const std::map<std::string, std::string> ops = {{"+", "add"}, {"-", "sub"},       {"*", "mul"},
                                                         {"/", "div"}, {"//", "div"},      {"%", "remainder"},
                                                         {"**", "pow"}};
  auto it = ops.find(symbol);
  if (it == ops.end()) unsupported("float operator " + symbol);
  auto hint = [&](const Var& v) {
    if (v->kind == Kind::Float) return v->number;
    if (v->kind == Kind::Bool && v->symbolic.isNull()) return v->boolean ? 1.0 : 0.0;
    if (auto c = v->symbolic.asInteger()) return static_cast<double>(*c);
    return static_cast<double>(sym::evaluateWithHints(v->symbolic));
  };
  double x = hint(a), y = hint(b);
  if ((symbol == "/" || symbol == "//" || symbol == "%") && y == 0)
    unsupported("float division by zero"); // Python raises; torch would give inf or nan
  // The left operand as a 0-d f64 tensor: a number there becomes one, so the op
  // divides (subtracts, ...) in the order Python does.
  Var left = a;
  if (!a->traced) {
    ir::AttrValue fill = a->kind == Kind::Float ? ir::AttrValue{a->number}
                         : a->kind == Kind::Bool ? ir::AttrValue{static_cast<int64_t>(a->boolean)}
                         : a->symbolic.asInteger() ? ir::AttrValue{*a->symbolic.asInteger()}
                                                   : ir::AttrValue{a->symbolic};
    left = op("full", {}, {{"size", std::vector<sym::Expr>{}}, {"fill_value", fill}, {"dtype", DType::Float64}});
  } else {
    left = tensor(a->value);
  }
  Var right = b->traced ? tensor(b->value) : b;
  Kwargs kwargs;
  if (symbol == "//") kwargs.emplace_back("rounding_mode", string("floor"));
  Var result = callOp(it->second, {left, right}, kwargs);
  return tracedFloat(result->value, pythonArith(symbol, x, y));
}

std::optional<Var> TraceState::floatMath(const std::string& f, const Var& x) {
  static const std::map<std::string, double (*)(double)> fns = {
      {"sqrt", [](double v) { return std::sqrt(v); }}, {"exp", [](double v) { return std::exp(v); }},
      {"log", [](double v) { return std::log(v); }},   {"tanh", [](double v) { return std::tanh(v); }},
      {"cos", [](double v) { return std::cos(v); }},   {"sin", [](double v) { return std::sin(v); }},
      {"erf", [](double v) { return std::erf(v); }},   {"abs", [](double v) { return std::fabs(v); }},
      {"neg", [](double v) { return -v; }}};
  auto it = fns.find(f);
  if (it == fns.end()) return std::nullopt;
  // Python raises on sqrt/log outside their domain; torch gives nan
  if ((f == "sqrt" && x->number < 0) || (f == "log" && x->number <= 0)) unsupported("math." + f + " domain error");
  Var result = op(f, {x->value});
  return tracedFloat(result->value, it->second(x->number));
}

ir::ValueId TraceState::floatOperand(const Var& v, const std::vector<Var>& operands) {
  // What torch would make of the call with the float as a Python number.
  ir::ResultType promoted;
  bool dimensioned = false;
  for (const Var& o : operands) {
    if (o == v) continue;
    if (o->kind == Kind::Tensor) {
      const ir::TensorMeta& m = meta(o);
      promoted.add(m.dtype, m.dim() ? ir::Operand::Tensor : ir::Operand::ZeroDim);
      dimensioned = dimensioned || m.dim() != 0;
    } else if (o->kind == Kind::Float) {
      promoted.add(DType::Float64, ir::Operand::Scalar);
    } else if (o->kind == Kind::Int) {
      promoted.add(DType::Int64, ir::Operand::Scalar);
    } else if (o->kind == Kind::Bool) {
      promoted.add(DType::Bool, ir::Operand::Scalar);
    }
  }
  promoted.add(DType::Float64, ir::Operand::Scalar);
  DType want = promoted.result();
  // Beside a dimensioned f16/bf16 tensor, torch computes in f32 with the number
  // as an f32: a 0-d f32 operand keeps the result's dtype and that precision.
  if ((want == DType::Float16 || want == DType::BFloat16) && dimensioned) want = DType::Float32;
  if (want == DType::Float64) return v->value;
  return op("to_dtype", {v->value}, {{"dtype", want}})->value;
}

} // namespace kiln::tracer
