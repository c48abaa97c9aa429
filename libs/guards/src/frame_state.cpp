#include "kiln/guards/frame_state.h"

#include <algorithm>
#include <sstream>

#include "kiln/common/error.h"
#include "kiln/guards/input_frontend.h"
#include "kiln/sym/range.h"

namespace kiln::guards {

const FrameInput* FrameState::find(const std::string& source) const {
  for (const FrameInput& in : inputs)
    if (in.source == source) return &in;
  return nullptr;
}

bool FrameState::observe(const std::vector<FrameInput>& seen) {
  bool changed = false;
  for (const FrameInput& s : seen) {
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const FrameInput& in) { return in.source == s.source; });
    if (it == inputs.end()) {
      inputs.push_back(s);
      continue;
    }
    if (it->isTensor != s.isTensor || it->isFloat != s.isFloat ||
        (it->isTensor && it->sizes.size() != s.sizes.size())) {
      // Another kind or rank of input at this source: start over from it.
      *it = s;
      changed = true;
      continue;
    }
    if (s.isFloat) {
      // the same float as its equals guard means it (NaN is NaN)
      if (it->number && s.number && Constant{*it->number} != Constant{*s.number}) {
        it->number.reset();
        changed = true;
      }
      continue;
    }
    if (!s.isTensor) {
      if (it->value && s.value && *it->value != *s.value) {
        it->value.reset();
        changed = true;
      }
      continue;
    }
    for (size_t k = 0; k < s.sizes.size(); ++k)
      if (it->sizes[k] && s.sizes[k] && *it->sizes[k] != *s.sizes[k]) {
        it->sizes[k].reset();
        changed = true;
      }
  }
  return changed;
}

namespace {

std::string dimName(const std::string& source, size_t dim) {
  return source + ".size()[" + std::to_string(dim) + "]";
}

} // namespace

bool FrameState::dynamicDim(const std::string& source, size_t dim) const {
  std::string name = dimName(source, dim);
  if (forcedStatic.count(name)) return false;
  if (forcedDynamic.count(name)) return true;
  const FrameInput* in = find(source);
  return in && in->isTensor && dim < in->sizes.size() && !in->sizes[dim];
}

bool FrameState::dynamicInt(const std::string& source) const {
  if (forcedStatic.count(source)) return false;
  if (forcedDynamic.count(source)) return true;
  const FrameInput* in = find(source);
  return in && !in->isTensor && !in->isFloat && !in->value;
}

bool FrameState::dynamicFloat(const std::string& source) const {
  if (forcedStatic.count(source)) return false;
  if (forcedDynamic.count(source)) return true;
  const FrameInput* in = find(source);
  return in && in->isFloat && !in->number;
}

void FrameState::mark(const std::string& dim, bool dynamic) {
  (dynamic ? forcedStatic : forcedDynamic).erase(dim);
  (dynamic ? forcedDynamic : forcedStatic).insert(dim);
}

std::string FrameState::text() const {
  std::ostringstream out;
  for (const FrameInput& in : inputs) {
    out << in.source << ": ";
    if (in.isTensor) {
      out << "[";
      for (size_t k = 0; k < in.sizes.size(); ++k)
        out << (k ? ", " : "") << (dynamicDim(in.source, k) ? std::string("dynamic") : std::to_string(*in.sizes[k]));
      out << "]\n";
    } else if (in.isFloat) {
      out << (dynamicFloat(in.source) ? std::string("dynamic") : in.number ? Constant{*in.number}.text() : "?") << "\n";
    } else {
      out << (dynamicInt(in.source) ? std::string("dynamic") : in.value ? std::to_string(*in.value) : "?") << "\n";
    }
  }
  for (const std::string& d : forcedDynamic) out << "mark_dynamic " << d << "\n";
  for (const std::string& d : forcedStatic) out << "mark_static " << d << "\n";
  return out.str();
}

