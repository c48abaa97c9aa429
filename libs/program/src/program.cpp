// kiln::Program: the `.kiln` file, its consistency and the check of a call.
#include "kiln/program/program.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <fmt/format.h>
#include <kj/exception.h>

#include "kiln/common/error.h"
#include "kiln/common/version.h"
#include "kiln/guards/wire.h"
#include "kiln/ir/print.h"
#include "kiln/ir/wire.h"
#include "kiln/schema/program.capnp.h"
#include "kiln/sym/print.h"
#include "kiln/sym/wire.h"

namespace kiln::program {

namespace {

constexpr uint64_t kMaxFileBytes = ir::kMaxWireWords * sizeof(capnp::word);

std::string rangeText(sym::Range r) {
  auto bound = [](int64_t v) {
    return v == sym::kInf ? std::string("inf") : v == sym::kNegInf ? "-inf" : std::to_string(v);
  };
  return "[" + bound(r.lo) + ", " + bound(r.hi) + "]";
}

std::string sizesText(const std::vector<int64_t>& sizes) {
  std::string out;
  for (int64_t s : sizes) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return "[" + out + "]";
}

Error malformed(const std::string& what) {
  return Error(ErrorCode::Malformed, "not a valid kiln file: " + what);
}

std::string readFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    if (::access(path.c_str(), F_OK) != 0) throw Error(ErrorCode::NotFound, "no file " + path);
    throwSystemError("open " + path);
  }
  std::ostringstream bytes;
  bytes << file.rdbuf();
  if (file.bad()) throwSystemError("read " + path);
  return bytes.str();
}

void writeFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    if (!out) throwSystemError("open " + temp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::remove(temp.c_str());
      throwSystemError("write " + temp);
    }
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    throwSystemError("rename " + temp + " to " + path);
  }
}

std::string flatBytes(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(message);
  auto bytes = flat.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

void writeTensor(const TensorData& t, schema::TensorData::Builder out) {
  out.setDtype(static_cast<schema::DType>(t.dtype));
  auto sizes = out.initSizes(static_cast<unsigned>(t.sizes.size()));
  for (unsigned k = 0; k < sizes.size(); ++k) sizes.set(k, t.sizes[k]);
  out.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(t.bytes.data()), t.bytes.size()));
}

TensorData readTensor(schema::TensorData::Reader in, const std::string& what) {
  const auto dtype = static_cast<uint16_t>(in.getDtype());
  if (dtype >= kDTypeCount) throw malformed(what + " has no known dtype");
  TensorData t{static_cast<DType>(dtype), {}, {}};
  int64_t numel = 1;
  for (int64_t s : in.getSizes()) {
    if (s < 0) throw malformed(what + " has a negative size");
    t.sizes.push_back(s);
    numel *= s;
  }
  auto d = in.getData();
  if (d.size() != static_cast<size_t>(numel) * elementSize(t.dtype))
    throw malformed(what + fmt::format(" has {} bytes for {} elements", d.size(), numel));
  t.bytes.assign(reinterpret_cast<const char*>(d.begin()), d.size());
  return t;
}

// A flat message's words, checked for size; the reader must not outlive them.
kj::Array<capnp::word> wordsOf(std::string_view bytes) {
  if (bytes.size() < sizeof(capnp::word) || bytes.size() % sizeof(capnp::word) != 0)
    throw malformed(fmt::format("{} bytes is not a whole message (truncated?)", bytes.size()));
  if (bytes.size() > kMaxFileBytes) throw Error(ErrorCode::TooLarge, "a file over 512 MiB");
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  return words;
}

capnp::ReaderOptions readerOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = ir::kMaxWireWords;
  options.nestingLimit = 256;
  return options;
}

} // namespace

Program::Program(std::shared_ptr<sym::SymbolTable> table, ir::Graph graph,
                 std::vector<Input> inputs, std::vector<Symbol> symbols,
                 std::vector<RuntimeAssert> asserts, std::string outputSpec, std::string name)
    : table_(std::move(table)), graph_(std::move(graph)), inputs_(std::move(inputs)),
      symbols_(std::move(symbols)), asserts_(std::move(asserts)),
      outputSpec_(std::move(outputSpec)), name_(std::move(name)) {
  validate();
}

