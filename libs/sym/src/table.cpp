// The intern table (an arena of nodes and an open-addressing hash set over
// them), the symbols, and the accessors of Expr.
#include <algorithm>
#include <cctype>
#include <cstring>
#include <new>

#include "kiln/sym/symbol_table.h"
#include "node.h"

namespace kiln::sym {
namespace detail {
namespace {

constexpr size_t kBlockBytes = 64 * 1024;
constexpr size_t kInitialSlots = 1024;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v * 0x9e3779b97f4a7c15ull;
  h = (h << 27 | h >> 37) * 0xbf58476d1ce4e5b9ull;
  return h;
}

uint64_t finish(uint64_t h) {
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  return h ^ (h >> 29);
}

uint64_t hashName(std::string_view name) { // FNV-1a: the same in every process
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

uint64_t hashOf(Kind kind, int64_t value, const Term* terms, uint32_t size) {
  uint64_t h = mix(static_cast<uint64_t>(kind) + 1, static_cast<uint64_t>(value));
  for (uint32_t i = 0; i < size; ++i) {
    h = mix(h, terms[i].expr.node()->hash);
    h = mix(h, static_cast<uint64_t>(terms[i].coeff));
  }
  return finish(h);
}

bool sameContents(const Node* n, Kind kind, int64_t value, const Term* terms, uint32_t size) {
  if (n->kind != kind || n->value != value || n->size != size) return false;
  const Term* mine = n->terms();
  for (uint32_t i = 0; i < size; ++i)
    if (mine[i].expr != terms[i].expr || mine[i].coeff != terms[i].coeff) return false;
  return true;
}

constexpr uintptr_t kTagMask = 7;  // the low bits of a slot: see Table::slots_
static_assert(alignof(Node) >= 8); // and allocate() keeps every node 8-byte aligned

const Node* nodeOf(uintptr_t slot) {
  return reinterpret_cast<const Node*>(slot & ~kTagMask);
}

bool isIdentifier(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

} // namespace

Table::Table(SymbolTable& owner) : owner(owner), slots_(kInitialSlots, 0) {
  trueNode_ = Expr(intern(Kind::Boolean, 1, nullptr, 0));
  falseNode_ = Expr(intern(Kind::Boolean, 0, nullptr, 0));
}

Table::~Table() = default;

void* Table::allocate(size_t bytes) {
  bytes = (bytes + 7) & ~size_t{7};
  if (bytes > left_) {
    const size_t blockBytes = std::max(bytes, kBlockBytes);
    blocks_.emplace_back(new char[blockBytes]); // not zeroed: every node is constructed in full
    cursor_ = blocks_.back().get();
    left_ = blockBytes;
  }
  void* at = cursor_;
  cursor_ += bytes;
  left_ -= bytes;
  return at;
}

void Table::grow() {
  std::vector<uintptr_t> old(slots_.size() * 2, 0);
  old.swap(slots_);
  const size_t mask = slots_.size() - 1;
  for (const uintptr_t slot : old) {
    if (!slot) continue;
    size_t i = nodeOf(slot)->hash & mask;
    while (slots_[i]) i = (i + 1) & mask;
    slots_[i] = slot;
  }
}

const Node* Table::intern(Kind kind, int64_t value, const Term* terms, uint32_t size) {
  const uint64_t hash = hashOf(kind, value, terms, size);
  const uintptr_t tag = hash >> 61;
  std::lock_guard<std::mutex> lock(mutex_);
  if (2 * (count_ + 1) > slots_.size()) grow();
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  for (; slots_[i]; i = (i + 1) & mask) {
    if ((slots_[i] & kTagMask) != tag) continue;
    const Node* n = nodeOf(slots_[i]);
    if (n->hash == hash && sameContents(n, kind, value, terms, size)) return n;
  }
  auto* node = static_cast<Node*>(allocate(sizeof(Node) + size * sizeof(Term)));
  new (node) Node{kind, 0, size, hash, this, value, {nullptr}, 0};
  auto* children = reinterpret_cast<Term*>(node + 1);
  for (uint32_t k = 0; k < size; ++k) new (children + k) Term(terms[k]);
  slots_[i] = reinterpret_cast<uintptr_t>(node) | tag;
  ++count_;
  return node;
}

std::string Table::freshName(char prefix) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t& counter = counters_[prefix == 's' ? 0 : 1];
  for (;;) {
    std::string name = prefix + std::to_string(counter++);
    if (!byName_.count(name)) return name;
  }
}

const Node* Table::symbol(std::string_view name, std::optional<int64_t> hint, Range range) {
  if (!isIdentifier(name))
    throw Error(ErrorCode::InvalidArgument,
                "symbol name '" + std::string(name) + "' is not an identifier");
  if (range.lo > range.hi)
    throw Error(ErrorCode::InvalidArgument,
                "empty range " + toString(range) + " for symbol " + std::string(name));
  if (hint && !range.contains(*hint))
    throw Error(ErrorCode::InvalidArgument, "hint " + std::to_string(*hint) + " of " +
                                                std::string(name) + " lies outside " +
                                                toString(range));
  std::lock_guard<std::mutex> lock(mutex_);
  if (byName_.count(std::string(name)))
    throw Error(ErrorCode::AlreadyExists, "symbol " + std::string(name) + " exists already");
  SymbolInfo& info = symbols_.emplace_back();
  info.name = std::string(name);
  size_t digits = info.name.size();
  while (digits > 0 && std::isdigit(static_cast<unsigned char>(info.name[digits - 1]))) --digits;
  info.prefix = info.name.substr(0, digits);
  if (info.name.size() - digits > 18)
    info.prefix = info.name; // too long to be a number
  else if (digits < info.name.size())
    info.number = std::stoull(info.name.substr(digits));
  info.hint = hint;
  info.lo.store(range.lo);
  info.hi.store(range.hi);
  auto* node = static_cast<Node*>(allocate(sizeof(Node)));
  new (node) Node{Kind::Symbol,
                  0,
                  0,
                  finish(mix(static_cast<uint64_t>(Kind::Symbol) + 1, hashName(info.name))),
                  this,
                  static_cast<int64_t>(symbolNodes_.size()),
                  {&info},
                  0};
  symbolNodes_.push_back(node);
  byName_.emplace(info.name, node);
  return node;
}

const Node* Table::lookup(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = byName_.find(std::string(name));
  return it == byName_.end() ? nullptr : it->second;
}

std::vector<Expr> Table::symbols() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Expr> out;
  for (const Node* n : symbolNodes_) out.push_back(Expr(n));
  return out;
}

void Table::narrow(SymbolInfo& info, Range range) {
  std::lock_guard<std::mutex> lock(mutex_); // one narrowing at a time; readers use the atomics
  const Range now = info.range();
  const Range next{std::max(now.lo, range.lo), std::min(now.hi, range.hi)};
  if (next.lo > next.hi)
    throw Error(ErrorCode::InvalidArgument, "narrowing " + info.name + " from " + toString(now) +
                                                " by " + toString(range) + " leaves nothing");
  if (info.hint && !next.contains(*info.hint))
    throw Error(ErrorCode::InvalidArgument, "narrowing " + info.name + " to " + toString(next) +
                                                " excludes its hint " + std::to_string(*info.hint));
  info.lo.store(next.lo, std::memory_order_relaxed);
  info.hi.store(next.hi, std::memory_order_relaxed);
  advanceRangeStamp(); // after the bounds: see rangeOfNode
}

// A 16-bit stamp keeps nodes small; when it wraps, every node forgets its
// cached range, so a stamp never matches a range from 65535 narrowings ago.
void Table::advanceRangeStamp() {
  const uint16_t now = rangeStamp_.load(std::memory_order_relaxed);
  if (now == UINT16_MAX) {
    for (const uintptr_t slot : slots_)
      if (slot) nodeOf(slot)->forgetRange();
  }
  rangeStamp_.store(now == UINT16_MAX ? 1 : now + 1, std::memory_order_release);
}

void Table::assume(const Node* fact) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (factSet_.insert(fact).second) facts_.push_back(fact);
}

