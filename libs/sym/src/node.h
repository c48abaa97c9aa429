// Internal: the node layout and the intern table behind SymbolTable.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/common/error.h"
#include "kiln/sym/expr.h"
#include "kiln/sym/range.h"

namespace kiln::sym::detail {

class Table;

struct SymbolInfo {
  std::string name;
  std::string prefix;  // the name without its trailing digits: "s" of "s12"
  uint64_t number = 0; // the trailing digits' value (names sort s2 < s10)
  std::optional<int64_t> hint;
  std::atomic<int64_t> lo{kNegInf};
  std::atomic<int64_t> hi{kInf};

  Range range() const {
    return {lo.load(std::memory_order_relaxed), hi.load(std::memory_order_relaxed)};
  }
};

// Immutable once interned, but for the range cache. The children (Terms)
// follow the node in memory.
struct Node {
  Kind kind;
  uint16_t rangeStamp; // the table's range stamp the cached range was computed under; 0: none
  uint32_t size;       // number of children
  uint64_t hash;       // structural
  Table* table;        // the owner
  int64_t value;       // Integer/Boolean: the value; Sum: the constant; Product: the degree
  union {
    SymbolInfo* symbol; // Symbol: its entry
    int64_t rangeLo;    // an inner integer node: its cached range (see cachedRange)
  };
  int64_t rangeHi;

  const Term* terms() const { return reinterpret_cast<const Term*>(this + 1); }
  const Term* end() const { return terms() + size; }
  Expr expr() const { return Expr(this); }

  // The range of an inner integer node, cached so that a DAG's shared
  // subexpressions are walked once and a builder does not rewalk the operands
  // it was given; valid while `stamp` is the table's (see rangeOfNode). The
  // fields are read and written atomically: threads may race on one node.
  std::optional<Range> cachedRange(uint16_t stamp) const {
    if (__atomic_load_n(&rangeStamp, __ATOMIC_ACQUIRE) != stamp) return std::nullopt;
    return Range{__atomic_load_n(&rangeLo, __ATOMIC_RELAXED),
                 __atomic_load_n(&rangeHi, __ATOMIC_RELAXED)};
  }
  void cacheRange(uint16_t stamp, Range r) const {
    Node& self = const_cast<Node&>(*this); // every node is created non-const (Table::intern)
    __atomic_store_n(&self.rangeLo, r.lo, __ATOMIC_RELAXED);
    __atomic_store_n(&self.rangeHi, r.hi, __ATOMIC_RELAXED);
    __atomic_store_n(&self.rangeStamp, stamp, __ATOMIC_RELEASE);
  }
  void forgetRange() const {
    __atomic_store_n(&const_cast<Node&>(*this).rangeStamp, uint16_t{0}, __ATOMIC_RELAXED);
  }
};
static_assert(sizeof(Node) % alignof(Term) == 0);
static_assert(sizeof(Node) == 48); // the cache fits in the padding and in `symbol`

inline bool isBoolKind(Kind k) {
  return k == Kind::Boolean || k >= Kind::Eq;
}

class Table {
public:
  explicit Table(SymbolTable& owner);
  ~Table();

  // The node with these contents, created if it does not exist yet.
  const Node* intern(Kind kind, int64_t value, const Term* terms, uint32_t size);
  const Node* symbol(std::string_view name, std::optional<int64_t> hint, Range range);
  const Node* lookup(std::string_view name) const;
  std::vector<Expr> symbols() const;
  void narrow(SymbolInfo& info, Range range);
  std::string freshName(char prefix);
  size_t nodeCount() const;
  void assume(const Node* fact);
  std::vector<Expr> facts() const;
  bool isFact(const Node* condition) const;

  Expr integer(int64_t v) { return Expr(intern(Kind::Integer, v, nullptr, 0)); }
  // Changes whenever a symbol's range narrows, which makes every cached node
  // range stale (still sound, but maybe wider than it now needs to be).
  uint16_t rangeStamp() const { return rangeStamp_.load(std::memory_order_acquire); }
  Expr boolean(bool v) { return v ? trueNode_ : falseNode_; }

  SymbolTable& owner;

private:
  void* allocate(size_t bytes); // from the arena; caller holds mutex_
  void grow();                  // caller holds mutex_
  void advanceRangeStamp();     // caller holds mutex_

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<char[]>> blocks_;
  char* cursor_ = nullptr;
  size_t left_ = 0;
  // Open addressing, power-of-two size. A slot is a node's address with three
  // bits of its hash in the low bits (nodes are 8-byte aligned), so most probes
  // that miss do not touch the node's memory; 0 is an empty slot.
  std::vector<uintptr_t> slots_;
  size_t count_ = 0;
  std::deque<SymbolInfo> symbols_;
  std::vector<const Node*> symbolNodes_;
  std::unordered_map<std::string, const Node*> byName_;
  uint64_t counters_[2] = {0, 0}; // next s<n>, u<n>
  std::vector<const Node*> facts_;
  std::unordered_set<const Node*> factSet_;
  Expr trueNode_, falseNode_;
  std::atomic<uint16_t> rangeStamp_{1}; // 1 to 65535: 0 marks a node range never computed
};

inline Table& tableOf(Expr e) {
  if (e.isNull()) throw Error(ErrorCode::InvalidArgument, "null symbolic expression");
  return *e.node()->table;
}

// The table both operands belong to; Error if they differ.
Table& commonTable(Expr a, Expr b);

// Error{InvalidArgument} unless `e` is integer-valued / boolean-valued.
const Node* requireInt(Expr e, const char* op);
const Node* requireBool(Expr e, const char* op);

// The deterministic orders: nodes structurally; monomials by degree (higher
// first), then factor by factor.
int compareNodes(const Node* a, const Node* b);
int compareMonomials(const Node* a, const Node* b);

} // namespace kiln::sym::detail
