#include "host_buffers.h"

#include "cpu_blas.h"

#include <algorithm>
#include <cstring>

#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::codegen::detail {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

std::vector<int64_t> evaluateAll(const Shape& shape, const sym::Binding& binding) {
  std::vector<int64_t> out;
  for (sym::Expr e : shape) out.push_back(sym::evaluate(e, binding));
  return out;
}

// Calls fn(position) for every index of `sizes`, positions by `strides`.
template <class Fn>
void eachPosition(const std::vector<int64_t>& sizes, const std::vector<int64_t>& aStrides,
                  const std::vector<int64_t>& bStrides, Fn fn) {
  for (int64_t s : sizes)
    if (s == 0) return;
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    int64_t a = 0, b = 0;
    for (size_t k = 0; k < idx.size(); ++k) {
      a += idx[k] * aStrides[k];
      b += idx[k] * bStrides[k];
    }
    fn(a, b);
    size_t k = idx.size();
    while (k > 0 && ++idx[k - 1] == sizes[k - 1]) idx[--k] = 0;
    if (k == 0) return;
  }
}

} // namespace

HostBuffers::HostBuffers(const Program& program, const ir::Graph& graph,
                         std::vector<ir::HostTensor> inputs)
    : program_(program), inputs_(std::move(inputs)) {
  bindSymbols(graph);
  for (const Buffer& b : program_.buffers) {
    Storage s;
    s.dtype = b.layout.dtype;
    if (b.kind == BufferKind::Input) {
      const ir::HostTensor& t = inputs_.at(b.placeholder);
      size_t size = elementSize(t.dtype);
      int64_t total = t.storage ? static_cast<int64_t>(t.storage->size() / size) : 0;
      s.data = t.storage ? t.storage->data() + t.storageOffset * static_cast<int64_t>(size) : nullptr;
      s.elements = total - t.storageOffset;
    } else {
      int64_t last = 0;
      bool empty = false;
      for (size_t d = 0; d < b.layout.dim(); ++d) {
        int64_t n = sym::evaluate(b.layout.sizes[d], binding_);
        empty = empty || n == 0;
        last += (n - 1) * sym::evaluate(b.layout.strides[d], binding_);
      }
      s.elements = empty ? 0 : last + 1;
      owned_.emplace_back(static_cast<size_t>(std::max<int64_t>(s.elements, 1)) *
                          elementSize(s.dtype));
      s.data = owned_.back().data();
    }
    storage_.push_back(s);
    pointers_.push_back(reinterpret_cast<char*>(s.data));
  }
}

void HostBuffers::bindSymbols(const ir::Graph& graph) {
  std::vector<const ir::Node*> placeholders;
  for (const ir::Node& n : graph.nodes())
    if (n.kind == ir::NodeKind::Placeholder) placeholders.push_back(&n);
  if (inputs_.size() != placeholders.size())
    invalid(std::to_string(placeholders.size()) + " inputs expected, got " +
            std::to_string(inputs_.size()));
  auto bindOne = [&](sym::Expr e, int64_t actual) {
    if (e.isSymbol() && !binding_.count(e)) binding_[e] = actual;
  };
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const ir::Value& v = placeholders[k]->value;
    if (!v.isTensor()) {
      bindOne(v.symInt(), inputs_[k].toInts().at(0));
      continue;
    }
    const ir::TensorMeta& m = v.tensor();
    if (m.dim() != inputs_[k].sizes.size())
      invalid("input " + std::to_string(k) + " has the wrong rank");
    for (size_t d = 0; d < m.dim(); ++d) {
      bindOne(m.sizes[d], inputs_[k].sizes[d]);
      if (inputs_[k].sizes[d] != 1) bindOne(m.strides[d], inputs_[k].strides[d]);
    }
  }
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const ir::Value& v = placeholders[k]->value;
    if (!v.isTensor()) continue;
    const ir::TensorMeta& m = v.tensor();
    if (inputs_[k].dtype != m.dtype) invalid("input " + std::to_string(k) + " has the wrong dtype");
    for (size_t d = 0; d < m.dim(); ++d) {
      if (sym::evaluate(m.sizes[d], binding_) != inputs_[k].sizes[d])
        invalid("input " + std::to_string(k) + ": size " + std::to_string(d) + " is not " +
                sym::toString(m.sizes[d]));
      if (inputs_[k].sizes[d] != 1 &&
          sym::evaluate(m.strides[d], binding_) != inputs_[k].strides[d])
        invalid("input " + std::to_string(k) + ": stride " + std::to_string(d) + " is not " +
                sym::toString(m.strides[d]));
    }
  }
}

