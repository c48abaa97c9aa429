#include "kiln/shapes/wire.h"

#include <kj/exception.h>

#include "kiln/common/error.h"
#include "kiln/sym/range.h"
#include "kiln/sym/wire.h"

namespace kiln::shapes {

namespace {

[[noreturn]] void malformed(const std::string& what) {
  throw Error(ErrorCode::Malformed, what);
}

// Cap'n Proto decoding failures (bad pointers, limits) as Error{Malformed}.
template <class F> auto decoding(const std::string& what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const kj::Exception& e) {
    malformed(what + ": " + e.getDescription().cStr());
  }
}

} // namespace

void writeSymbol(sym::Expr symbol, sym::Range range, schema::Symbol::Builder out) {
  out.setName(symbol.name());
  if (auto hint = symbol.table().hint(symbol))
    out.getHint().setValue(*hint);
  else
    out.getHint().setNone();
  out.setLo(range.lo);
  out.setHi(range.hi);
  out.setLoUnbounded(range.lo == sym::kNegInf);
  out.setHiUnbounded(range.hi == sym::kInf);
}

void writeSymbols(const sym::SymbolTable& table, capnp::List<schema::Symbol>::Builder out) {
  const std::vector<sym::Expr> symbols = table.symbols();
  for (unsigned i = 0; i < out.size() && i < symbols.size(); ++i)
    writeSymbol(symbols[i], sym::range(symbols[i]), out[i]);
}

void readSymbols(capnp::List<schema::Symbol>::Reader in, sym::SymbolTable& table) {
  decoding("symbols", [&] {
    for (auto s : in) {
      const std::string name = s.getName();
      const sym::Range range{s.getLoUnbounded() ? sym::kNegInf : s.getLo(),
                             s.getHiUnbounded() ? sym::kInf : s.getHi()};
      if (range.lo > range.hi) malformed("symbol " + name + ": empty range");
      std::optional<int64_t> hint;
      if (s.getHint().isValue())
        hint = s.getHint().getValue();
      else if (!s.getHint().isNone())
        malformed("symbol " + name + ": unknown hint kind");
      if (table.lookup(name))
        throw Error(ErrorCode::InvalidArgument, "symbol " + name + " is declared twice");
      try {
        table.declare(name, hint, range);
      } catch (const Error& e) { // not an identifier, a hint outside the range
        throw Error(ErrorCode::InvalidArgument, e.message());
      }
    }
  });
}

sym::Expr readExpr(schema::SymExpr::Reader in, sym::SymbolTable& table, const std::string& what) {
  const size_t declared = table.symbols().size();
  sym::Expr e;
  try {
    e = sym::fromWire(in, table);
  } catch (const Error& err) {
    throw Error(err.code(), what + ": " + err.message());
  }
  const std::vector<sym::Expr> symbols = table.symbols();
  if (symbols.size() > declared)
    throw Error(ErrorCode::InvalidArgument, what + " names " + symbols[declared].name() +
                                                ", which the request does not declare");
  return e;
}

std::vector<sym::Expr> readExprs(capnp::List<schema::SymExpr>::Reader in, sym::SymbolTable& table,
                                 const std::string& what) {
  std::vector<sym::Expr> out;
  for (unsigned i = 0; i < in.size(); ++i)
    out.push_back(readExpr(in[i], table, what + " " + std::to_string(i)));
  return out;
}

void writeExprs(const std::vector<sym::Expr>& exprs, capnp::List<schema::SymExpr>::Builder out) {
  for (unsigned i = 0; i < out.size() && i < exprs.size(); ++i) {
    if (exprs[i].isNull())
      throw Error(ErrorCode::InvalidArgument, "expression " + std::to_string(i) + " is missing");
    sym::toWire(exprs[i], out[i]);
  }
}

Options readOptions(schema::ShapesOptions::Reader in) {
  return decoding("options", [&] { return Options{in.getTimeoutMs(), in.getBudgetMs()}; });
}

void writeOptions(const Options& options, schema::ShapesOptions::Builder out) {
  out.setTimeoutMs(options.timeoutMs);
  out.setBudgetMs(options.budgetMs);
}

DimSpec readDim(schema::DimSpec::Reader in, sym::SymbolTable& table) {
  return decoding("dim", [&] {
    DimSpec d;
    d.source = in.getSource();
    d.dim = in.getDim();
    d.range = {in.getMin(), in.getMax()};
    const std::string name = in.getSymbol();
    auto symbol = table.lookup(name);
    if (!symbol)
      throw Error(ErrorCode::InvalidArgument, "dim " + d.dim + " (" + d.source + ") names symbol " +
                                                  name + ", which the request does not declare");
    d.symbol = *symbol;
    if (in.getHasDerived())
      d.derived = readExpr(in.getDerived(), table, "dim " + d.dim + "'s derived expression");
    return d;
  });
}

void writeDim(const DimSpec& dim, schema::DimSpec::Builder out) {
  out.setSource(dim.source);
  out.setSymbol(dim.symbol.name());
  out.setDim(dim.dim);
  out.setMin(dim.range.lo);
  out.setMax(dim.range.hi);
  out.setHasDerived(!dim.derived.isNull());
  if (!dim.derived.isNull()) sym::toWire(dim.derived, out.initDerived());
}

