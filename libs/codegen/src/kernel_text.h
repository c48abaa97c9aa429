// Kernel source text shared by the CPU and CUDA emitters: C++ types of
// dtypes, conversions, and KernelText, which prints a kernel's scalar
// expressions (loads through symbolic indices, math, casts, `where`) as
// single-assignment temporaries and tracks what the kernel reads: its
// buffers, its symbols (in slot order) and the reductions held in registers.
// The text is the same for both targets: the CUDA prelude maps the `std::`
// math functions and `std::numeric_limits` it uses onto CUDA's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/codegen/loop_ir.h"
#include "kiln/codegen/schedule.h"
#include "kiln/common/error.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen::detail {

// The C++ type holding a value of `t` in a kernel (half types compute as float).
inline std::string valueType(DType t) {
  switch (t) {
  case DType::Float32:
  case DType::Float16:
  case DType::BFloat16: return "float";
  case DType::Float64: return "double";
  case DType::Int8: return "int8_t";
  case DType::Int16: return "int16_t";
  case DType::Int32: return "int32_t";
  case DType::Int64: return "int64_t";
  case DType::UInt8: return "uint8_t";
  case DType::Bool: return "bool";
  default: throw Error(ErrorCode::Unsupported, "codegen: complex dtypes");
  }
}

// The C++ type of a buffer's elements.
inline std::string storageType(DType t) {
  if (t == DType::Float16) return "kiln_half";
  if (t == DType::BFloat16) return "kiln_bf16";
  return valueType(t);
}

// A stored element as the value kernels compute with (half types as float).
inline std::string fromStorage(DType t, const std::string& element) {
  if (t == DType::Float16) return "kiln_h2f(" + element + ")";
  if (t == DType::BFloat16) return "kiln_b2f(" + element + ")";
  return element;
}

inline std::string literal(double v, DType t) {
  std::string type = valueType(t);
  if (std::isnan(v)) return "std::numeric_limits<" + type + ">::quiet_NaN()";
  if (std::isinf(v))
    return std::string(v < 0 ? "-" : "") + "std::numeric_limits<" + type + ">::infinity()";
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return "static_cast<" + type + ">(" + text + ")";
}

inline bool isComparison(const std::string& op) {
  return op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge";
}

// `x` (a value of `from`) as a value of `to`.
inline std::string convert(DType from, DType to, const std::string& x) {
  if (from == to) return x;
  if (to == DType::Float16) return "kiln_round_h(static_cast<float>(" + x + "))";
  if (to == DType::BFloat16) return "kiln_round_b(static_cast<float>(" + x + "))";
  if (to == DType::Bool) return "((" + x + ") != 0)";
  return "static_cast<" + valueType(to) + ">(" + x + ")";
}

class KernelText {
public:
  KernelText(const Program& program, const Kernel& kernel, std::vector<sym::Expr>& symbols)
      : program_(program), kernel_(kernel), symbols_(symbols) {}
  virtual ~KernelText() = default;

protected:
  // An index expression as the emitter prints it: the same value, possibly
  // over other variables (a target's cheaper form).
  virtual sym::Expr rewriteIndex(sym::Expr e) { return e; }
  // A direct load's element as the emitter reads it: a target may keep
  // elements it loaded in registers for later buffers of the kernel.
  virtual std::string cachedLoad(const ScalarNode&, const std::string& element, bool /*lazy*/) {
    return element;
  }
  // Whether the kernels' threads may add to one element at once (kiln_atomic_add).
  virtual bool atomicScatters() const { return false; }
  // Whether f32's `1 + erf(x)` is kiln_erf_plus_one(x) and `(1 + erf(x * M_SQRT1_2)) * 0.5`
  // kiln_normal_cdf(x) (erf_plus_one_fn.h): on the GPU, where exact GELU is bound by erff's
  // instructions; the CPU keeps libm's erf.
  virtual bool erfPolynomials() const { return false; }

  static std::string pointer(BufferId id) { return "kiln_b" + std::to_string(id); }

