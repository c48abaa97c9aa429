// Evaluation in checked int64 arithmetic, substitution and free symbols.
#include <algorithm>
#include <unordered_set>

#include "kiln/sym/eval.h"
#include "poly.h"

namespace kiln::sym {
namespace detail {
namespace {

template <class Lookup> int64_t eval(const Node* n, const Lookup& lookup) {
  const Term* args = n->terms();
  auto arg = [&](uint32_t i) { return eval(args[i].expr.node(), lookup); };
  switch (n->kind) {
  case Kind::Integer:
  case Kind::Boolean: return n->value;
  case Kind::Symbol: return lookup(n);
  case Kind::Sum: {
    int64_t v = n->value;
    for (uint32_t i = 0; i < n->size; ++i) v = checkedAdd(v, checkedMul(args[i].coeff, arg(i)));
    return v;
  }
  case Kind::Product: {
    int64_t v = 1;
    for (uint32_t i = 0; i < n->size; ++i) v = checkedMul(v, checkedPow(arg(i), args[i].coeff));
    return v;
  }
  case Kind::FloorDiv: return floorDivide(arg(0), arg(1));
  case Kind::Mod: return floorMod(arg(0), arg(1));
  case Kind::Min:
  case Kind::Max: {
    int64_t v = arg(0);
    for (uint32_t i = 1; i < n->size; ++i)
      v = n->kind == Kind::Min ? std::min(v, arg(i)) : std::max(v, arg(i));
    return v;
  }
  case Kind::Eq: return arg(0) == arg(1);
  case Kind::Ne: return arg(0) != arg(1);
  case Kind::Lt: return arg(0) < arg(1);
  case Kind::Le: return arg(0) <= arg(1);
  case Kind::And:
  case Kind::Or: {
    // Every argument is evaluated: the canonical order is not the source order,
    // so short-circuiting would make errors depend on it.
    bool all = true, any = false;
    for (uint32_t i = 0; i < n->size; ++i) {
      const bool v = arg(i) != 0;
      all = all && v;
      any = any || v;
    }
    return n->kind == Kind::And ? all : any;
  }
  case Kind::Not: return arg(0) == 0;
  }
  throw Error(ErrorCode::Internal, "evaluate: unknown node kind");
}

Expr power(Expr base, int64_t exponent) { // by squaring
  Expr result = tableOf(base).integer(1);
  while (exponent > 0) {
    if (exponent & 1) result = result * base;
    exponent >>= 1;
    if (exponent) base = base * base;
  }
  return result;
}

Expr rebuild(const Node* n, const Substitution& replacements,
             std::unordered_map<const Node*, Expr>& memo) {
  if (n->kind == Kind::Integer || n->kind == Kind::Boolean) return Expr(n);
  if (n->kind == Kind::Symbol) {
    const auto it = replacements.find(Expr(n));
    return it == replacements.end() ? Expr(n) : it->second;
  }
  if (const auto it = memo.find(n); it != memo.end()) return it->second;
  const Term* args = n->terms();
  auto arg = [&](uint32_t i) { return rebuild(args[i].expr.node(), replacements, memo); };
  Expr out;
  switch (n->kind) {
  case Kind::Sum:
    out = n->table->integer(n->value);
    for (uint32_t i = 0; i < n->size; ++i) out = out + arg(i) * args[i].coeff;
    break;
  case Kind::Product:
    out = n->table->integer(1);
    for (uint32_t i = 0; i < n->size; ++i) out = out * power(arg(i), args[i].coeff);
    break;
  case Kind::FloorDiv: out = floorDiv(arg(0), arg(1)); break;
  case Kind::Mod: out = mod(arg(0), arg(1)); break;
  case Kind::Eq: out = eq(arg(0), arg(1)); break;
  case Kind::Ne: out = ne(arg(0), arg(1)); break;
  case Kind::Lt: out = lt(arg(0), arg(1)); break;
  case Kind::Le: out = le(arg(0), arg(1)); break;
  case Kind::Not: out = logicalNot(arg(0)); break;
  case Kind::Min:
  case Kind::Max:
  case Kind::And:
  case Kind::Or:
    out = arg(0);
    for (uint32_t i = 1; i < n->size; ++i) {
      const Expr next = arg(i);
      out = n->kind == Kind::Min   ? min(out, next)
            : n->kind == Kind::Max ? max(out, next)
            : n->kind == Kind::And ? logicalAnd(out, next)
                                   : logicalOr(out, next);
    }
    break;
  default: throw Error(ErrorCode::Internal, "substitute: unknown node kind");
  }
  memo.emplace(n, out);
  return out;
}

void collectSymbols(const Node* n, std::unordered_set<const Node*>& seen, std::vector<Expr>& out) {
  if (!seen.insert(n).second) return;
  if (n->kind == Kind::Symbol) out.push_back(Expr(n));
  for (const Term& t : Terms(n->terms(), n->size)) collectSymbols(t.expr.node(), seen, out);
}

} // namespace
} // namespace detail

using namespace detail;

int64_t evaluate(Expr e, const Binding& binding) {
  tableOf(e);
  return eval(e.node(), [&](const Node* symbol) {
    const auto it = binding.find(Expr(symbol));
    if (it == binding.end())
      throw Error(ErrorCode::InvalidArgument, "symbol " + symbol->symbol->name + " is not bound");
    return it->second;
  });
}

int64_t evaluateWithHints(Expr e) {
  tableOf(e);
  return eval(e.node(), [](const Node* symbol) {
    if (!symbol->symbol->hint)
      throw Error(ErrorCode::InvalidArgument,
                  "symbol " + symbol->symbol->name + " is unbacked: it has no hint");
    return *symbol->symbol->hint;
  });
}

Expr substitute(Expr e, const Substitution& replacements) {
  tableOf(e);
  std::unordered_map<const Node*, Expr> memo;
  return rebuild(e.node(), replacements, memo);
}

std::vector<Expr> freeSymbols(Expr e) {
  tableOf(e);
  std::unordered_set<const Node*> seen;
  std::vector<Expr> out;
  collectSymbols(e.node(), seen, out);
  std::sort(out.begin(), out.end(), [](Expr a, Expr b) { return compare(a, b) < 0; });
  return out;
}

} // namespace kiln::sym
