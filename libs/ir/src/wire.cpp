#include "kiln/ir/wire.h"

#include <algorithm>
#include <cstring>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "kiln/common/error.h"
#include "kiln/ir/verify.h"
#include "kiln/sym/eval.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"
#include "kiln/sym/wire.h"

namespace kiln::ir {
namespace {

[[noreturn]] void malformed(const std::string& message) {
  throw Error(ErrorCode::Malformed, "graph: " + message);
}

} // namespace

void writeMeta(const TensorMeta& m, schema::TensorMeta::Builder out) {
  out.setDtype(static_cast<schema::DType>(m.dtype));
  out.getDevice().setType(static_cast<schema::DeviceType>(m.device.type));
  out.getDevice().setIndex(m.device.index);
  auto sizes = out.initSizes(static_cast<unsigned>(m.sizes.size()));
  for (unsigned i = 0; i < m.sizes.size(); ++i) sym::toWire(m.sizes[i], sizes[i]);
  auto strides = out.initStrides(static_cast<unsigned>(m.strides.size()));
  for (unsigned i = 0; i < m.strides.size(); ++i) sym::toWire(m.strides[i], strides[i]);
  if (m.storageOffset.isNull())
    out.initStorageOffset().setInteger(0);
  else
    sym::toWire(m.storageOffset, out.initStorageOffset());
  out.setRequiresGrad(m.requiresGrad);
}

namespace {

void writeTuple(const Value::Tuple& tuple, schema::Value::Builder out) {
  auto list = out.initTuple(static_cast<unsigned>(tuple.size()));
  for (unsigned i = 0; i < tuple.size(); ++i) writeMeta(tuple[i], list[i]);
}

DType readDType(schema::DType t) {
  auto i = static_cast<int>(t);
  if (i < 0 || i >= kDTypeCount) malformed("unknown dtype " + std::to_string(i));
  return static_cast<DType>(i);
}

sym::Expr readInt(schema::SymExpr::Reader e, sym::SymbolTable& table) {
  sym::Expr x = sym::fromWire(e, table);
  if (x.isBool()) malformed("a boolean where a size is expected");
  return x;
}

} // namespace

TensorMeta readMeta(schema::TensorMeta::Reader in, sym::SymbolTable& table) {
  TensorMeta m;
  m.dtype = readDType(in.getDtype());
  auto type = static_cast<int>(in.getDevice().getType());
  if (type != 0 && type != 1) malformed("unknown device type " + std::to_string(type));
  m.device = {static_cast<DeviceType>(type), in.getDevice().getIndex()};
  for (auto e : in.getSizes()) m.sizes.push_back(readInt(e, table));
  for (auto e : in.getStrides()) m.strides.push_back(readInt(e, table));
  if (m.sizes.size() != m.strides.size()) malformed("sizes and strides differ in length");
  m.storageOffset = readInt(in.getStorageOffset(), table);
  m.requiresGrad = in.getRequiresGrad();
  return m;
}

void writeAttr(const Attr& a, schema::Attribute::Builder out) {
  out.setName(a.name);
  const AttrValue& v = a.value;
  if (auto* i = std::get_if<int64_t>(&v))
    out.setInt(*i);
  else if (auto* d = std::get_if<double>(&v))
    out.setFloat(*d);
  else if (auto* b = std::get_if<bool>(&v))
    out.setBool(*b);
  else if (auto* s = std::get_if<std::string>(&v))
    out.setString(*s);
  else if (auto* is = std::get_if<std::vector<int64_t>>(&v)) {
    auto list = out.initIntList().initValues(static_cast<unsigned>(is->size()));
    for (unsigned k = 0; k < is->size(); ++k) list.set(k, (*is)[k]);
  } else if (auto* e = std::get_if<sym::Expr>(&v))
    sym::toWire(*e, out.initSymExpr());
  else if (auto* es = std::get_if<std::vector<sym::Expr>>(&v)) {
    auto list = out.initSymExprList().initValues(static_cast<unsigned>(es->size()));
    for (unsigned k = 0; k < es->size(); ++k) sym::toWire((*es)[k], list[k]);
  } else if (auto* t = std::get_if<DType>(&v))
    out.setDtype(static_cast<schema::DType>(*t));
  else
    out.setNone();
}

Attr readAttr(schema::Attribute::Reader in, sym::SymbolTable& table) {
  Attr a{in.getName(), {}};
  switch (in.which()) {
  case schema::Attribute::NONE: break;
  case schema::Attribute::INT: a.value = in.getInt(); break;
  case schema::Attribute::FLOAT: a.value = in.getFloat(); break;
  case schema::Attribute::BOOL: a.value = in.getBool(); break;
  case schema::Attribute::STRING: a.value = std::string(in.getString()); break;
  case schema::Attribute::INT_LIST: {
    std::vector<int64_t> xs;
    for (int64_t x : in.getIntList().getValues()) xs.push_back(x);
    a.value = std::move(xs);
    break;
  }
  case schema::Attribute::SYM_EXPR: a.value = sym::fromWire(in.getSymExpr(), table); break;
  case schema::Attribute::SYM_EXPR_LIST: {
    std::vector<sym::Expr> xs;
    for (auto e : in.getSymExprList().getValues()) xs.push_back(readInt(e, table));
    a.value = std::move(xs);
    break;
  }
  case schema::Attribute::DTYPE: a.value = readDType(in.getDtype()); break;
  default: malformed("unknown attribute kind for '" + a.name + "'");
  }
  return a;
}

void readSymbol(schema::Symbol::Reader in, sym::SymbolTable& table) {
  sym::Range range{in.getLoUnbounded() ? sym::kNegInf : in.getLo(),
                   in.getHiUnbounded() ? sym::kInf : in.getHi()};
  if (range.lo > range.hi) malformed("symbol " + std::string(in.getName()) + ": empty range");
  std::optional<int64_t> hint;
  if (in.getHint().isValue())
    hint = in.getHint().getValue();
  else if (!in.getHint().isNone())
    malformed("unknown hint kind");
  std::string name = in.getName();
  if (auto existing = table.lookup(name)) return table.narrow(*existing, range);
  table.declare(name, hint, range);
}

void writeSymbol(sym::Expr symbol, schema::Symbol::Builder s) {
  s.setName(symbol.name());
  if (auto hint = symbol.table().hint(symbol))
    s.getHint().setValue(*hint);
  else
    s.getHint().setNone();
  sym::Range r = sym::range(symbol);
  s.setLo(r.lo);
  s.setHi(r.hi);
  s.setLoUnbounded(r.lo == sym::kNegInf);
  s.setHiUnbounded(r.hi == sym::kInf);
}

void writeValue(const Value& v, schema::Value::Builder out) {
  if (v.isTensor())
    writeMeta(v.tensor(), out.initTensor());
  else if (v.isSymInt())
    sym::toWire(v.symInt(), out.initSymInt());
  else
    writeTuple(v.tuple(), out);
}

Value readValue(schema::Value::Reader v, sym::SymbolTable& table) {
  switch (v.which()) {
  case schema::Value::TENSOR: return readMeta(v.getTensor(), table);
  case schema::Value::SYM_INT: return readInt(v.getSymInt(), table);
  case schema::Value::TUPLE: {
    Value::Tuple tuple;
    for (auto m : v.getTuple()) tuple.push_back(readMeta(m, table));
    return tuple;
  }
  default: malformed("unknown value kind");
  }
}

namespace {

Graph read(schema::Graph::Reader in, sym::SymbolTable& table) {
  for (auto s : in.getSymbols()) readSymbol(s, table);
  for (auto f : in.getFacts()) {
    sym::Expr fact = sym::fromWire(f, table);
    if (!fact.isBool() || fact.asBoolean() == std::optional<bool>(false))
      malformed("a fact that is not a satisfiable condition: " + sym::toString(fact));
    table.assume(fact);
  }
  auto values = in.getValues();
  size_t count = values.size();
  // Which placeholder or node defines each value id; nodes in increasing order.
  std::vector<int64_t> definer(count, -1); // placeholder i: -1 - i... encoded below
  std::vector<bool> defined(count, false);
  auto define = [&](uint32_t id, const char* what) {
    if (id >= count)
      malformed(std::string(what) + " defines value " + std::to_string(id) + " of " +
                std::to_string(count));
    if (defined[id]) malformed("value " + std::to_string(id) + " defined twice");
    defined[id] = true;
  };
  auto placeholders = in.getPlaceholders();
  auto nodes = in.getNodes();
  for (uint32_t i = 0; i < placeholders.size(); ++i) {
    define(placeholders[i].getValue(), "a placeholder");
    definer[placeholders[i].getValue()] = -1 - static_cast<int64_t>(i);
  }
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    define(nodes[i].getValue(), "a node");
    definer[nodes[i].getValue()] = i;
  }
  for (size_t id = 0; id < count; ++id)
    if (!defined[id]) malformed("value " + std::to_string(id) + " is not defined");

