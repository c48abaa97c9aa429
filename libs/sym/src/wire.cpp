// SymExpr <-> Expr. Writing walks the canonical form; reading rebuilds through
// the builders, so whatever tree arrives comes out canonical.
#include "kiln/sym/wire.h"

#include <kj/exception.h>

#include "kiln/sym/symbol_table.h"
#include "poly.h"

namespace kiln::sym {
namespace detail {
namespace {

using schema::SymOpKind;

SymOpKind opKind(Kind kind) {
  switch (kind) {
  case Kind::Sum: return SymOpKind::ADD;
  case Kind::Product: return SymOpKind::MUL;
  case Kind::FloorDiv: return SymOpKind::FLOOR_DIV;
  case Kind::Mod: return SymOpKind::MOD;
  case Kind::Min: return SymOpKind::MIN;
  case Kind::Max: return SymOpKind::MAX;
  case Kind::Eq: return SymOpKind::EQ;
  case Kind::Ne: return SymOpKind::NE;
  case Kind::Lt: return SymOpKind::LT;
  case Kind::Le: return SymOpKind::LE;
  case Kind::And: return SymOpKind::AND;
  case Kind::Or: return SymOpKind::OR;
  case Kind::Not: return SymOpKind::NOT;
  default: throw Error(ErrorCode::Internal, "no wire op for a leaf");
  }
}

uint32_t factorCount(const Node* m) { // a monomial's factors, one per unit of exponent
  if (m->kind != Kind::Product) return 1;
  uint32_t count = 0;
  for (const Term& f : Terms(m->terms(), m->size)) {
    if (f.coeff > kMaxWireExponent)
      throw Error(ErrorCode::TooLarge,
                  "exponent " + std::to_string(f.coeff) + " is too large for the wire form");
    count += static_cast<uint32_t>(f.coeff);
  }
  return count;
}

void write(const Node* n, schema::SymExpr::Builder out);

void writeFactors(const Node* m, capnp::List<schema::SymExpr>::Builder args, uint32_t at) {
  if (m->kind != Kind::Product) return write(m, args[at]);
  for (const Term& f : Terms(m->terms(), m->size))
    for (int64_t e = 0; e < f.coeff; ++e) write(f.expr.node(), args[at++]);
}

void write(const Node* n, schema::SymExpr::Builder out) {
  switch (n->kind) {
  case Kind::Integer: return out.setInteger(n->value);
  case Kind::Boolean: return out.setBoolean(n->value != 0);
  case Kind::Symbol: return out.setSymbol(n->symbol->name);
  case Kind::Product: {
    auto op = out.initOp();
    op.setKind(SymOpKind::MUL);
    writeFactors(n, op.initArgs(factorCount(n)), 0);
    return;
  }
  case Kind::Sum: { // add(term..., constant), a term being m or mul(coefficient, factors...)
    auto op = out.initOp();
    op.setKind(SymOpKind::ADD);
    auto args = op.initArgs(n->size + (n->value != 0 ? 1 : 0));
    for (uint32_t i = 0; i < n->size; ++i) {
      const Term& t = n->terms()[i];
      if (t.coeff == 1) {
        write(t.expr.node(), args[i]);
        continue;
      }
      auto mul = args[i].initOp();
      mul.setKind(SymOpKind::MUL);
      auto factors = mul.initArgs(1 + factorCount(t.expr.node()));
      factors[0].setInteger(t.coeff);
      writeFactors(t.expr.node(), factors, 1);
    }
    if (n->value != 0) args[n->size].setInteger(n->value);
    return;
  }
  default: {
    auto op = out.initOp();
    op.setKind(opKind(n->kind));
    auto args = op.initArgs(n->size);
    for (uint32_t i = 0; i < n->size; ++i) write(n->terms()[i].expr.node(), args[i]);
  }
  }
}

[[noreturn]] void malformed(const std::string& what) {
  throw Error(ErrorCode::Malformed, "SymExpr: " + what);
}

Expr read(schema::SymExpr::Reader in, SymbolTable& table, int depth) {
  if (depth > kMaxWireDepth)
    malformed("nested deeper than " + std::to_string(kMaxWireDepth) + " levels");
  switch (in.which()) {
  case schema::SymExpr::INTEGER: return table.integer(in.getInteger());
  case schema::SymExpr::BOOLEAN: return table.boolean(in.getBoolean());
  case schema::SymExpr::SYMBOL: {
    const std::string name = in.getSymbol();
    if (const auto known = table.lookup(name)) return *known;
    try {
      return table.declare(name, std::nullopt, Range::unbounded());
    } catch (const Error& e) {
      if (e.code() != ErrorCode::AlreadyExists) throw; // declared meanwhile by another thread
      return *table.lookup(name);
    }
  }
  case schema::SymExpr::OP: break;
  default: malformed("unknown member " + std::to_string(static_cast<int>(in.which())));
  }
  const auto op = in.getOp();
  const auto args = op.getArgs();
  const SymOpKind kind = op.getKind();
  if (static_cast<uint16_t>(kind) > static_cast<uint16_t>(SymOpKind::NOT))
    malformed("unknown op " + std::to_string(static_cast<int>(kind)));
  auto arity = [&](uint32_t lo, uint32_t hi) {
    if (args.size() < lo || args.size() > hi)
      malformed("op " + std::to_string(static_cast<int>(kind)) + " with " +
                std::to_string(args.size()) + " arguments");
  };
  auto arg = [&](uint32_t i) { return read(args[i], table, depth + 1); };
  constexpr uint32_t kMany = ~uint32_t{0};
  switch (kind) {
  case SymOpKind::ADD: { // one normalisation for all the arguments
    arity(1, kMany);
    Poly sum;
    for (uint32_t i = 0; i < args.size(); ++i) {
      const Poly p = polyOf(requireInt(arg(i), "add"));
      sum.constant = checkedAdd(sum.constant, p.constant);
      sum.terms.insert(sum.terms.end(), p.terms.begin(), p.terms.end());
    }
    normalize(sum.terms);
    return build(table.impl(), sum);
  }
  case SymOpKind::MUL:
  case SymOpKind::MIN:
  case SymOpKind::MAX:
  case SymOpKind::AND:
  case SymOpKind::OR: {
    arity(1, kMany);
    Expr out = arg(0);
    for (uint32_t i = 1; i < args.size(); ++i) {
      const Expr next = arg(i);
      out = kind == SymOpKind::MUL   ? out * next
            : kind == SymOpKind::MIN ? min(out, next)
            : kind == SymOpKind::MAX ? max(out, next)
            : kind == SymOpKind::AND ? logicalAnd(out, next)
                                     : logicalOr(out, next);
    }
    if (args.size() == 1) { // a lone argument must still have the op's type
      if (kind == SymOpKind::AND || kind == SymOpKind::OR)
        requireBool(out, "and/or");
      else
        requireInt(out, "mul/min/max");
    }
    return out;
  }
  case SymOpKind::NOT: arity(1, 1); return logicalNot(arg(0));
  default: break;
  }
  arity(2, 2);
  const Expr a = arg(0), b = arg(1);
  switch (kind) {
  case SymOpKind::FLOOR_DIV: return floorDiv(a, b);
  case SymOpKind::MOD: return mod(a, b);
  case SymOpKind::EQ: return eq(a, b);
  case SymOpKind::NE: return ne(a, b);
  case SymOpKind::LT: return lt(a, b);
  case SymOpKind::LE: return le(a, b);
  case SymOpKind::GT: return gt(a, b);
  case SymOpKind::GE: return ge(a, b);
  default: malformed("unknown op " + std::to_string(static_cast<int>(kind)));
  }
}

} // namespace
} // namespace detail

void toWire(Expr e, schema::SymExpr::Builder out) {
  detail::tableOf(e);
  detail::write(e.node(), out);
}

Expr fromWire(schema::SymExpr::Reader in, SymbolTable& table) {
  try {
    return detail::read(in, table, 0);
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, "SymExpr: cannot decode", {}, e.getDescription().cStr());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::InvalidArgument) throw;
    throw Error(ErrorCode::Malformed, "SymExpr: " + e.message());
  }
}

} // namespace kiln::sym