namespace {

void collect(const Input& in, const std::string& source, std::vector<FrameInput>& out, int depth) {
  if (depth > 32) return; // deeper nesting is the tracer's to guard
  switch (in.kind) {
  case Input::Kind::Tensor: {
    FrameInput f;
    f.source = source;
    f.isTensor = true;
    for (int64_t s : in.tensor.sizes) f.sizes.push_back(s);
    out.push_back(std::move(f));
    return;
  }
  case Input::Kind::Int: {
    FrameInput f;
    f.source = source;
    f.value = in.integer;
    out.push_back(std::move(f));
    return;
  }
  case Input::Kind::Float: {
    FrameInput f;
    f.source = source;
    f.isFloat = true;
    f.number = in.number;
    out.push_back(std::move(f));
    return;
  }
  case Input::Kind::List:
  case Input::Kind::Tuple:
    for (size_t k = 0; k < in.items.size(); ++k)
      collect(in.items[k], source + "[" + std::to_string(k) + "]", out, depth + 1);
    return;
  case Input::Kind::Dict:
    for (const auto& [key, value] : in.entries) {
      if (key.kind == Input::Kind::Str) collect(value, source + "['" + key.str + "']", out, depth + 1);
      if (key.kind == Input::Kind::Int) collect(value, source + "[" + std::to_string(key.integer) + "]", out, depth + 1);
    }
    return;
  default: return;
  }
}

std::string argName(const std::vector<std::string>& names, size_t i) {
  return i < names.size() ? names[i] : "arg" + std::to_string(i);
}

} // namespace

std::vector<FrameInput> observe(const CallInput& call, const std::vector<std::string>& argNames) {
  std::vector<FrameInput> out;
  for (size_t i = 0; i < call.args.size(); ++i) collect(call.args[i], "L['" + argName(argNames, i) + "']", out, 0);
  for (const auto& [name, value] : call.kwargs) collect(value, "L['" + name + "']", out, 0);
  return out;
}

FrameState merge(FrameState base, const std::vector<std::vector<FrameInput>>& byRank) {
  for (const auto& seen : byRank) base.observe(seen);
  return base;
}

namespace {

class CallGuards {
public:
  CallGuards(const FrameState& frame, GuardSet& set) : frame_(frame), set_(set) {}

  void guard(const Input& in, uint32_t node, int depth) {
    if (depth > 32) throw Error(ErrorCode::Unsupported, "guards: inputs nested deeper than 32 levels");
    const std::string source = set_.source(node);
    switch (in.kind) {
    case Input::Kind::Tensor: return tensor(in, node, source);
    case Input::Kind::Int:
      set_.check(node, typeIs(in.typeRef()));
      if (frame_.dynamicInt(source)) {
        set_.symbol(nextSymbol(), node);
      } else {
        set_.check(node, equals(Constant{in.integer}));
      }
      return;
    case Input::Kind::Float:
      set_.check(node, typeIs(in.typeRef()));
      if (!frame_.dynamicFloat(source)) set_.check(node, equals(*constantOf(in)));
      return;
    case Input::Kind::None:
    case Input::Kind::Bool:
    case Input::Kind::Str:
      set_.check(node, typeIs(in.typeRef()));
      set_.check(node, equals(*constantOf(in)));
      return;
    case Input::Kind::List:
    case Input::Kind::Tuple:
      set_.check(node, typeIs(in.typeRef()));
      set_.check(node, lengthIs(in.items.size()));
      for (size_t k = 0; k < in.items.size(); ++k)
        guard(in.items[k], set_.node(static_cast<int32_t>(node), item(static_cast<int64_t>(k))), depth + 1);
      return;
    case Input::Kind::Dict: {
      set_.check(node, typeIs(in.typeRef()));
      std::vector<Constant> keys;
      for (const auto& [k, v] : in.entries) {
        auto c = constantOf(k);
        if (!c) return; // keys of other kinds (an enum member): the trace guards what it reads of it
        keys.push_back(*c);
      }
      set_.check(node, dictKeysAre(keys, false));
      for (const auto& [k, v] : in.entries) {
        if (k.kind == Input::Kind::Str) guard(v, set_.node(static_cast<int32_t>(node), key(k.str)), depth + 1);
        if (k.kind == Input::Kind::Int) guard(v, set_.node(static_cast<int32_t>(node), intKey(k.integer)), depth + 1);
      }
      return;
    }
    case Input::Kind::Object: set_.check(node, typeIs(in.typeRef())); return;
    }
  }

private:
  std::string nextSymbol() { return "s" + std::to_string(symbols_.next++); }

