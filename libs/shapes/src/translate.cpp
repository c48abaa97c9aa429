#include "translate.h"

#include "kiln/common/error.h"
#include "kiln/sym/range.h"

namespace kiln::shapes::detail {

namespace {

sym::Expr symbolIn(sym::Expr s, sym::SymbolTable& to, const Rename& rename) {
  const std::string name = rename ? rename(s) : s.name();
  if (auto existing = to.lookup(name)) return *existing;
  return to.declare(name, s.table().hint(s), sym::range(s));
}

sym::Expr fold(sym::Expr (*op)(sym::Expr, sym::Expr), const sym::Terms& args, sym::SymbolTable& to,
               const Rename& rename) {
  sym::Expr out = translate(args[0].expr, to, rename);
  for (size_t i = 1; i < args.size(); ++i) out = op(out, translate(args[i].expr, to, rename));
  return out;
}

} // namespace

sym::Expr translate(sym::Expr e, sym::SymbolTable& to, const Rename& rename) {
  const sym::Terms args = e.terms();
  auto arg = [&](size_t i) { return translate(args[i].expr, to, rename); };
  switch (e.kind()) {
  case sym::Kind::Integer: return to.integer(*e.asInteger());
  case sym::Kind::Boolean: return to.boolean(*e.asBoolean());
  case sym::Kind::Symbol: return symbolIn(e, to, rename);
  case sym::Kind::Sum: {
    sym::Expr out = to.integer(e.constant());
    for (size_t i = 0; i < args.size(); ++i) out = out + arg(i) * args[i].coeff;
    return out;
  }
  case sym::Kind::Product: {
    sym::Expr out = to.integer(1);
    for (size_t i = 0; i < args.size(); ++i) {
      sym::Expr factor = arg(i);
      for (int64_t k = 0; k < args[i].coeff; ++k) out = out * factor;
    }
    return out;
  }
  case sym::Kind::FloorDiv: return sym::floorDiv(arg(0), arg(1));
  case sym::Kind::Mod: return sym::mod(arg(0), arg(1));
  case sym::Kind::Min:
    return fold([](sym::Expr a, sym::Expr b) { return sym::min(a, b); }, args, to, rename);
  case sym::Kind::Max:
    return fold([](sym::Expr a, sym::Expr b) { return sym::max(a, b); }, args, to, rename);
  case sym::Kind::Eq: return sym::eq(arg(0), arg(1));
  case sym::Kind::Ne: return sym::ne(arg(0), arg(1));
  case sym::Kind::Lt: return sym::lt(arg(0), arg(1));
  case sym::Kind::Le: return sym::le(arg(0), arg(1));
  case sym::Kind::And: return fold(sym::logicalAnd, args, to, rename);
  case sym::Kind::Or: return fold(sym::logicalOr, args, to, rename);
  case sym::Kind::Not: return sym::logicalNot(arg(0));
  }
  throw Error(ErrorCode::Internal, "translate: unknown expression kind");
}

void copySymbols(const sym::SymbolTable& from, sym::SymbolTable& to, bool hints) {
  for (sym::Expr s : from.symbols())
    if (!to.lookup(s.name()))
      to.declare(s.name(), hints ? from.hint(s) : std::nullopt, sym::range(s));
}

} // namespace kiln::shapes::detail