void Program::validate() const {
  auto bad = [](const std::string& what) { return Error(ErrorCode::InvalidArgument, what); };
  if (!table_ || &graph_.symbols() != table_.get())
    throw bad("the graph is not over the program's table");
  std::vector<ir::ValueId> placeholders;
  for (ir::ValueId id = 0; id < graph_.size(); ++id)
    if (graph_.node(id).kind == ir::NodeKind::Placeholder) placeholders.push_back(id);
  if (placeholders.size() != inputs_.size())
    throw bad(fmt::format("{} inputs for {} placeholders", inputs_.size(), placeholders.size()));
  auto declared = [this](sym::Expr s) {
    return std::any_of(symbols_.begin(), symbols_.end(),
                       [&](const Symbol& d) { return d.symbol == s; });
  };
  for (const Symbol& s : symbols_) {
    if (s.symbol.isNull() || !s.symbol.isSymbol() || &s.symbol.table() != table_.get())
      throw bad("symbol of Dim " + s.dim + " is not a symbol of the program");
    if (s.dim.empty()) throw bad("symbol " + s.symbol.name() + " has no Dim name");
    if (s.range.lo > s.range.hi) throw bad("Dim " + s.dim + " has an empty range");
  }
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Input& in = inputs_[i];
    if (in.placeholder != placeholders[i])
      throw bad(fmt::format("input {} ({}) is not placeholder {}", i, in.name, i));
    const ir::Value& v = graph_.value(in.placeholder);
    if (!v.isTensor()) throw bad("input " + in.name + " is not a tensor");
    const ir::TensorMeta& m = v.tensor();
    if (in.constant) {
      const TensorData& c = *in.constant;
      int64_t numel = 1;
      bool same = c.dtype == m.dtype && c.sizes.size() == m.dim();
      for (size_t k = 0; same && k < c.sizes.size(); ++k) {
        auto size = m.sizes[k].asInteger();
        same = size && *size == c.sizes[k];
        numel *= c.sizes[k];
      }
      if (!same)
        throw bad("the stored tensor of " + in.name + " does not match " + ir::toString(m));
      if (c.bytes.size() != static_cast<size_t>(numel) * elementSize(c.dtype))
        throw bad("the stored tensor of " + in.name + " has " + std::to_string(c.bytes.size()) +
                  " bytes");
      continue;
    }
    for (sym::Expr size : m.sizes)
      if (!size.asInteger() && !(size.isSymbol() && declared(size)))
        throw bad("input " + in.name + " has size " + sym::toString(size) +
                  ", which no Dim declares");
  }
  for (const RuntimeAssert& a : asserts_) {
    if (a.condition.isNull() || !a.condition.isBool() || &a.condition.table() != table_.get())
      throw bad("a runtime assert that is not a condition of the program");
    for (sym::Expr s : sym::freeSymbols(a.condition))
      if (!declared(s))
        throw bad("runtime assert " + sym::toString(a.condition) + " names " + s.name() +
                  ", which no Dim declares");
  }
}

std::vector<const Input*> Program::userInputs() const {
  std::vector<const Input*> out;
  for (const Input& in : inputs_)
    if (!in.constant) out.push_back(&in);
  return out;
}

// ---- the file --------------------------------------------------------------------

std::string Program::toBytes() const {
  capnp::MallocMessageBuilder message;
  auto out = message.initRoot<schema::Program>();
  out.setMagic(schema::PROGRAM_MAGIC);
  out.setFormatVersion(schema::PROGRAM_FORMAT_VERSION);
  out.setName(name_);
  out.setProducer(std::string("kiln ") + std::string(kiln::version()));
  ir::toWire(graph_, out.initGraph());
  auto inputs = out.initInputs(static_cast<unsigned>(inputs_.size()));
  for (unsigned i = 0; i < inputs.size(); ++i) {
    const Input& in = inputs_[i];
    inputs[i].setName(in.name);
    inputs[i].setSource(in.source);
    auto path = inputs[i].initPath(static_cast<unsigned>(in.path.size()));
    for (unsigned k = 0; k < path.size(); ++k) guards::toWire(in.path[k], path[k]);
    if (!in.constant) {
      inputs[i].setUser();
      continue;
    }
    writeTensor(*in.constant, inputs[i].initConstant());
  }
  auto symbols = out.initSymbols(static_cast<unsigned>(symbols_.size()));
  for (unsigned i = 0; i < symbols.size(); ++i) {
    const Symbol& s = symbols_[i];
    symbols[i].setName(s.symbol.name());
    symbols[i].setDim(s.dim);
    symbols[i].setSource(s.source);
    symbols[i].setMin(s.range.lo);
    symbols[i].setMax(s.range.hi);
  }
  auto asserts = out.initAsserts(static_cast<unsigned>(asserts_.size()));
  for (unsigned i = 0; i < asserts.size(); ++i) {
    sym::toWire(asserts_[i].condition, asserts[i].initCondition());
    asserts[i].setMessage(asserts_[i].message);
  }
  if (!outputSpec_.empty()) {
    kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(outputSpec_.data()),
                                          outputSpec_.size() / sizeof(capnp::word));
    capnp::FlatArrayMessageReader spec(words);
    out.setOutputs(spec.getRoot<schema::OutputSpec>());
  }
  return flatBytes(message);
}

