// The state of one trace, shared by the evaluator (evaluator.cpp) and the
// mapping of torch calls to graph ops (torch_calls.cpp).
#pragma once

#include "autocast.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kiln/guards/frame_state.h"
#include "kiln/guards/guard_set.h"
#include "kiln/ir/graph.h"
#include "kiln/sym/symbol_table.h"
#include "variables.h"

namespace kiln::tracer {

// Ends the trace: the construct cannot be traced (yet).
struct Unsupported {
  std::string reason;
};

// Ends the trace until the SDK described these paths.
struct NeedObjects {
  std::vector<Path> paths;
};

[[noreturn]] void unsupported(const std::string& reason);

using Kwargs = std::vector<std::pair<std::string, Var>>;

// The keyword argument `name`, if given.
std::optional<Var> kwarg(const Kwargs& kwargs, const std::string& name);

// A call's arguments bound to parameters `names` as Python binds them: positional ones
// first, then keywords; those from `keywordOnly` on by keyword only. An extra positional
// argument, an unknown keyword or one given twice is refused: a handler never drops one.
struct Params {
  std::map<std::string, Var> given;
  std::optional<Var> operator[](const std::string& name) const {
    auto it = given.find(name);
    return it == given.end() ? std::nullopt : std::optional<Var>(it->second);
  }
};
Params bindParams(const std::string& what, const std::vector<Var>& args, const Kwargs& kwargs,
                  const std::vector<std::string>& names, size_t keywordOnly = SIZE_MAX);
// A bool argument (keepdim=), `otherwise` when absent: torch's parser takes no int for a bool.
bool boolArg(const std::string& what, const std::optional<Var>& v, bool otherwise);
// A tensor argument, refused when absent or of another kind.
Var tensorArg(const std::string& what, const std::optional<Var>& v);

class TraceState {
public:
  TraceState() : graph(table) {}
  virtual ~TraceState() = default;

  sym::SymbolTable table;
  ir::Graph graph;
  guards::GuardSet guards;
  guards::FrameState frame;
  bool gradEnabled = true; // inside torch.no_grad() regions: false
  // Where autocast is on for a device type (at the call, or inside torch.autocast
  // regions): its lower-precision dtype. Ops then cast their inputs on that device
  // type as torch's autocast does (autocast.h).
  AutocastState autocast;
  bool requiresGrad = false; // an op ran under grad mode on an input that requires grad
  bool noGradOverGrad = false; // an op ran in a no_grad region on an input that requires grad

  Var tensor(ir::ValueId id);
  // A copy: the graph's values move as ops are added, so a reference held across a
  // call that adds one dangles (tril of a bool mask read its dtype so, at random).
  ir::TensorMeta meta(const Var& v) const;
  // A graph op applied to graph values and attributes; its result as a variable
  // (a tensor, an int, or a tuple of tensors taken apart by getitem).
  Var op(const std::string& name, std::vector<ir::ValueId> inputs, std::vector<ir::Attr> attrs = {});
  // A Python-level call of a torch function or Tensor method (`name` is the IR
  // op), its arguments bound to the op's schema as torch binds them.
  Var callOp(const std::string& name, std::vector<Var> args, const Kwargs& kwargs);

  // An op binding a fresh unbacked symbol (item, nonzero, masked_select).
  Var unbackedOp(const std::string& name, std::vector<ir::ValueId> inputs);

  // Decides a condition now, guarding the decision when it rests on backed
  // symbols. One on unbacked symbols is asked of the shapes library (ranges,
  // the trace's runtime asserts, Z3); if it cannot tell, the branch depends on
  // data: Unsupported.
  bool decide(sym::Expr relation);
  // The value of an int now: a constant as it is; a symbolic one specialised to
  // its hint (guarded), for the places Python needs a concrete int.
  int64_t concrete(const Var& v);

