#include "solver.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <z3++.h>

#include "kiln/common/error.h"
#include "kiln/sym/range.h"

namespace kiln::shapes::detail {

constexpr int64_t kMaxExponent = 64; // a larger power is not asked of Z3

// An expression Z3 is not given: the query's answer is Unknown.
struct TooHard {
  std::string reason;
};

// Z3 terms are cached per node; a node's definedness conditions (its symbolic
// divisors are non-zero) are kept beside it.
struct Solver::Impl {
  z3::context ctx;
  struct Encoded {
    z3::expr value;
    z3::expr defined;
  };
  std::unordered_map<sym::Expr, Encoded> cache;
  std::unordered_set<sym::Expr> symbols; // every symbol met, for its range

  Encoded encode(sym::Expr e) {
    if (auto hit = cache.find(e); hit != cache.end()) return hit->second;
    Encoded out = build(e);
    cache.emplace(e, out);
    return out;
  }

  Encoded build(sym::Expr e) {
    const sym::Terms args = e.terms();
    std::vector<Encoded> in;
    for (const sym::Term& t : args) in.push_back(encode(t.expr));
    z3::expr defined = ctx.bool_val(true);
    for (const Encoded& a : in) defined = defined && a.defined;
    auto value = [&]() -> z3::expr {
      switch (e.kind()) {
      case sym::Kind::Integer: return ctx.int_val(static_cast<int64_t>(*e.asInteger()));
      case sym::Kind::Boolean: return ctx.bool_val(*e.asBoolean());
      case sym::Kind::Symbol: symbols.insert(e); return ctx.int_const(e.name().c_str());
      case sym::Kind::Sum: { // n-ary, so that a long sum is not a deep tree
        z3::expr_vector terms(ctx);
        terms.push_back(ctx.int_val(static_cast<int64_t>(e.constant())));
        for (size_t i = 0; i < in.size(); ++i)
          terms.push_back(ctx.int_val(static_cast<int64_t>(args[i].coeff)) * in[i].value);
        return z3::sum(terms);
      }
      case sym::Kind::Product: {
        std::vector<Z3_ast> factors; // alive in `in`
        for (size_t i = 0; i < in.size(); ++i) {
          if (args[i].coeff > kMaxExponent)
            throw TooHard{"an exponent above " + std::to_string(kMaxExponent)};
          for (int64_t k = 0; k < args[i].coeff; ++k) factors.push_back(in[i].value);
        }
        z3::expr product(ctx,
                         Z3_mk_mul(ctx, static_cast<unsigned>(factors.size()), factors.data()));
        ctx.check_error();
        return product;
      }
      case sym::Kind::FloorDiv:
      case sym::Kind::Mod: {
        const z3::expr& a = in[0].value;
        const z3::expr& b = in[1].value;
        defined = defined && b != 0;
        // SMT-LIB's div floors for a positive divisor; a negative one flips both signs.
        z3::expr q = z3::ite(b > 0, a / b, (-a) / (-b));
        return e.kind() == sym::Kind::FloorDiv ? q : a - b * q;
      }
      case sym::Kind::Min:
      case sym::Kind::Max: {
        z3::expr v = in[0].value;
        for (size_t i = 1; i < in.size(); ++i)
          v = e.kind() == sym::Kind::Min ? z3::ite(in[i].value < v, in[i].value, v)
                                         : z3::ite(in[i].value > v, in[i].value, v);
        return v;
      }
      case sym::Kind::Eq: return in[0].value == in[1].value;
      case sym::Kind::Ne: return in[0].value != in[1].value;
      case sym::Kind::Lt: return in[0].value < in[1].value;
      case sym::Kind::Le: return in[0].value <= in[1].value;
      case sym::Kind::And:
      case sym::Kind::Or: {
        z3::expr_vector items(ctx);
        for (const Encoded& a : in) items.push_back(a.value);
        return e.kind() == sym::Kind::And ? z3::mk_and(items) : z3::mk_or(items);
      }
      case sym::Kind::Not: return !in[0].value;
      }
      throw Error(ErrorCode::Internal, "solver: unknown expression kind");
    }();
    return {value, defined};
  }

  z3::expr holds(sym::Expr e) { // defined and true
    Encoded enc = encode(e);
    return enc.defined && enc.value;
  }

  void addRanges(z3::solver& s) {
    for (sym::Expr x : symbols) {
      const sym::Range r = sym::range(x);
      z3::expr v = ctx.int_const(x.name().c_str());
      if (r.lo != sym::kNegInf) s.add(v >= ctx.int_val(static_cast<int64_t>(r.lo)));
      if (r.hi != sym::kInf) s.add(v <= ctx.int_val(static_cast<int64_t>(r.hi)));
    }
  }
};

Solver::Solver(unsigned timeoutMs) : impl_(std::make_unique<Impl>()), timeoutMs_(timeoutMs) {}
Solver::~Solver() = default;

namespace {

// z3::solver::check under a wall-clock limit. Z3's own `timeout` parameter runs on
// a timer thread pool that can deadlock in the Z3 of Debian 12 (4.8.12; fixed
// upstream later), so a thread of ours interrupts the context instead.
z3::check_result checkWithin(z3::context& ctx, z3::solver& s, unsigned ms, bool& timedOut) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  timedOut = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(m);
    if (!cv.wait_for(lock, std::chrono::milliseconds(ms), [&] { return done; })) {
      timedOut = true;
      ctx.interrupt(); // a no-op once the check has returned
    }
  });
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(m);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
  };
  try {
    z3::check_result r = s.check();
    finish();
    return r;
  } catch (...) {
    finish();
    throw;
  }
}

} // namespace

Proof Solver::run(const std::vector<sym::Expr>& premises,
                  const std::function<void(z3::solver&)>& more, int proved) {
  reason_.clear();
  try {
    z3::solver s(impl_->ctx);
    for (sym::Expr e : premises) s.add(impl_->holds(e));
    more(s);
    impl_->addRanges(s);
    bool timedOut = false;
    const z3::check_result r = checkWithin(impl_->ctx, s, timeoutMs_, timedOut);
    if (r == z3::unknown) {
      reason_ = timedOut ? "timeout" : s.reason_unknown();
      return Proof::Unknown;
    }
    return r == static_cast<z3::check_result>(proved) ? Proof::Proved : Proof::Refuted;
  } catch (const z3::exception& e) {
    reason_ = e.msg();
  } catch (const TooHard& e) {
    reason_ = e.reason;
  }
  return Proof::Unknown;
}

Proof Solver::satisfiable(const std::vector<sym::Expr>& premises) {
  return run(
      premises, [](z3::solver&) {}, z3::sat);
}

Proof Solver::implies(const std::vector<sym::Expr>& premises, sym::Expr claim, bool claimDefined) {
  return run(
      premises,
      [&](z3::solver& s) {
        if (!claimDefined) {
          s.add(!impl_->holds(claim));
          return;
        }
        Impl::Encoded c = impl_->encode(claim);
        s.add(c.defined);
        s.add(!c.value);
      },
      z3::unsat);
}

} // namespace kiln::shapes::detail