std::vector<Expr> Table::facts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Expr> out;
  for (const Node* n : facts_) out.push_back(Expr(n));
  return out;
}

bool Table::isFact(const Node* condition) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return factSet_.count(condition) > 0;
}

size_t Table::nodeCount() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_ + symbolNodes_.size();
}

Table& commonTable(Expr a, Expr b) {
  Table& table = tableOf(a);
  if (&tableOf(b) != &table)
    throw Error(ErrorCode::InvalidArgument, "expressions of different symbol tables");
  return table;
}

const Node* requireInt(Expr e, const char* op) {
  tableOf(e);
  if (isBoolKind(e.node()->kind))
    throw Error(ErrorCode::InvalidArgument, std::string(op) + " expects an integer, not a boolean");
  return e.node();
}

const Node* requireBool(Expr e, const char* op) {
  tableOf(e);
  if (!isBoolKind(e.node()->kind))
    throw Error(ErrorCode::InvalidArgument, std::string(op) + " expects a boolean, not an integer");
  return e.node();
}

} // namespace detail

using detail::Node;

namespace {

const Node* nonNull(const Node* n) {
  if (!n) throw Error(ErrorCode::InvalidArgument, "null symbolic expression");
  return n;
}

detail::SymbolInfo& symbolOf(const SymbolTable& table, Expr symbol) {
  if (symbol.isNull() || symbol.kind() != Kind::Symbol || symbol.node()->table != &table.impl())
    throw Error(ErrorCode::InvalidArgument, "not a symbol of this table");
  return *symbol.node()->symbol;
}

} // namespace