void writeSimplified(const Simplified& s, schema::SimplifyReply::Builder out) {
  writeExprs(s.guards, out.initGuards(static_cast<unsigned>(s.guards.size())));
  auto replacements = out.initReplacements(static_cast<unsigned>(s.replacements.size()));
  for (unsigned i = 0; i < replacements.size(); ++i) {
    replacements[i].setSymbol(s.replacements[i].symbol.name());
    sym::toWire(s.replacements[i].expr, replacements[i].initExpr());
  }
  auto ranges = out.initRanges(static_cast<unsigned>(s.ranges.size()));
  for (unsigned i = 0; i < ranges.size(); ++i)
    writeSymbol(s.ranges[i].first, s.ranges[i].second, ranges[i]);
  writeExprs(s.checks, out.initChecks(static_cast<unsigned>(s.checks.size())));
  out.setUnsatisfiable(s.unsatisfiable);
  auto steps = out.initSteps(static_cast<unsigned>(s.steps.size()));
  for (unsigned i = 0; i < steps.size(); ++i) steps.set(i, s.steps[i]);
}

Simplified readSimplified(schema::SimplifyReply::Reader in, sym::SymbolTable& table) {
  return decoding("simplify reply", [&] {
    Simplified s;
    s.guards = readExprs(in.getGuards(), table, "guard");
    for (auto r : in.getReplacements()) {
      auto symbol = table.lookup(r.getSymbol().cStr());
      if (!symbol)
        malformed(std::string("replacement of an unknown symbol ") + r.getSymbol().cStr());
      s.replacements.push_back({*symbol, readExpr(r.getExpr(), table, "replacement")});
    }
    for (auto r : in.getRanges()) {
      auto symbol = table.lookup(r.getName().cStr());
      if (!symbol) malformed(std::string("range of an unknown symbol ") + r.getName().cStr());
      s.ranges.emplace_back(*symbol, sym::Range{r.getLoUnbounded() ? sym::kNegInf : r.getLo(),
                                                r.getHiUnbounded() ? sym::kInf : r.getHi()});
    }
    s.checks = readExprs(in.getChecks(), table, "check");
    s.unsatisfiable = in.getUnsatisfiable();
    for (auto step : in.getSteps()) s.steps.emplace_back(step.cStr());
    return s;
  });
}

void writeDecision(const Decision& d, schema::DecideReply::Builder out) {
  switch (d.answer) {
  case Answer::True: out.setAnswer(schema::Answer::ALWAYS_TRUE); break;
  case Answer::False: out.setAnswer(schema::Answer::ALWAYS_FALSE); break;
  case Answer::Unknown: out.setAnswer(schema::Answer::UNKNOWN); break;
  }
  out.setHow(d.how);
}

Decision readDecision(schema::DecideReply::Reader in) {
  return decoding("decide reply", [&] {
    Decision d;
    switch (in.getAnswer()) {
    case schema::Answer::ALWAYS_TRUE: d.answer = Answer::True; break;
    case schema::Answer::ALWAYS_FALSE: d.answer = Answer::False; break;
    default: d.answer = Answer::Unknown; break; // unknown, or a newer enumerant
    }
    d.how = in.getHow();
    return d;
  });
}

void writeReport(const ConstraintReport& r, schema::CheckConstraintsReply::Builder out) {
  auto violations = out.initViolations(static_cast<unsigned>(r.violations.size()));
  for (unsigned i = 0; i < violations.size(); ++i) {
    const Violation& v = r.violations[i];
    violations[i].setKind(static_cast<schema::ViolationKind>(v.kind));
    auto dims = violations[i].initDims(static_cast<unsigned>(v.dims.size()));
    for (unsigned k = 0; k < dims.size(); ++k) dims.set(k, v.dims[k]);
    violations[i].setMessage(v.message);
    violations[i].setFix(v.fix);
  }
  auto asserts = out.initAsserts(static_cast<unsigned>(r.asserts.size()));
  for (unsigned i = 0; i < asserts.size(); ++i) {
    const RuntimeAssert& a = r.asserts[i];
    sym::toWire(a.condition, asserts[i].initCondition());
    auto dims = asserts[i].initDims(static_cast<unsigned>(a.dims.size()));
    for (unsigned k = 0; k < dims.size(); ++k) dims.set(k, a.dims[k]);
    asserts[i].setMessage(a.message);
  }
  out.setText(r.text());
}

ConstraintReport readReport(schema::CheckConstraintsReply::Reader in, sym::SymbolTable& table) {
  return decoding("checkConstraints reply", [&] {
    ConstraintReport r;
    for (auto v : in.getViolations()) {
      const auto kind = static_cast<uint16_t>(v.getKind());
      Violation out;
      out.kind = kind <= static_cast<uint16_t>(ViolationKind::Other)
                     ? static_cast<ViolationKind>(kind)
                     : ViolationKind::Other;
      for (auto d : v.getDims()) out.dims.emplace_back(d.cStr());
      out.message = v.getMessage();
      out.fix = v.getFix();
      r.violations.push_back(std::move(out));
    }
    for (auto a : in.getAsserts()) {
      RuntimeAssert out;
      out.condition = readExpr(a.getCondition(), table, "a runtime assert");
      if (!out.condition.isBool())
        throw Error(ErrorCode::Malformed, "a runtime assert that is not a condition");
      for (auto d : a.getDims()) out.dims.emplace_back(d.cStr());
      out.message = a.getMessage();
      r.asserts.push_back(std::move(out));
    }
    return r;
  });
}

} // namespace kiln::shapes