Program Program::fromBytes(std::string_view bytes) {
  kj::Array<capnp::word> words = wordsOf(bytes);
  try {
    capnp::FlatArrayMessageReader message(words, readerOptions());
    auto in = message.getRoot<schema::Program>();
    if (in.getMagic() != schema::PROGRAM_MAGIC) throw malformed("bad magic (not a .kiln file)");
    if (in.getFormatVersion() != schema::PROGRAM_FORMAT_VERSION)
      throw Error(
          ErrorCode::Unsupported,
          fmt::format("kiln program format version {}; this kiln reads version {} (made by {})",
                      in.getFormatVersion(), schema::PROGRAM_FORMAT_VERSION,
                      in.getProducer().cStr()));
    auto table = std::make_shared<sym::SymbolTable>();
    ir::Graph graph = ir::fromWire(in.getGraph(), *table);
    std::vector<ir::ValueId> placeholders;
    for (ir::ValueId id = 0; id < graph.size(); ++id)
      if (graph.node(id).kind == ir::NodeKind::Placeholder) placeholders.push_back(id);
    if (in.getInputs().size() != placeholders.size())
      throw malformed(
          fmt::format("{} inputs for {} placeholders", in.getInputs().size(), placeholders.size()));
    std::vector<Input> inputs;
    for (unsigned i = 0; i < in.getInputs().size(); ++i) {
      auto wire = in.getInputs()[i];
      Input input{wire.getName(), wire.getSource(), placeholders[i], std::nullopt, {}};
      for (auto step : wire.getPath()) input.path.push_back(guards::fromWire(step));
      if (wire.isConstant())
        input.constant = readTensor(wire.getConstant(), "the stored tensor of " + input.name);
      inputs.push_back(std::move(input));
    }
    std::vector<Symbol> symbols;
    for (auto s : in.getSymbols()) {
      auto symbol = table->lookup(s.getName().cStr());
      if (!symbol)
        throw malformed(std::string("symbol ") + s.getName().cStr() + " is not the graph's");
      symbols.push_back({*symbol, s.getDim(), s.getSource(), {s.getMin(), s.getMax()}});
    }
    std::vector<RuntimeAssert> asserts;
    for (auto a : in.getAsserts())
      asserts.push_back({sym::fromWire(a.getCondition(), *table), a.getMessage()});
    std::string outputSpec;
    if (in.hasOutputs()) {
      capnp::MallocMessageBuilder spec;
      spec.setRoot(in.getOutputs());
      outputSpec = flatBytes(spec);
    }
    return Program(std::move(table), std::move(graph), std::move(inputs), std::move(symbols),
                   std::move(asserts), std::move(outputSpec), in.getName());
  } catch (const kj::Exception& e) {
    throw malformed(e.getDescription().cStr());
  } catch (const Error& e) {
    if (e.code() == ErrorCode::InvalidArgument) throw malformed(e.message());
    throw;
  }
}

Program Program::load(const std::string& path) {
  const std::string bytes = readFile(path);
  try {
    return fromBytes(bytes);
  } catch (const Error& e) {
    throw Error(e.code(), path + ": " + e.message());
  }
}

void Program::save(const std::string& path) const {
  writeFileAtomically(path, toBytes());
}

TensorData loadTensor(const std::string& path) {
  const std::string bytes = readFile(path);
  try {
    kj::Array<capnp::word> words = wordsOf(bytes);
    capnp::FlatArrayMessageReader message(words, readerOptions());
    return readTensor(message.getRoot<schema::TensorData>(), "the tensor");
  } catch (const kj::Exception& e) {
    throw Error(ErrorCode::Malformed, path + ": not a tensor file: " + e.getDescription().cStr());
  } catch (const Error& e) {
    throw Error(e.code(), path + ": " + e.message());
  }
}