ir::HostTensor HostBuffers::view(BufferId id, const ir::TensorMeta& meta) const {
  const Storage& s = storage_.at(id);
  ir::HostTensor t;
  t.dtype = meta.dtype;
  t.sizes = evaluateAll(meta.sizes, binding_);
  t.strides = evaluateAll(meta.strides, binding_);
  t.storageOffset = sym::evaluate(meta.storageOffset, binding_);
  size_t bytes = static_cast<size_t>(std::max<int64_t>(s.elements, 0)) * elementSize(s.dtype);
  t.storage = std::make_shared<std::vector<std::byte>>(s.data, s.data + bytes);
  return t;
}

HostView HostBuffers::hostView(BufferId id, const ir::TensorMeta& meta) const {
  const Storage& s = storage_.at(id);
  int64_t offset = sym::evaluate(meta.storageOffset, binding_);
  return {meta.dtype, s.data + offset * static_cast<int64_t>(elementSize(s.dtype)),
          evaluateAll(meta.sizes, binding_), evaluateAll(meta.strides, binding_)};
}

bool HostBuffers::runWithBlas(const Buffer& b, BufferId id) {
  std::vector<HostView> inputs;
  for (size_t k = 0; k < b.call.inputs.size(); ++k)
    inputs.push_back(hostView(b.call.inputs[k], b.call.inputViews[k]));
  auto number = [&](const char* name) {
    for (const ir::Attr& a : b.call.attrs) {
      if (a.name != name) continue;
      if (auto* d = std::get_if<double>(&a.value)) return *d;
      if (auto* i = std::get_if<int64_t>(&a.value)) return static_cast<double>(*i);
    }
    return 1.0;
  };
  return blasMatmul(b.call.op, inputs, number("alpha"), number("beta"), hostView(id, b.layout));
}

ir::HostTensor HostBuffers::output(const Output& out) const {
  return view(out.buffer, out.view);
}

void HostBuffers::runExtern(BufferId id) {
  const Buffer& b = program_.buffers.at(id);
  if (runWithBlas(b, id)) return;
  sym::SymbolTable table;
  ir::Graph g(table);
  std::vector<ir::HostTensor> ins;
  for (size_t k = 0; k < b.call.inputs.size(); ++k) {
    ir::HostTensor t = view(b.call.inputs[k], b.call.inputViews[k]);
    ir::TensorMeta m;
    m.dtype = t.dtype;
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      m.sizes.push_back(table.integer(t.sizes[d]));
      m.strides.push_back(table.integer(t.strides[d]));
    }
    m.storageOffset = table.integer(t.storageOffset);
    g.placeholder("in" + std::to_string(k), ir::Value(m));
    ins.push_back(std::move(t));
  }
  std::vector<ir::ValueId> ids;
  for (ir::ValueId k = 0; k < ins.size(); ++k) ids.push_back(k);
  std::vector<ir::Attr> attrs;
  for (const ir::Attr& a : b.call.attrs) {
    ir::AttrValue v = a.value;
    if (auto* e = std::get_if<sym::Expr>(&v)) v = sym::evaluate(*e, binding_);
    attrs.push_back({a.name, v});
  }
  g.setOutputs({g.call(b.call.op, ids, attrs)});
  ir::HostTensor result = ir::interpret(g, std::move(ins)).at(0);
  const Storage& out = storage_.at(id);
  size_t size = elementSize(out.dtype);
  const std::byte* from = result.storage->data() + result.storageOffset * static_cast<int64_t>(size);
  eachPosition(result.sizes, result.strides, evaluateAll(b.layout.strides, binding_),
               [&](int64_t src, int64_t dst) {
                 std::memcpy(out.data + dst * static_cast<int64_t>(size),
                             from + src * static_cast<int64_t>(size), size);
               });
}

} // namespace kiln::codegen::detail