  // A reduction's identity in C++: its accumulator's first value (0 for an arg reduction,
  // whose position decides).
  static std::string reductionIdentity(const Loops& l) {
    std::string type = valueType(l.accumulator);
    bool floating = ir::isFloating(l.accumulator);
    switch (l.reduce) {
    case ReduceOp::Prod: return "1";
    case ReduceOp::Max:
      return floating ? "-std::numeric_limits<" + type + ">::infinity()"
                      : "std::numeric_limits<" + type + ">::lowest()";
    case ReduceOp::Min:
      return floating ? "std::numeric_limits<" + type + ">::infinity()"
                      : "std::numeric_limits<" + type + ">::max()";
    case ReduceOp::Any: return "false";
    case ReduceOp::All: return "true";
    default: return "0";
    }
  }

  size_t slot(sym::Expr s) {
    for (size_t k = 0; k < symbols_.size(); ++k)
      if (symbols_[k] == s) return k;
    symbols_.push_back(s);
    return symbols_.size() - 1;
  }

  // An index expression in C++, noting the symbols it reads.
  std::string index(sym::Expr e) {
    e = rewriteIndex(e);
    for (sym::Expr s : sym::freeSymbols(e)) used_.insert(s);
    return sym::toCpp(e);
  }

  void declare(sym::Expr var, const std::string& value, std::string& lines,
               const std::string& indent) {
    declared_.insert(var);
    lines += indent + "const int64_t " + sym::toString(var) + " = " + value + ";\n";
  }

  // A scatter (Loops::scatter) at the outer index kiln_o0..: its ordered loop
  // in order (the CPU's innermost loop, a CUDA thread's own); each element
  // added to the one its index names when that index is in range, else the
  // kernel's index error (and no store). Without a loop in order, each
  // element adds atomically (a target whose atomicScatters()).
  std::string scatter(BufferId id, std::string indent) {
    const Buffer& b = program_.buffers[id];
    const Loops& l = b.loops;
    buffers_.insert(id);
    std::string lines = indent + "// " + b.name + " (scatter)\n", close;
    for (size_t k = 0; k < l.vars.size(); ++k)
      if (l.ranges[k].asInteger() == 1) declare(l.vars[k], "0", lines, indent);
    LoopShape outer = scatterOuter(l);
    for (size_t k = 0; k < outer.vars.size(); ++k)
      declare(outer.vars[k], "kiln_o" + std::to_string(k), lines, indent);
    if (l.scatterDim < l.vars.size() && l.ranges[l.scatterDim].asInteger() != 1) {
      sym::Expr var = l.vars[l.scatterDim];
      declared_.insert(var);
      std::string v = sym::toString(var);
      lines += indent + "for (int64_t " + v + " = 0; " + v + " < " + index(l.ranges[l.scatterDim]) +
               "; ++" + v + ") {\n";
      indent += "  ";
      close = indent.substr(2) + "}\n";
    }
    Block block(indent);
    DType t = b.layout.dtype;
    DType compute = ir::opmath(t);
    std::string value = convert(l.body->dtype, compute, emit(l.body, block, false));
    const ScalarNode& to = *l.scatter;
    std::string inRange, bind;
    for (size_t k = 0; k < to.indirect.size(); ++k) {
      std::string at = emit(to.args[k], block, false), size = index(to.indirectSizes[k]);
      declared_.insert(to.indirect[k]);
      inRange += (k ? " && " : "") + at + " >= 0 && " + at + " < " + size;
      bind += "const int64_t " + sym::toString(to.indirect[k]) + " = " + at + "; ";
    }
    lines += block.lines;
    std::string element = pointer(id) + "[" + index(to.index) + "]", old = element;
    if (l.atomicScatter()) { // no loop in order: every element adds atomically
      if (!atomicScatters())
        throw Error(ErrorCode::Internal, "codegen: an unordered scatter on a target without atomics");
      lines += indent + "if (" + (inRange.empty() ? "true" : inRange) + ") { " + bind +
               "kiln_atomic_add(&" + element + ", " + value + "); } else kiln_flag(&kiln_error, 2);\n";
      return lines + close;
    }
    if (t == DType::Float16) old = "kiln_h2f(" + element + ")";
    if (t == DType::BFloat16) old = "kiln_b2f(" + element + ")";
    std::string sum = "static_cast<" + valueType(compute) + ">(" + old + " + " + value + ")";
    lines += indent + "if (" + (inRange.empty() ? "true" : inRange) + ") { " + bind + element +
             " = " + stored(t, compute, sum) + "; } else kiln_flag(&kiln_error, 2);\n";
    return lines + close;
  }

