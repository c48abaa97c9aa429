#include "kiln/guards/program.h"

#include <algorithm>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"

namespace kiln::guards {
namespace {

// Checks that fail most often come first among equally cheap ones: a tensor's
// sizes change more often than a constant, a constant more than a type.
int cost(const Check& c) {
  switch (c.kind) {
  case Check::Kind::Type: return 0;
  case Check::Kind::Identity: return 1;
  case Check::Kind::Equals: return 2;
  case Check::Kind::Length: return 3;
  case Check::Kind::DictKeys: return 4;
  case Check::Kind::Tensor: return 5;
  }
  return 6;
}

size_t depth(const std::vector<Node>& nodes, uint32_t n) {
  size_t d = 0;
  for (int32_t at = static_cast<int32_t>(n); nodes[static_cast<size_t>(at)].parent >= 0;
       at = nodes[static_cast<size_t>(at)].parent)
    ++d;
  return d;
}

class ShapeCompiler {
public:
  ShapeCompiler(const std::vector<SymbolSource>& symbols) : symbols_(symbols) {}

  ShapeCode compile(sym::Expr e) {
    ShapeCode out;
    out.text = sym::toString(e);
    emit(e, out.code);
    return out;
  }
  size_t maxStack() const { return maxStack_; }

private:
  void push(std::vector<SymInstruction>& code, SymInstruction i, int delta) {
    code.push_back(i);
    depth_ += delta;
    maxStack_ = std::max(maxStack_, static_cast<size_t>(std::max(depth_, 0)));
  }

  void nary(SymOp op, size_t n, std::vector<SymInstruction>& code) {
    if (n > 1) push(code, {op, static_cast<uint32_t>(n), 0}, 1 - static_cast<int>(n));
  }

  void emit(sym::Expr e, std::vector<SymInstruction>& code) {
    switch (e.kind()) {
    case sym::Kind::Integer: return push(code, {SymOp::Constant, 0, *e.asInteger()}, 1);
    case sym::Kind::Boolean: return push(code, {SymOp::Constant, 0, *e.asBoolean() ? 1 : 0}, 1);
    case sym::Kind::Symbol:
      for (size_t k = 0; k < symbols_.size(); ++k)
        if (symbols_[k].symbol == e) return push(code, {SymOp::Symbol, static_cast<uint32_t>(k), 0}, 1);
      throw Error(ErrorCode::InvalidArgument, "shape guard names " + e.name() + ", which no source reads");
    case sym::Kind::Sum: {
      size_t n = 0;
      for (const sym::Term& t : e.terms()) {
        emit(t.expr, code);
        if (t.coeff != 1) {
          push(code, {SymOp::Constant, 0, t.coeff}, 1);
          nary(SymOp::Mul, 2, code);
        }
        ++n;
      }
      if (e.constant() != 0 || n == 0) {
        push(code, {SymOp::Constant, 0, e.constant()}, 1);
        ++n;
      }
      return nary(SymOp::Add, n, code);
    }
    case sym::Kind::Product: {
      size_t n = 0;
      for (const sym::Term& t : e.terms())
        for (int64_t k = 0; k < t.coeff; ++k, ++n) emit(t.expr, code);
      return nary(SymOp::Mul, n, code);
    }
    default: break;
    }
    size_t n = 0;
    for (const sym::Term& t : e.terms()) {
      emit(t.expr, code);
      ++n;
    }
    switch (e.kind()) {
    case sym::Kind::FloorDiv: return nary(SymOp::FloorDiv, n, code);
    case sym::Kind::Mod: return nary(SymOp::Mod, n, code);
    case sym::Kind::Min: return nary(SymOp::Min, n, code);
    case sym::Kind::Max: return nary(SymOp::Max, n, code);
    case sym::Kind::Eq: return nary(SymOp::Eq, n, code);
    case sym::Kind::Ne: return nary(SymOp::Ne, n, code);
    case sym::Kind::Le: return nary(SymOp::Le, n, code);
    case sym::Kind::Lt: // never built (a < b is a + 1 <= b), but cheap to support
      push(code, {SymOp::Constant, 0, 1}, 1);
      nary(SymOp::Add, 2, code);
      return nary(SymOp::Le, 2, code);
    case sym::Kind::And: return nary(SymOp::And, n, code);
    case sym::Kind::Or: return nary(SymOp::Or, n, code);
    case sym::Kind::Not: return push(code, {SymOp::Not, 1, 0}, 0);
    default: throw Error(ErrorCode::Internal, "shape guard: unexpected expression kind");
    }
  }

