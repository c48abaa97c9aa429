#include "kiln/codegen/loop_ir.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen {
namespace {

ScalarNode nodeOf(ScalarKind kind, DType dtype) {
  ScalarNode n;
  n.kind = kind;
  n.dtype = dtype;
  return n;
}

Scalar make(ScalarNode node) {
  return std::make_shared<const ScalarNode>(std::move(node));
}

std::string numberText(const ScalarNode& n) {
  if (!ir::isFloating(n.dtype)) {
    if (n.dtype == DType::Bool) return n.integer ? "True" : "False";
    return std::to_string(n.integer);
  }
  std::ostringstream out;
  out.precision(17);
  out << n.number;
  return out.str();
}

} // namespace

Scalar load(DType dtype, BufferId buffer, sym::Expr index) {
  ScalarNode n = nodeOf(ScalarKind::Load, dtype);
  n.buffer = buffer;
  n.index = index;
  return make(std::move(n));
}

Scalar indirectLoad(DType dtype, BufferId buffer, sym::Expr index, std::vector<sym::Expr> symbols,
                    std::vector<Scalar> values, std::vector<sym::Expr> sizes) {
  if (symbols.size() != values.size() || symbols.size() != sizes.size())
    throw Error(ErrorCode::Internal, "indirectLoad: one value and size per indirect symbol");
  ScalarNode n = nodeOf(ScalarKind::Load, dtype);
  n.buffer = buffer;
  n.index = index;
  n.indirect = std::move(symbols);
  n.indirectSizes = std::move(sizes);
  n.args = std::move(values);
  return make(std::move(n));
}

Scalar constantF(DType dtype, double value) {
  ScalarNode n = nodeOf(ScalarKind::Constant, dtype);
  n.number = value;
  n.integer = static_cast<int64_t>(value);
  return make(std::move(n));
}

Scalar constantI(DType dtype, int64_t value) {
  ScalarNode n = nodeOf(ScalarKind::Constant, dtype);
  n.integer = value;
  n.number = static_cast<double>(value);
  return make(std::move(n));
}

Scalar indexOf(DType dtype, sym::Expr value) {
  ScalarNode n = nodeOf(ScalarKind::IndexOf, dtype);
  n.index = value;
  return make(std::move(n));
}

Scalar unary(std::string op, DType dtype, Scalar arg) {
  ScalarNode n = nodeOf(ScalarKind::Unary, dtype);
  n.op = std::move(op);
  n.args = {std::move(arg)};
  return make(std::move(n));
}

Scalar binary(std::string op, DType dtype, Scalar a, Scalar b) {
  ScalarNode n = nodeOf(ScalarKind::Binary, dtype);
  n.op = std::move(op);
  n.args = {std::move(a), std::move(b)};
  return make(std::move(n));
}

Scalar where(Scalar condition, Scalar a, Scalar b) {
  ScalarNode n = nodeOf(ScalarKind::Where, a->dtype);
  n.args = {std::move(condition), std::move(a), std::move(b)};
  return make(std::move(n));
}

Scalar cast(DType dtype, Scalar arg, bool foldRoundTrip) {
  if (arg->dtype == dtype) return arg;
  bool half = arg->dtype == DType::Float16 || arg->dtype == DType::BFloat16;
  if (foldRoundTrip && half && arg->kind == ScalarKind::Cast && arg->args[0]->dtype == dtype)
    return arg->args[0];
  ScalarNode n = nodeOf(ScalarKind::Cast, dtype);
  n.args = {std::move(arg)};
  return make(std::move(n));
}

Scalar philox(Scalar seed, Scalar counter) {
  ScalarNode n = nodeOf(ScalarKind::Philox, DType::Float64);
  n.args = {std::move(seed), std::move(counter)};
  return make(std::move(n));
}

Scalar substitute(const Scalar& s, const std::unordered_map<sym::Expr, sym::Expr>& vars) {
  ScalarNode n = *s;
  if (!n.index.isNull()) n.index = sym::substitute(n.index, vars);
  for (sym::Expr& size : n.indirectSizes) size = sym::substitute(size, vars);
  for (Scalar& a : n.args) a = substitute(a, vars);
  return make(std::move(n));
}