std::string_view kindName(Kind kind) {
  switch (kind) {
  case Kind::Integer: return "integer";
  case Kind::Boolean: return "boolean";
  case Kind::Symbol: return "symbol";
  case Kind::Sum: return "sum";
  case Kind::Product: return "product";
  case Kind::FloorDiv: return "floordiv";
  case Kind::Mod: return "mod";
  case Kind::Min: return "min";
  case Kind::Max: return "max";
  case Kind::Eq: return "eq";
  case Kind::Ne: return "ne";
  case Kind::Lt: return "lt";
  case Kind::Le: return "le";
  case Kind::And: return "and";
  case Kind::Or: return "or";
  case Kind::Not: return "not";
  }
  return "unknown";
}

Kind Expr::kind() const {
  return nonNull(node_)->kind;
}

bool Expr::isBool() const {
  return detail::isBoolKind(kind());
}

std::optional<int64_t> Expr::asInteger() const {
  if (kind() != Kind::Integer) return std::nullopt;
  return node_->value;
}

std::optional<bool> Expr::asBoolean() const {
  if (kind() != Kind::Boolean) return std::nullopt;
  return node_->value != 0;
}

const std::string& Expr::name() const {
  if (kind() != Kind::Symbol)
    throw Error(ErrorCode::InvalidArgument, "name() of a " + std::string(kindName(kind())));
  return node_->symbol->name;
}

Terms Expr::terms() const {
  return Terms(nonNull(node_)->terms(), node_->size);
}

int64_t Expr::constant() const {
  const Kind k = kind();
  return k == Kind::Sum || k == Kind::Integer ? node_->value : 0;
}

SymbolTable& Expr::table() const {
  return nonNull(node_)->table->owner;
}

uint64_t Expr::hash() const {
  return node_ ? node_->hash : 0;
}

SymbolTable::SymbolTable() : impl_(std::make_unique<detail::Table>(*this)) {}
SymbolTable::~SymbolTable() = default;

Expr SymbolTable::integer(int64_t value) {
  return impl_->integer(value);
}
Expr SymbolTable::boolean(bool value) {
  return impl_->boolean(value);
}

Expr SymbolTable::createBacked(int64_t hint, Range range) {
  for (;;) { // a name can be taken between freshName and symbol by another thread
    try {
      return Expr(impl_->symbol(impl_->freshName('s'), hint, range));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::AlreadyExists) throw;
    }
  }
}

Expr SymbolTable::createUnbacked(Range range) {
  for (;;) {
    try {
      return Expr(impl_->symbol(impl_->freshName('u'), std::nullopt, range));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::AlreadyExists) throw;
    }
  }
}

Expr SymbolTable::declare(std::string_view name, std::optional<int64_t> hint, Range range) {
  return Expr(impl_->symbol(name, hint, range));
}

std::optional<Expr> SymbolTable::lookup(std::string_view name) const {
  const Node* n = impl_->lookup(name);
  return n ? std::optional<Expr>(Expr(n)) : std::nullopt;
}

std::vector<Expr> SymbolTable::symbols() const {
  return impl_->symbols();
}

std::optional<int64_t> SymbolTable::hint(Expr symbol) const {
  return symbolOf(*this, symbol).hint;
}

void SymbolTable::narrow(Expr symbol, Range range) {
  impl_->narrow(symbolOf(*this, symbol), range);
}

void SymbolTable::assume(Expr fact) {
  detail::requireBool(fact, "assume");
  if (&fact.table() != this) throw Error(ErrorCode::InvalidArgument, "assume: a fact of another table");
  if (fact.asBoolean() == std::optional<bool>(false))
    throw Error(ErrorCode::InvalidArgument, "assume: the fact is false");
  if (fact.asBoolean()) return;
  if (fact.kind() == Kind::And) {
    for (const Term& t : fact.terms()) assume(t.expr);
    return;
  }
  impl_->assume(fact.node());
}

std::vector<Expr> SymbolTable::facts() const {
  return impl_->facts();
}

bool SymbolTable::isFact(Expr condition) const {
  return impl_->isFact(condition.node());
}

size_t SymbolTable::nodeCount() const {
  return impl_->nodeCount();
}

} // namespace kiln::sym