  const std::vector<SymbolSource>& symbols_;
  int depth_ = 0;
  size_t maxStack_ = 0;
};

} // namespace

Program compile(const GuardSet& set) {
  Program p;
  p.call = set.call;
  p.globals = set.globals;
  p.nodes = set.nodes();
  for (uint32_t n = 0; n < p.nodes.size(); ++n) p.sources.push_back(set.source(n));
  p.code.push_back({Op::CallShape, 0, 0});
  p.code.push_back({Op::Globals, 0, 0});

  // Nodes by depth (the arguments themselves before what hangs off them), each
  // loaded just before its first check, parents first.
  std::vector<uint32_t> order(p.nodes.size());
  for (uint32_t n = 0; n < order.size(); ++n) order[n] = n;
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return depth(p.nodes, a) < depth(p.nodes, b);
  });
  std::vector<bool> loaded(p.nodes.size(), false);
  auto load = [&](uint32_t n, auto& self) -> void {
    if (loaded[n]) return;
    if (p.nodes[n].parent >= 0) self(static_cast<uint32_t>(p.nodes[n].parent), self);
    p.code.push_back({Op::Load, n, 0});
    loaded[n] = true;
  };
  for (uint32_t n : order) {
    std::vector<uint32_t> checks(p.nodes[n].checks.size());
    for (uint32_t k = 0; k < checks.size(); ++k) checks[k] = k;
    std::stable_sort(checks.begin(), checks.end(), [&](uint32_t a, uint32_t b) {
      return cost(p.nodes[n].checks[a]) < cost(p.nodes[n].checks[b]);
    });
    for (uint32_t k : checks) {
      load(n, load);
      p.code.push_back({Op::Check, n, k});
    }
  }
  for (uint32_t s = 0; s < set.symbols().size(); ++s) {
    load(set.symbols()[s].node, load);
    p.code.push_back({Op::Symbol, set.symbols()[s].node, s});
    p.symbols.push_back(set.symbols()[s].symbol.name());
    p.symbolNodes.push_back(set.symbols()[s].node);
  }
  ShapeCompiler shapes(set.symbols());
  for (uint32_t g = 0; g < set.shapeGuards().size(); ++g) {
    p.shapes.push_back(shapes.compile(set.shapeGuards()[g]));
    p.code.push_back({Op::Shape, 0, g});
  }
  p.maxStack = shapes.maxStack();
  return p;
}

bool evaluateShape(const ShapeCode& shape, const int64_t* symbols, int64_t* stack) {
  size_t top = 0;
  for (const SymInstruction& i : shape.code) {
    switch (i.op) {
    case SymOp::Constant: stack[top++] = i.value; continue;
    case SymOp::Symbol: stack[top++] = symbols[i.count]; continue;
    case SymOp::Not: stack[top - 1] = !stack[top - 1]; continue;
    default: break;
    }
    int64_t* args = stack + top - i.count;
    int64_t r = args[0];
    for (uint32_t k = 1; k < i.count; ++k) {
      int64_t b = args[k];
      switch (i.op) {
      case SymOp::Add:
        if (__builtin_add_overflow(r, b, &r)) return false;
        break;
      case SymOp::Mul:
        if (__builtin_mul_overflow(r, b, &r)) return false;
        break;
      case SymOp::FloorDiv:
      case SymOp::Mod: {
        if (b == 0 || (r == INT64_MIN && b == -1)) return false;
        int64_t q = r / b, m = r % b;
        if (m != 0 && ((m < 0) != (b < 0))) --q, m += b;
        r = i.op == SymOp::FloorDiv ? q : m;
        break;
      }
      case SymOp::Min: r = std::min(r, b); break;
      case SymOp::Max: r = std::max(r, b); break;
      case SymOp::Eq: r = r == b; break;
      case SymOp::Ne: r = r != b; break;
      case SymOp::Le: r = r <= b; break;
      case SymOp::And: r = r && b; break;
      case SymOp::Or: r = r || b; break;
      default: return false;
      }
    }
    top -= i.count;
    stack[top++] = r;
  }
  return top == 1 && stack[0] != 0;
}

} // namespace kiln::guards