  // A value of `from` as stored in a buffer of `to`.
  std::string stored(DType to, DType from, const std::string& value) {
    std::string v =
        convert(from, ir::opmath(to), value);
    if (to == DType::Float16) return "kiln_f2h(" + v + ")";
    if (to == DType::BFloat16) return "kiln_f2b(" + v + ")";
    return v;
  }

  struct Block;
  // A computed buffer's body as its buffer stores it, its statements in
  // `block`. A body rounded to the buffer's half dtype last is stored
  // unrounded: the store's conversion is the rounding.
  std::string storedBody(const Buffer& b, Block& block) {
    const Scalar& body = b.loops.body;
    DType t = b.layout.dtype;
    if ((t == DType::Float16 || t == DType::BFloat16) && body->kind == ScalarKind::Cast &&
        body->dtype == t && !replaced_.count(body.get()))
      return stored(t, body->args[0]->dtype, emit(body->args[0], block, false));
    return stored(t, body->dtype, emit(body, block, false));
  }

  struct Block {
    explicit Block(std::string i) : indent(std::move(i)) {}
    std::string indent;
    std::string lines;
    std::unordered_map<std::string, std::string> named; // expression -> temporary
  };

  // A temporary holding `expr` (shared with an equal earlier one).
  std::string bind(Block& block, DType t, const std::string& expr) {
    auto [it, fresh] = block.named.emplace(expr, "kiln_v" + std::to_string(next_));
    if (fresh) {
      ++next_;
      block.lines +=
          block.indent + "const " + valueType(t) + " " + it->second + " = " + expr + ";\n";
    }
    return it->second;
  }

  std::string emit(const Scalar& s, Block& block, bool lazy) {
    std::string expr = expression(s, block, lazy);
    if (lazy || s->kind == ScalarKind::Constant) return expr;
    return bind(block, s->dtype, expr);
  }

  std::string expression(const Scalar& s, Block& block, bool lazy) {
    if (auto reused = replaced_.find(s.get()); reused != replaced_.end()) return reused->second;
    const ScalarNode& n = *s;
    DType t = n.dtype;
    std::string type = valueType(t);
    auto arg = [&](size_t k) { return emit(n.args[k], block, lazy); };
    switch (n.kind) {
    case ScalarKind::Load: return load(n, block, lazy);
    case ScalarKind::Constant:
      if (t == DType::Bool) return n.integer ? "true" : "false";
      if (ir::isFloating(t)) return literal(n.number, t);
      if (n.integer == INT64_MIN) // no literal spells it: 9223372036854775808 is past int64
        return "static_cast<" + type + ">(INT64_C(-9223372036854775807) - 1)";
      return "static_cast<" + type + ">(INT64_C(" + std::to_string(n.integer) + "))";
    case ScalarKind::IndexOf: return "static_cast<" + type + ">(" + index(n.index) + ")";
    case ScalarKind::Cast: return convert(n.args[0]->dtype, t, arg(0));
    case ScalarKind::Where: {
      std::string c = emit(n.args[0], block, lazy);
      Block inner(block.indent);
      std::string a = emit(n.args[1], inner, true), b = emit(n.args[2], inner, true);
      return "(" + c + " ? " + convert(n.args[1]->dtype, t, a) + " : " +
             convert(n.args[2]->dtype, t, b) + ")";
    }
    case ScalarKind::Unary: return unaryExpr(n, arg(0));
    case ScalarKind::Binary:
      if (const Scalar* x = erfPolynomials() ? normalCdfOperand(n) : nullptr)
        return "kiln_normal_cdf(" + emit(*x, block, lazy) + ")";
      if (const Scalar* x = erfPolynomials() ? erfPlusOneOperand(n) : nullptr)
        return "kiln_erf_plus_one(" + emit(*x, block, lazy) + ")";
      return binaryExpr(n, arg(0), arg(1));
    case ScalarKind::Philox:
      return "kiln_philox_uniform(static_cast<uint64_t>(" + arg(0) + "), static_cast<uint64_t>(" +
             arg(1) + "))";
    }
    throw Error(ErrorCode::Internal, "codegen: unknown scalar kind");
  }