sym::Expr storeIndex(const Buffer& b) {
  sym::Expr at = b.layout.storageOffset;
  for (size_t k = 0; k < b.loops.vars.size(); ++k) at = at + b.loops.vars[k] * b.layout.strides[k];
  return at;
}

std::optional<int64_t> staticNumel(const Shape& sizes) {
  int64_t n = 1;
  for (sym::Expr s : sizes) {
    std::optional<int64_t> v = s.asInteger();
    if (!v) return std::nullopt;
    n *= *v;
  }
  return n;
}

std::optional<int64_t> hintedNumel(const Shape& sizes) {
  int64_t n = 1;
  for (const sym::Expr& s : sizes) {
    try {
      n = std::min<int64_t>(n * std::max<int64_t>(sym::evaluateWithHints(s), 0), int64_t{1} << 40);
    } catch (const Error&) { // an unbacked symbol: no hint
      return std::nullopt;
    }
  }
  return n;
}

std::vector<std::optional<int64_t>> loadSteps(const Scalar& body, sym::Expr var) {
  std::vector<std::optional<int64_t>> steps;
  std::function<void(const Scalar&)> walk = [&](const Scalar& s) {
    if (s->kind == ScalarKind::Load)
      steps.push_back((sym::substitute(s->index, {{var, var + 1}}) - s->index).asInteger());
    for (const Scalar& a : s->args) walk(a);
  };
  walk(body);
  return steps;
}

bool isPointwise(const Buffer& b) {
  return b.kind == BufferKind::Computed && !b.aliasOf && !b.loops.scatter &&
         b.loops.reduce == ReduceOp::None;
}

sym::Substitution unitsToZero(const Loops& l, bool reductionVars) {
  sym::Substitution map;
  for (size_t k = 0; k < l.vars.size(); ++k)
    if (l.ranges[k].asInteger() == 1) map.emplace(l.vars[k], l.vars[k].table().integer(0));
  for (size_t k = 0; reductionVars && k < l.reductionVars.size(); ++k)
    if (l.reductionRanges[k].asInteger() == 1)
      map.emplace(l.reductionVars[k], l.reductionVars[k].table().integer(0));
  return map;
}

bool reducesColumns(const Loops& l) {
  auto last = [](const std::vector<sym::Expr>& vars, const Shape& ranges) -> sym::Expr {
    for (size_t k = vars.size(); k-- > 0;)
      if (ranges[k].asInteger() != 1) return vars[k];
    return {};
  };
  sym::Expr column = last(l.vars, l.ranges), row = last(l.reductionVars, l.reductionRanges);
  if (l.reduce == ReduceOp::None || column.isNull() || row.isNull()) return false;
  // Loads the same for every output (a row's mean and rstd) are one read per
  // row for all threads: only those that move along the output count.
  std::vector<std::optional<int64_t>> across = loadSteps(l.body, column),
                                      along = loadSteps(l.body, row);
  // A step that is no constant (a cat's pieces, dims split by a view: x / 64
  // and x % 64) still moves by one for most neighbours.
  bool moves = false;
  for (size_t k = 0; k < across.size(); ++k) {
    if (across[k] == 0 || along[k] == 0) continue; // (a load the same along the rows: no rows read)
    if (along[k] == 1) return false;
    moves = true;
  }
  return moves;
}

size_t opCount(const Scalar& s) {
  size_t n = 1;
  for (const Scalar& a : s->args) n += opCount(a);
  return n;
}

std::string_view reduceOpName(ReduceOp op) {
  switch (op) {
  case ReduceOp::None: return "none";
  case ReduceOp::Sum: return "sum";
  case ReduceOp::Prod: return "prod";
  case ReduceOp::Max: return "max";
  case ReduceOp::Min: return "min";
  case ReduceOp::ArgMax: return "argmax";
  case ReduceOp::ArgMin: return "argmin";
  case ReduceOp::Any: return "any";
  case ReduceOp::All: return "all";
  }
  return "?";
}