  void tensor(const Input& in, uint32_t node, const std::string&) {
    set_.check(node, typeIs(in.typeRef()));
    guardTensor(set_, node, in.tensor, frame_, symbols_);
  }

  const FrameState& frame_;
  GuardSet& set_;
  DynamicSizes symbols_;
};

} // namespace

std::vector<sym::Expr> guardTensor(GuardSet& set, uint32_t node, const TensorInput& t, const FrameState& frame,
                                   DynamicSizes& dynamic) {
  const std::string source = set.source(node);
  TensorCheck c;
  c.dtype = t.dtype;
  c.device = t.device;
  c.requiresGrad = t.requiresGrad;
  c.storageOffset = t.storageOffset;
  std::optional<std::vector<bool>> broadcast = broadcastLayout(t);
  auto symbolName = [&] { return "s" + std::to_string(dynamic.next++); };
  std::vector<sym::Expr> sizes;
  for (size_t k = 0; k < t.sizes.size(); ++k) {
    // Sizes 0 and 1 stay static (broadcasting and empty tensors depend on them);
    // a strided layout other than a contiguous one, expanded or not, keeps its sizes static too.
    bool isDynamic = frame.dynamicDim(source, k) && t.sizes[k] >= 2 && broadcast;
    if (isDynamic) {
      sym::Expr read = set.symbol(symbolName(), set.node(static_cast<int32_t>(node), size(static_cast<uint32_t>(k))));
      // Duck sizing for the dims automatic dynamic found; a dim the user marked dynamic
      // (mark_dynamic, an export's Dim) keeps a symbol of its own: the user said what it is.
      auto earlier = dynamic.bySize.find(t.sizes[k]);
      bool marked = frame.forcedDynamic.count(dimName(source, k)) > 0;
      if (marked || earlier == dynamic.bySize.end()) {
        set.shapeGuard(sym::ge(read, 2));
        set.table().narrow(read, {2, sym::kInf}); // after the guard, which it would fold away
        if (!marked) dynamic.bySize.emplace(t.sizes[k], read);
        sizes.push_back(read);
      } else {
        set.shapeGuard(sym::eq(read, earlier->second));
        sizes.push_back(earlier->second);
      }
      c.sizes.push_back(std::nullopt);
    } else {
      c.sizes.push_back(t.sizes[k]);
      sizes.push_back(set.table().integer(t.sizes[k]));
    }
  }
  // Contiguous strides in terms of the sizes (0 for a broadcast dim): static where no
  // dynamic size follows, else read and guarded equal to their expression.
  sym::Expr expected = set.table().integer(1);
  c.strides.assign(t.sizes.size(), std::nullopt);
  for (size_t k = t.sizes.size(); k-- > 0;) {
    if (broadcast && (*broadcast)[k]) {
      c.strides[k] = 0;
      continue;
    }
    if (auto v = expected.asInteger()) {
      c.strides[k] = broadcast ? *v : t.strides[k];
    } else {
      sym::Expr read = set.symbol(symbolName(), set.node(static_cast<int32_t>(node), stride(static_cast<uint32_t>(k))));
      set.shapeGuard(sym::eq(read, expected));
    }
    expected = expected * sym::max(sizes[k], 1);
  }
  set.check(node, tensorMatches(std::move(c)));
  return sizes;
}

GuardSet guardsForCall(const CallInput& call, const std::vector<std::string>& argNames, const FrameState& frame) {
  GuardSet set;
  set.call.positional = static_cast<uint32_t>(call.args.size());
  for (const auto& [name, value] : call.kwargs) set.call.keywords.push_back(name);
  std::sort(set.call.keywords.begin(), set.call.keywords.end());
  set.globals = call.state;
  CallGuards guards(frame, set);
  for (size_t i = 0; i < call.args.size(); ++i)
    guards.guard(call.args[i], set.node(-1, arg(static_cast<uint32_t>(i), argName(argNames, i))), 0);
  for (const auto& [name, value] : call.kwargs) guards.guard(value, set.node(-1, kwarg(name)), 0);
  return set;
}

} // namespace kiln::guards