  bool isLocal(BufferId id) const {
    return std::find(kernel_.local.begin(), kernel_.local.end(), id) != kernel_.local.end();
  }

  // A flat kernel's pointwise element `value` (as stored): stored at the
  // buffer's index, or, when only later buffers of the kernel read it
  // (Kernel::local), held in `name`, which their loads of it then read.
  std::string storeOrHold(BufferId id, const std::string& value, const std::string& name,
                          const std::string& indent) {
    const Buffer& b = program_.buffers[id];
    if (!isLocal(id))
      return indent + pointer(id) + "[" + index(storeIndex(b)) + "] = " + value + ";\n";
    hold(id, name);
    return indent + "const " + storageType(b.layout.dtype) + " " + name + " = " + value + ";\n";
  }
  // Loads of a local pointwise buffer read `element` (a stored value) from here on.
  void hold(BufferId id, const std::string& element) {
    DType t = program_.buffers[id].layout.dtype;
    registers_[id] = {fromStorage(t, element), t};
  }

  std::string load(const ScalarNode& n, Block& block, bool lazy) {
    auto reg = registers_.find(n.buffer);
    const Buffer& b = program_.buffers[n.buffer];
    if (reg != registers_.end()) // a local buffer of this kernel: its value, as stored
      return convert(b.layout.dtype, n.dtype,
                     convert(reg->second.second, b.layout.dtype, reg->second.first));
    buffers_.insert(n.buffer);
    std::string prefix;
    for (size_t k = 0; k < n.indirect.size(); ++k) {
      declared_.insert(n.indirect[k]);
      std::string value = "kiln_check_index(static_cast<int64_t>(" + emit(n.args[k], block, lazy) +
                          "), " + index(n.indirectSizes[k]) + ", &kiln_error)";
      if (lazy)
        prefix += "const int64_t " + sym::toString(n.indirect[k]) + " = " + value + "; ";
      else
        block.lines +=
            block.indent + "const int64_t " + sym::toString(n.indirect[k]) + " = " + value + ";\n";
    }
    std::string element =
        fromStorage(b.layout.dtype, pointer(n.buffer) + "[" + index(n.index) + "]");
    if (lazy && !prefix.empty()) return "[&]() { " + prefix + "return " + element + "; }()";
    return n.indirect.empty() ? cachedLoad(n, element, lazy) : element;
  }

  std::string unaryExpr(const ScalarNode& n, const std::string& x) {
    const std::string& op = n.op;
    DType t = n.dtype;
    std::string type = valueType(t);
    DType in = n.args[0]->dtype;
    bool floating = ir::isFloating(t);
    if (op == "logical_not") return "!(" + x + ")";
    if (op == "isnan") return ir::isFloating(in) ? "(" + x + " != " + x + ")" : "false";
    if (op == "isinf") return ir::isFloating(in) ? "std::isinf(" + x + ")" : "false";
    if (op == "neg") return "static_cast<" + type + ">(-" + x + ")";
    if (op == "abs")
      return floating ? "std::fabs(" + x + ")"
                      : "static_cast<" + type + ">(" + x + " < 0 ? -" + x + " : " + x + ")";
    if (op == "relu") return "kiln_relu(" + x + ")";
    if (op == "sign") return "kiln_sign(" + x + ")";
    if (!floating) {
      if (op == "floor" || op == "ceil" || op == "round" || op == "trunc") return x;
      throw Error(ErrorCode::Unsupported, "codegen: " + op + " of integers");
    }
    if (op == "round") return "std::nearbyint(" + x + ")";
    if (op == "rsqrt") return "(" + type + "(1) / std::sqrt(" + x + "))";
    if (op == "reciprocal") return "(" + type + "(1) / " + x + ")";
    if (op == "sigmoid") return "kiln_sigmoid(" + x + ")";
    for (const char* f : {"exp", "exp2", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan",
                          "tanh", "erf", "floor", "ceil", "trunc"})
      if (op == f) return "std::" + op + "(" + x + ")";
    throw Error(ErrorCode::Unsupported, "codegen: no C++ for unary op '" + op + "'");
  }