std::string print(const Scalar& s, const Program& program) {
  const ScalarNode& n = *s;
  auto args = [&](size_t from) {
    std::string out;
    for (size_t i = from; i < n.args.size(); ++i)
      out += (i > from ? ", " : "") + print(n.args[i], program);
    return out;
  };
  switch (n.kind) {
  case ScalarKind::Load: {
    std::string text = "load(" + program.buffers.at(n.buffer).name + ", " + sym::toString(n.index);
    for (size_t i = 0; i < n.indirect.size(); ++i)
      text += ", " + sym::toString(n.indirect[i]) + "=" + print(n.args[i], program);
    return text + ")";
  }
  case ScalarKind::Constant: return numberText(n);
  case ScalarKind::IndexOf: return "index(" + sym::toString(n.index) + ")";
  case ScalarKind::Unary:
  case ScalarKind::Binary: return n.op + "(" + args(0) + ")";
  case ScalarKind::Where: return "where(" + args(0) + ")";
  case ScalarKind::Cast: return "to_" + std::string(ir::name(n.dtype)) + "(" + args(0) + ")";
  case ScalarKind::Philox: return "philox_uniform(" + args(0) + ")";
  }
  return "?";
}

namespace {

std::string shapeText(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + sym::toString(shape[i]);
  return out + "]";
}

std::string varsText(const std::vector<sym::Expr>& vars) {
  std::string out;
  for (size_t i = 0; i < vars.size(); ++i) out += (i ? ", " : "") + sym::toString(vars[i]);
  return out;
}

} // namespace

std::string print(const Program& program) {
  std::ostringstream out;
  for (const Buffer& b : program.buffers) {
    out << b.name << " : " << ir::toString(b.layout) << " = ";
    switch (b.kind) {
    case BufferKind::Input: out << "input " << b.placeholder << "\n"; break;
    case BufferKind::Computed: {
      const Loops& l = b.loops;
      if (l.scatter) {
        out << "scatter " << shapeText(l.ranges) << " over (" << varsText(l.vars) << ")";
        if (l.scatterDim < l.vars.size())
          out << ", " << sym::toString(l.vars[l.scatterDim]) << " in order";
        if (l.atomicScatter()) out << ", in any order";
        out << ", into " << print(l.scatter, program) << " +=\n";
      } else if (l.reduce == ReduceOp::None) {
        out << "pointwise " << shapeText(l.ranges) << " over (" << varsText(l.vars) << ")\n";
      } else {
        out << reduceOpName(l.reduce) << " " << shapeText(l.ranges) << " over ("
            << varsText(l.vars) << ") of " << shapeText(l.reductionRanges) << " over ("
            << varsText(l.reductionVars) << ") in " << ir::name(l.accumulator) << "\n";
      }
      out << "  " << print(l.body, program) << "\n";
      break;
    }
    case BufferKind::Extern: {
      out << "extern " << b.call.op << "(";
      for (size_t i = 0; i < b.call.inputs.size(); ++i)
        out << (i ? ", " : "") << program.buffers.at(b.call.inputs[i]).name << " as "
            << ir::toString(b.call.inputViews[i]);
      for (const ir::Attr& a : b.call.attrs) out << ", " << a.name << "=" << ir::toString(a.value);
      out << ")";
      for (BufferId r : b.call.results) out << ", and " << program.buffers.at(r).name;
      out << "\n";
      break;
    }
    case BufferKind::ExternResult: out << "a further result of an extern call\n"; break;
    }
  }
  out << "return (";
  for (size_t i = 0; i < program.outputs.size(); ++i) {
    const Output& o = program.outputs[i];
    out << (i ? ", " : "");
    if (!o.symInt.isNull())
      out << "sym(" << sym::toString(o.symInt) << ")";
    else
      out << program.buffers.at(o.buffer).name << " as " << ir::toString(o.view);
  }
  out << ")\n";
  return out.str();
}

} // namespace kiln::codegen
