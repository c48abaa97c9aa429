#include "kiln/ir/hash.h"

#include <cstring>

namespace kiln::ir {
namespace {

struct Hasher {
  uint64_t h = 0xcbf29ce484222325ULL;

  void mix(uint64_t v) { // 64-bit mixing of one word (splitmix64 finaliser on h ^ v)
    uint64_t z = h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    h = z ^ (z >> 31);
  }
  void mix(std::string_view s) {
    mix(s.size());
    for (unsigned char c : s) mix(c);
  }
  void mix(sym::Expr e) { mix(e.isNull() ? 0 : e.hash()); }
  void mix(const std::vector<sym::Expr>& es) {
    mix(es.size());
    for (sym::Expr e : es) mix(e);
  }

  void mix(const AttrValue& v) {
    mix(v.index());
    if (auto* i = std::get_if<int64_t>(&v))
      mix(static_cast<uint64_t>(*i));
    else if (auto* d = std::get_if<double>(&v)) {
      uint64_t bits;
      std::memcpy(&bits, d, sizeof bits);
      mix(bits);
    } else if (auto* b = std::get_if<bool>(&v))
      mix(*b ? 1 : 0);
    else if (auto* s = std::get_if<std::string>(&v))
      mix(std::string_view(*s));
    else if (auto* is = std::get_if<std::vector<int64_t>>(&v)) {
      mix(is->size());
      for (int64_t i : *is) mix(static_cast<uint64_t>(i));
    } else if (auto* e = std::get_if<sym::Expr>(&v))
      mix(*e);
    else if (auto* es = std::get_if<std::vector<sym::Expr>>(&v))
      mix(*es);
    else if (auto* t = std::get_if<DType>(&v))
      mix(static_cast<uint64_t>(*t));
  }

  void mix(const Value& v) {
    // Kinds as 1 tensor, 0 scalar (the hashes of graphs without tuples stay as they were), 2 tuple.
    mix(uint64_t{v.isTensor() ? 1u : v.isSymInt() ? 0u : 2u});
    if (v.isSymInt()) return mix(v.symInt());
    if (v.isTensor()) return mix(v.tensor());
    mix(v.tuple().size());
    for (const TensorMeta& m : v.tuple()) mix(m);
  }

  void mix(const TensorMeta& m) {
    mix(static_cast<uint64_t>(m.dtype));
    mix(static_cast<uint64_t>(m.device.type) << 16 | static_cast<uint16_t>(m.device.index));
    mix(m.sizes);
    mix(m.strides);
    mix(m.storageOffset);
    mix(m.requiresGrad);
  }
};

} // namespace

uint64_t nodeHash(const Node& n) {
  Hasher h;
  h.mix(static_cast<uint64_t>(n.kind));
  if (n.kind == NodeKind::Call) h.mix(std::string_view(n.target));
  h.mix(n.inputs.size());
  for (ValueId in : n.inputs) h.mix(in);
  h.mix(n.attrs.size());
  for (const Attr& a : n.attrs) {
    h.mix(std::string_view(a.name));
    h.mix(a.value);
  }
  h.mix(n.value);
  return h.h;
}

uint64_t structuralHash(const Graph& graph) {
  Hasher h;
  h.mix(graph.nodes().size());
  for (const Node& n : graph.nodes()) h.mix(nodeHash(n));
  h.mix(graph.outputs().size());
  for (ValueId out : graph.outputs()) h.mix(out);
  return h.h;
}

} // namespace kiln::ir