  // The value of a floating constant, cast or not (a scalar attribute's f64, cast to f32);
  // not through a half type, whose rounding would change it.
  static std::optional<double> floatingConstant(const ScalarNode* n) {
    auto wide = [](DType t) { return t == DType::Float32 || t == DType::Float64; };
    while (n->kind == ScalarKind::Cast && wide(n->dtype) && wide(n->args[0]->dtype))
      n = n->args[0].get();
    if (n->kind != ScalarKind::Constant || !ir::isFloating(n->dtype)) return std::nullopt;
    return n->number;
  }

  // The operand of f32's binary `op` whose other operand is the constant k in f32 (either
  // order).
  static const Scalar* withConstant(const ScalarNode& n, const char* op, double k) {
    if (n.kind != ScalarKind::Binary || n.op != op || n.dtype != DType::Float32) return nullptr;
    for (size_t i = 0; i < 2; ++i) {
      std::optional<double> c = floatingConstant(n.args[1 - i].get());
      if (c && static_cast<float>(*c) == static_cast<float>(k) &&
          n.args[i]->dtype == DType::Float32)
        return &n.args[i];
    }
    return nullptr;
  }

  // x, where `n` is f32's 1 + erf(x) or erf(x) + 1 (a user's; exact GELU's is the normal
  // cdf below).
  static const Scalar* erfPlusOneOperand(const ScalarNode& n) {
    const Scalar* erf = withConstant(n, "add", 1.0);
    if (!erf || (*erf)->kind != ScalarKind::Unary || (*erf)->op != "erf" ||
        (*erf)->args[0]->dtype != DType::Float32)
      return nullptr;
    return &(*erf)->args[0];
  }

  // x, where `n` is f32's (1 + erf(x * M_SQRT1_2)) * 0.5, the normal cdf (exact GELU's
  // decomposition, forward and backward), in any operand order.
  static const Scalar* normalCdfOperand(const ScalarNode& n) {
    const Scalar* sum = withConstant(n, "mul", 0.5);
    const Scalar* scaled = sum ? erfPlusOneOperand(**sum) : nullptr;
    return scaled ? withConstant(**scaled, "mul", M_SQRT1_2) : nullptr;
  }

  std::string binaryExpr(const ScalarNode& n, const std::string& a, const std::string& b) {
    const std::string& op = n.op;
    DType t = n.dtype;
    std::string type = valueType(t);
    bool floating = ir::isFloating(t);
    auto typed = [&](const std::string& e) { return "static_cast<" + type + ">(" + e + ")"; };
    if (isComparison(op)) {
      static const std::unordered_map<std::string, std::string> ops = {
          {"eq", "=="}, {"ne", "!="}, {"lt", "<"}, {"le", "<="}, {"gt", ">"}, {"ge", ">="}};
      return "(" + a + " " + ops.at(op) + " " + b + ")";
    }
    if (op == "logical_and") return "((" + a + ") != 0 && (" + b + ") != 0)";
    if (op == "logical_or") return "((" + a + ") != 0 || (" + b + ") != 0)";
    if (op == "add") return typed(a + " + " + b);
    if (op == "sub") return typed(a + " - " + b);
    if (op == "mul") return typed(a + " * " + b);
    if (op == "maximum" || op == "clamp_min")
      return op == "maximum" ? "kiln_maximum(" + a + ", " + b + ")" : clamp(a, b, ">");
    if (op == "minimum" || op == "clamp_max")
      return op == "minimum" ? "kiln_minimum(" + a + ", " + b + ")" : clamp(a, b, "<");
    if (op == "bitwise_and") return typed(a + " & " + b);
    if (op == "bitwise_or") return typed(a + " | " + b);
    if (op == "bitwise_xor") return typed(a + " ^ " + b);
    if (t == DType::Float16 || t == DType::BFloat16) { // a half-typed step: rounded
      std::string r = t == DType::Float16 ? "kiln_round_h" : "kiln_round_b";
      if (op == "div_trunc") return "std::trunc(" + r + "(" + a + " / " + b + "))";
      if (op == "div_floor") return "kiln_fdiv_floor_rounded(" + a + ", " + b + ", " + r + ")";
    }
    if (floating) {
      if (op == "div") return a + " / " + b;
      if (op == "div_trunc") return "std::trunc(" + a + " / " + b + ")";
      if (op == "div_floor") return "kiln_fdiv_floor(" + a + ", " + b + ")";
      if (op == "pow") return "std::pow(" + a + ", " + b + ")";
      if (op == "fmod") return "std::fmod(" + a + ", " + b + ")";
      if (op == "remainder") return "kiln_fremainder(" + a + ", " + b + ")";
    } else {
      if (op == "div_floor") return typed("kiln_idiv_floor(" + a + ", " + b + ", &kiln_error)");
      if (op == "div_trunc") return typed("kiln_idiv_trunc(" + a + ", " + b + ", &kiln_error)");
      if (op == "remainder") return typed("kiln_imod(" + a + ", " + b + ", &kiln_error)");
      if (op == "fmod") return typed("kiln_ifmod(" + a + ", " + b + ", &kiln_error)");
      if (op == "pow") return typed("kiln_ipow(" + a + ", " + b + ")");
    }
    throw Error(ErrorCode::Unsupported,
                "codegen: no C++ for binary op '" + op + "' on " + std::string(ir::name(t)));
  }