void saveTensor(const std::string& path, const TensorData& tensor) {
  capnp::MallocMessageBuilder message;
  writeTensor(tensor, message.initRoot<schema::TensorData>());
  writeFileAtomically(path, flatBytes(message));
}

// ---- a call ------------------------------------------------------------------------

sym::Binding Program::check(const std::vector<InputShape>& given) const {
  auto bad = [this](const std::string& what) {
    return Error(ErrorCode::InvalidArgument, (name_.empty() ? "program" : name_) + ": " + what);
  };
  const std::vector<const Input*> users = userInputs();
  if (given.size() != users.size()) {
    std::string names;
    for (const Input* in : users) names += (names.empty() ? "" : ", ") + in->name;
    throw bad(fmt::format("expected {} inputs ({}), got {}", users.size(), names, given.size()));
  }
  sym::Binding binding;
  std::map<std::string, std::pair<int64_t, std::string>> dims; // Dim -> (value, where seen)
  for (size_t i = 0; i < users.size(); ++i) {
    const Input& in = *users[i];
    const InputShape& got = given[i];
    const ir::TensorMeta& m = graph_.meta(in.placeholder);
    if (got.dtype != m.dtype)
      throw bad(fmt::format("input {} must be {}, got {}", in.name, dtypeName(m.dtype),
                            dtypeName(got.dtype)));
    if (got.device.type != m.device.type)
      throw bad(fmt::format("input {} must be on {}, got {}", in.name, ir::toString(m.device),
                            ir::toString(got.device)));
    if (got.sizes.size() != m.dim())
      throw bad(fmt::format("input {} must have {} dims ({}), got {}", in.name, m.dim(),
                            ir::toString(m), sizesText(got.sizes)));
    for (size_t k = 0; k < m.dim(); ++k) {
      const int64_t value = got.sizes[k];
      const std::string where = fmt::format("{}.size({})", in.name, k);
      if (auto fixed = m.sizes[k].asInteger()) {
        if (*fixed != value)
          throw bad(fmt::format("{} must be {} (static), got {}", where, *fixed, value));
        continue;
      }
      const auto symbol = std::find_if(symbols_.begin(), symbols_.end(),
                                       [&](const Symbol& s) { return s.symbol == m.sizes[k]; });
      if (value < symbol->range.lo || value > symbol->range.hi)
        throw bad(fmt::format("{} ({}) is {}, outside {}'s range {}", where, symbol->dim, value,
                              symbol->dim, rangeText(symbol->range)));
      auto [seen, fresh] = dims.emplace(symbol->dim, std::make_pair(value, where));
      if (!fresh && seen->second.first != value)
        throw bad(fmt::format("{} and {} are both Dim {}, but they are {} and {}",
                              seen->second.second, where, symbol->dim, seen->second.first, value));
      binding[symbol->symbol] = value;
    }
  }
  for (const RuntimeAssert& a : asserts_) {
    bool holds = false;
    try {
      holds = sym::evaluate(a.condition, binding) != 0;
    } catch (const Error&) { // a division by zero: the condition does not hold
    }
    if (holds) continue;
    std::string values;
    for (sym::Expr s : sym::freeSymbols(a.condition))
      values += fmt::format("{}{}={}", values.empty() ? "" : ", ", s.name(), binding.at(s));
    throw bad(fmt::format("runtime assert {} failed: {}{}", sym::toString(a.condition), values,
                          a.message.empty() ? "" : " (" + a.message + ")"));
  }
  return binding;
}

std::string Program::text() const {
  std::ostringstream out;
  out << "kiln program" << (name_.empty() ? "" : " " + name_) << "\ninputs:\n";
  for (const Input& in : inputs_)
    out << "  " << in.name << ": " << ir::toString(graph_.meta(in.placeholder))
        << (in.constant ? "  (stored)" : "") << "  # " << in.source << "\n";
  if (!symbols_.empty()) out << "symbols:\n";
  for (const Symbol& s : symbols_)
    out << "  " << s.symbol.name() << " = Dim('" << s.dim << "') in " << rangeText(s.range)
        << "  # " << s.source << "\n";
  if (!asserts_.empty()) out << "runtime asserts:\n";
  for (const RuntimeAssert& a : asserts_)
    out << "  " << sym::toString(a.condition) << (a.message.empty() ? "" : "  # " + a.message)
        << "\n";
  out << "graph:\n";
  std::istringstream graph(ir::print(graph_));
  for (std::string line; std::getline(graph, line);) out << "  " << line << "\n";
  return out.str();
}

} // namespace kiln::program