  Graph graph(table);
  for (size_t id = 0; id < count; ++id) {
    Value value = readValue(values[static_cast<unsigned>(id)], table);
    if (definer[id] < 0) {
      auto p = placeholders[static_cast<unsigned>(-1 - definer[id])];
      graph.append(Node{NodeKind::Placeholder, p.getName(), {}, {}, std::move(value)});
      continue;
    }
    auto n = nodes[static_cast<unsigned>(definer[id])];
    Node node{NodeKind::Call, n.getOp(), {}, {}, std::move(value)};
    for (uint32_t in : n.getInputs()) node.inputs.push_back(in);
    for (auto a : n.getAttributes()) node.attrs.push_back(readAttr(a, table));
    graph.append(std::move(node));
  }
  std::vector<ValueId> outputs;
  for (uint32_t o : in.getOutputs()) outputs.push_back(o);
  graph.setOutputs(std::move(outputs));
  verify(graph);
  return graph;
}

} // namespace

void toWire(const Graph& graph, schema::Graph::Builder out) {
  std::vector<sym::Expr> symbols = mentionedSymbols(graph);
  auto syms = out.initSymbols(static_cast<unsigned>(symbols.size()));
  for (unsigned i = 0; i < symbols.size(); ++i) writeSymbol(symbols[i], syms[i]);
  // The table's facts about these symbols only (a table may serve several graphs).
  std::vector<sym::Expr> facts;
  for (sym::Expr f : graph.symbols().facts()) {
    bool ours = true;
    for (sym::Expr s : sym::freeSymbols(f))
      ours = ours && std::find(symbols.begin(), symbols.end(), s) != symbols.end();
    if (ours) facts.push_back(f);
  }
  auto factList = out.initFacts(static_cast<unsigned>(facts.size()));
  for (unsigned i = 0; i < facts.size(); ++i) sym::toWire(facts[i], factList[i]);
  const std::vector<Node>& nodes = graph.nodes();
  auto values = out.initValues(static_cast<unsigned>(nodes.size()));
  unsigned placeholderCount = 0;
  for (unsigned id = 0; id < nodes.size(); ++id) {
    writeValue(nodes[id].value, values[id]);
    placeholderCount += nodes[id].kind == NodeKind::Placeholder;
  }
  auto placeholders = out.initPlaceholders(placeholderCount);
  auto calls = out.initNodes(static_cast<unsigned>(nodes.size()) - placeholderCount);
  unsigned p = 0, c = 0;
  for (unsigned id = 0; id < nodes.size(); ++id) {
    const Node& n = nodes[id];
    if (n.kind == NodeKind::Placeholder) {
      placeholders[p].setName(n.target);
      placeholders[p++].setValue(id);
      continue;
    }
    auto node = calls[c++];
    node.setOp(n.target);
    node.setValue(id);
    auto inputs = node.initInputs(static_cast<unsigned>(n.inputs.size()));
    for (unsigned k = 0; k < n.inputs.size(); ++k) inputs.set(k, n.inputs[k]);
    auto attrs = node.initAttributes(static_cast<unsigned>(n.attrs.size()));
    for (unsigned k = 0; k < n.attrs.size(); ++k) writeAttr(n.attrs[k], attrs[k]);
  }
  auto outputs = out.initOutputs(static_cast<unsigned>(graph.outputs().size()));
  for (unsigned k = 0; k < graph.outputs().size(); ++k) outputs.set(k, graph.outputs()[k]);
}

Graph fromWire(schema::Graph::Reader in, sym::SymbolTable& table) {
  try {
    return read(in, table);
  } catch (const kj::Exception& e) {
    malformed(e.getDescription().cStr());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::Malformed || e.code() == ErrorCode::TooLarge) throw;
    malformed(e.message());
  }
}

std::string toBytes(const Graph& graph) {
  capnp::MallocMessageBuilder message;
  toWire(graph, message.initRoot<schema::Graph>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const char> bytes = words.asChars();
  return std::string(bytes.begin(), bytes.size());
}

Graph fromBytes(std::string_view bytes, sym::SymbolTable& table) {
  try {
    if (bytes.size() % sizeof(capnp::word) != 0) malformed("size is not a multiple of 8 bytes");
    kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
    std::memcpy(words.begin(), bytes.data(), bytes.size());
    capnp::ReaderOptions options;
    options.traversalLimitInWords = kMaxWireWords;
    options.nestingLimit = 64;
    capnp::FlatArrayMessageReader message(words, options);
    return fromWire(message.getRoot<schema::Graph>(), table);
  } catch (const kj::Exception& e) {
    malformed(e.getDescription().cStr());
  }
}

} // namespace kiln::ir