  // clamp's bound: NaN in x stays, a NaN bound wins, else the larger (smaller).
  static std::string clamp(const std::string& x, const std::string& bound,
                           const std::string& keep) {
    return "(" + x + " != " + x + " ? " + x + " : (" + bound + " != " + bound + " ? " + bound +
           " : (" + x + " " + keep + " " + bound + " ? " + x + " : " + bound + ")))";
  }

  // Every subtree of `tree` equal to `wanted` (tree's size-1 vars read as 0): layer_norm's
  // variance reads x + r twice, as both factors of its square.
  void findAll(const Scalar& tree, const Scalar& wanted,
               const std::unordered_map<sym::Expr, sym::Expr>& units,
               std::vector<const ScalarNode*>& found) {
    if (same(wanted, tree, units)) {
      found.push_back(tree.get());
      return;
    }
    for (const Scalar& a : tree->args) findAll(a, wanted, units, found);
  }

  static bool same(const Scalar& a, const Scalar& b,
                   const std::unordered_map<sym::Expr, sym::Expr>& units) {
    if (a->kind != b->kind || a->dtype != b->dtype || a->op != b->op || a->buffer != b->buffer ||
        a->number != b->number || a->integer != b->integer || a->args.size() != b->args.size() ||
        !a->indirect.empty() || !b->indirect.empty() || a->index.isNull() != b->index.isNull())
      return false;
    if (!a->index.isNull() && a->index != sym::substitute(b->index, units)) return false;
    for (size_t k = 0; k < a->args.size(); ++k)
      if (!same(a->args[k], b->args[k], units)) return false;
    return true;
  }

  // The row-major position of `vars` in `ranges`, as C++.
  std::string linear(const std::vector<sym::Expr>& vars, const Shape& ranges) {
    sym::Expr at = zero();
    for (size_t k = 0; k < vars.size(); ++k) at = at * ranges[k] + vars[k];
    return index(at);
  }

  std::string numelText(const Shape& ranges) {
    sym::Expr n = zero() + 1;
    for (sym::Expr r : ranges) n = n * r;
    return index(n);
  }

  sym::Expr zero() {
    return kernel_.outer.empty() ? program_.buffers.front().layout.storageOffset.table().integer(0)
                                 : kernel_.outer.front().table().integer(0);
  }

  const Program& program_;
  const Kernel& kernel_;
  std::vector<sym::Expr>& symbols_;
  std::set<sym::Expr, bool (*)(sym::Expr, sym::Expr)> used_{
      [](sym::Expr a, sym::Expr b) { return sym::toString(a) < sym::toString(b); }};
  std::set<sym::Expr, bool (*)(sym::Expr, sym::Expr)> declared_{
      [](sym::Expr a, sym::Expr b) { return sym::toString(a) < sym::toString(b); }};
  std::set<BufferId> buffers_;
  std::unordered_map<BufferId, std::pair<std::string, DType>> registers_;
  std::unordered_map<const ScalarNode*, std::string> replaced_; // subtree -> row element
  size_t next_ = 0;
};

} // namespace kiln::codegen::detail