  // ---- Python floats the graph computes (floats.cpp) ------------------------
  // A float input made dynamic: a 0-d f64 CPU graph input, its value now `hint`.
  void floatInput(ir::ValueId placeholder, const Path& path, double hint);
  // A float that is graph value `value` (0-d f64), whose value now is `hint`.
  Var tracedFloat(ir::ValueId value, double hint);
  // The value of a float now, for the places Python needs the number: a traced
  // float is specialised (the float inputs it is computed from are guarded equal
  // to their values); one computed from tensor data cannot be (Unsupported).
  double number(const Var& v);
  // t.item() of a 0-d CPU tensor input the call described with its value, not
  // written by the graph: backed by that value — an int is a
  // symbol (a graph input of its own), a float a traced float — guarded through
  // `L['t'].item()`. nullopt for any other tensor (the evaluator's: it owns the inputs).
  virtual std::optional<Var> itemOfInput(const Var& t) = 0;
  // A random stream of its own for one dropout of the trace: (seed, offset),
  // 0-d i64 values on `device`. The seed is a graph input the SDK draws afresh
  // from torch's generator at each call, one per device; each stream's offset
  // starts its own window of the Philox counter, as torch's generator advances
  // its offset per op.
  virtual std::pair<ir::ValueId, ir::ValueId> randomStream(ir::Device device) = 0;
  // t.item() of a floating tensor of one element: a traced float whose value the
  // trace does not know (it stays on t's device until Python needs the number).
  Var itemFloat(const Var& t);
  // A tensor of one element as a 0-d f64 graph value (what a float's .item() reads).
  Var float64Scalar(const Var& t);
  // Python arithmetic (+ - * / // % **) of numbers where one is a traced float.
  Var floatArith(const std::string& op, const Var& a, const Var& b);
  // math.<f>(x) of a traced float (sqrt exp log tanh cos sin erf), abs(x) and -x
  // ("abs", "neg"); nullopt for others.
  std::optional<Var> floatMath(const std::string& f, const Var& x);
  // A traced float as a number operand of a tensor op, beside `operands` (the
  // call's tensors and numbers): cast as torch promotes a Python float.
  ir::ValueId floatOperand(const Var& v, const std::vector<Var>& operands);

private:
  std::map<ir::ValueId, std::pair<Path, double>> floatInputs_; // placeholder -> (source, value)
  std::set<ir::ValueId> dataFloats_;                            // itemFloat's values

  // A condition an op needs that only the data decides: checked at run time
  // (an _assert_scalar node) unless the shapes library proves it. False when
  // it is false for every value. The caller takes it as a fact.
  bool deferAssert(sym::Expr condition, const std::string& op);
};

// An int argument (dim=): torch's parser takes no bool for an int.
int64_t intArg(TraceState& s, const std::string& what, const Var& v);
// A number argument (a scalar weight, beta): its value now, `otherwise` when absent.
double numberArg(TraceState& s, const std::string& what, const std::optional<Var>& v, double otherwise);

// Torch callables: `name` is the qualified name ("torch.relu",
// "torch.nn.functional.gelu") or "Tensor.<method>" for a bound Tensor method
// (self first in args). nullopt when kiln does not know the callable.
std::optional<Var> callTorch(TraceState& s, const std::string& name, std::vector<Var> args, const Kwargs& kwargs);
// Binary operators on tensors and numbers ("add", "mul", ... as IR ops, `reflected` for 2 * x).
Var tensorBinary(TraceState& s, const std::string& op, const Var& a, const Var& b);
// An attribute of a tensor that is not a method (shape, dtype, T, ...); nullopt for a method name.
std::optional<Var> tensorAttribute(TraceState& s, const Var& t, const std::string& name);
// x[index] for a tensor.
Var tensorIndex(TraceState& s, const Var& t, const Var& index);
// x[index] = value for a tensor.
void tensorSetItem(TraceState& s, const Var& x, const Var& index, const Var& value);
// Whether `name` is a callable or constant kiln knows in module `module` ("torch.float32").
std::optional<Var> moduleMember(const std::string& module, const std::string& name);

} // namespace kiln::tracer
