// Views: ops whose result shares its input's storage, with the sizes, strides
// and offset that say how (split, chunk and unbind give a tuple of such views);
// and sym_size, which reads a size as a scalar.
#include <algorithm>
#include <string>

#include "infer.h"
#include "kiln/common/error.h"
#include "kiln/sym/print.h"
#include "kiln/sym/range.h"
#include "kiln/sym/symbol_table.h"

namespace kiln::ir::detail {
namespace {

TensorMeta viewOf(const TensorMeta& self, Shape sizes, Shape strides) {
  TensorMeta m = self;
  m.sizes = std::move(sizes);
  m.strides = std::move(strides);
  return m;
}

[[noreturn]] void undecidable(const OpCall& call, std::string_view arg, const std::string& what,
                              sym::Expr condition = {}) {
  std::string message = call.op().name + ": argument '" + std::string(arg) + "': cannot decide " + what;
  if (!condition.isNull()) throw Undecided(message, condition);
  throw Error(ErrorCode::Unsupported, message);
}

// The sizes asked for, with one -1 inferred from the number of elements.
Shape viewSizes(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  Shape sizes = call.symIntList("size");
  sym::SymbolTable& table = call.table();
  std::optional<size_t> inferred;
  sym::Expr known = table.integer(1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i].asInteger() == std::optional<int64_t>(-1)) {
      if (inferred) call.fail("size", "only one dimension can be -1");
      inferred = i;
      continue;
    }
    if (provable(sym::lt(sizes[i], 0)))
      call.fail("size", "negative size " + sym::toString(sizes[i]));
    known = known * sizes[i];
  }
  sym::Expr total = numel(self.sizes, table);
  std::string shape = "shape of " + sym::toString(total) + " elements";
  if (inferred) {
    if (provable(sym::eq(known, 0))) call.fail("size", "cannot infer -1 with a size of 0");
    sym::Expr quotient = sym::floorDiv(total, known);
    // Divisibility as the quotient's product (what the ranges fold best), else as
    // a remainder (how a runtime assert, or the user's torch._check, says it).
    std::optional<bool> exact = sym::staticallyKnown(sym::eq(quotient * known, total));
    sym::Expr divides = sym::eq(sym::mod(total, known), 0);
    if (!exact) exact = sym::staticallyKnown(divides);
    if (exact == std::optional<bool>(false))
      call.fail("size", "invalid for input of " + sym::toString(total) + " elements");
    if (!exact)
      undecidable(call, "size", "whether " + sym::toString(known) + " divides " + sym::toString(total),
                  divides);
    sizes[*inferred] = quotient;
  } else {
    std::optional<bool> same = sym::staticallyKnown(sym::eq(known, total));
    if (same == std::optional<bool>(false))
      call.fail("size", sym::toString(known) + " elements, invalid for input " + shape);
    if (!same)
      undecidable(call, "size", "whether " + sym::toString(known) + " == " + sym::toString(total),
                  sym::eq(known, total));
  }
  return sizes;
}

// Strides that let `sizes` view the input, as torch's computeStride gives them:
// the input's dims fall into chunks that are contiguous among themselves, and
// each chunk must be exactly covered by consecutive new dims (a new dim of size 1 takes the
// stride where it stands). nullopt when the view is impossible; Error{Unsupported} when the
// ranges cannot decide.
std::optional<Shape> viewStrides(const OpCall& call, const TensorMeta& self, const Shape& sizes) {
  auto known = [&](sym::Expr condition) {
    std::optional<bool> k = sym::staticallyKnown(condition);
    if (!k)
      undecidable(call, "size",
                  "whether " + sym::toString(condition) + " (to view the input's strides)");
    return *k;
  };
  sym::SymbolTable& table = call.table();
  if (!known(sym::ne(numel(self.sizes, table), 0))) // no elements: as torch, like a fresh tensor
    return sizes == self.sizes ? self.strides : contiguousStrides(sizes, table);
  Shape strides(sizes.size());
  auto view = static_cast<int64_t>(sizes.size()) - 1;
  sym::Expr base = self.strides.back(), chunkNumel = table.integer(1), viewNumel = table.integer(1);
  for (auto d = static_cast<int64_t>(self.dim()) - 1; d >= 0; --d) {
    chunkNumel = chunkNumel * self.sizes[d];
    bool chunkEnds = d == 0 || (known(sym::ne(self.sizes[d - 1], 1)) &&
                                known(sym::ne(self.strides[d - 1], chunkNumel * base)));
    if (!chunkEnds) continue;
    while (view >= 0 && (known(sym::lt(viewNumel, chunkNumel)) || known(sym::eq(sizes[view], 1)))) {
      strides[view] = viewNumel * base;
      viewNumel = viewNumel * sizes[view];
      --view;
    }
    if (known(sym::ne(viewNumel, chunkNumel))) return std::nullopt;
    if (d > 0) {
      base = self.strides[d - 1];
      chunkNumel = viewNumel = table.integer(1);
    }
  }
  if (view != -1) return std::nullopt;
  return strides;
}

// viewStrides, or nullopt also where the ranges cannot decide.
std::optional<Shape> decidedViewStrides(const OpCall& call, const TensorMeta& self,
                                        const Shape& sizes) {
  try {
    return viewStrides(call, self, sizes);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::Unsupported) throw;
    return std::nullopt;
  }
}

// The strides torch gives `sizes` viewing a contiguous input: viewStrides, which differ from
// contiguous strides only at dims of size 1, so those stand in where the ranges cannot decide.
Shape contiguousViewStrides(const OpCall& call, const TensorMeta& self, const Shape& sizes) {
  Shape contiguous = contiguousStrides(sizes, call.table());
  if (self.dim() == 0) return contiguous; // torch: all 1, as contiguous strides of sizes all 1
  return decidedViewStrides(call, self, sizes).value_or(contiguous);
}

Value inferView(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  Shape sizes = viewSizes(call);
  if (self.isContiguous()) {
    Shape strides = contiguousViewStrides(call, self, sizes);
    return viewOf(self, std::move(sizes), std::move(strides));
  }
  if (self.dim() > 0)
    if (std::optional<Shape> strides = viewStrides(call, self, sizes))
      return viewOf(self, std::move(sizes), std::move(*strides));
  if (call.op().name == "view")
    call.fail("self", "its strides cannot be viewed with these sizes; use reshape");
  return fresh(call, self.dtype, sizes, self.device, self.requiresGrad); // reshape copies
}

Value inferPermute(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  std::vector<int64_t> dims = call.intList("dims");
  if (dims.size() != self.dim())
    call.fail("dims", "has " + std::to_string(dims.size()) + " dims for a tensor of " +
                          std::to_string(self.dim()));
  Shape sizes, strides;
  std::vector<bool> seen(self.dim(), false);
  for (int64_t d : dims) {
    int64_t w = wrapDim(call, "dims", d, self.dim());
    if (self.dim() == 0) continue;
    if (seen[w]) call.fail("dims", "dim " + std::to_string(d) + " appears twice");
    seen[w] = true;
    sizes.push_back(self.sizes[w]);
    strides.push_back(self.strides[w]);
  }
  return viewOf(self, sizes, strides);
}

Value inferTranspose(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  int64_t a = wrapDim(call, "dim0", call.intArg("dim0"), self.dim());
  int64_t b = wrapDim(call, "dim1", call.intArg("dim1"), self.dim());
  Shape sizes = self.sizes, strides = self.strides;
  if (self.dim()) {
    std::swap(sizes[a], sizes[b]);
    std::swap(strides[a], strides[b]);
  }
  return viewOf(self, sizes, strides);
}

// detach: all of self, in place, carrying no grad (torch's detach).
Value inferDetach(const OpCall& call) {
  TensorMeta m = call.tensor("self");
  m.requiresGrad = false;
  return m;
}

Value inferExpand(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  Shape sizes = call.symIntList("size");
  if (sizes.size() < self.dim())
    call.fail("size", "has " + std::to_string(sizes.size()) + " sizes for a tensor of " +
                          std::to_string(self.dim()) + " dims");
  size_t shift = sizes.size() - self.dim();
  Shape strides(sizes.size(), call.table().integer(0));
  for (size_t i = 0; i < sizes.size(); ++i) {
    bool keep = sizes[i].asInteger() == std::optional<int64_t>(-1);
    if (!keep && provable(sym::lt(sizes[i], 0)))
      call.fail("size",
                "negative size " + sym::toString(sizes[i]) + " at dim " + std::to_string(i));
    if (i < shift) {
      if (keep || provable(sym::lt(sizes[i], 0)))
        call.fail("size", "a new leading dim needs a size, got " + sym::toString(sizes[i]));
      continue;
    }
    sym::Expr have = self.sizes[i - shift];
    if (keep || sizes[i] == have || provable(sym::eq(sizes[i], have))) {
      sizes[i] = have;
      strides[i] = self.strides[i - shift];
    } else if (!provable(sym::eq(have, 1))) {
      std::string what = "size " + sym::toString(have) + " at dim " + std::to_string(i - shift) +
                         " to " + sym::toString(sizes[i]);
      if (provable(sym::logicalAnd(sym::ne(have, 1), sym::ne(have, sizes[i]))))
        call.fail("size", "cannot expand " + what);
      undecidable(call, "size", "whether to expand " + what);
    }
  }
  return viewOf(self, sizes, strides);
}

Value inferSqueeze(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  std::vector<bool> chosen(self.dim(), !call.has("dim"));
  if (call.has("dim"))
    for (int64_t d : call.intList("dim")) {
      int64_t w = wrapDim(call, "dim", d, self.dim()); // a 0-d tensor takes 0 and -1
      if (self.dim()) chosen[w] = true;
    }
  Shape sizes, strides;
  for (size_t i = 0; i < self.dim(); ++i) {
    std::optional<bool> one = sym::staticallyKnown(sym::eq(self.sizes[i], 1));
    if (chosen[i] && !one)
      undecidable(call, "dim",
                  "whether size " + sym::toString(self.sizes[i]) + " at dim " + std::to_string(i) +
                      " is 1");
    if (chosen[i] && *one) continue;
    sizes.push_back(self.sizes[i]);
    strides.push_back(self.strides[i]);
  }
  return viewOf(self, sizes, strides);
}

Value inferUnsqueeze(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  auto d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim() + 1));
  Shape sizes = self.sizes, strides = self.strides;
  sym::Expr stride = d < self.dim() ? self.sizes[d] * self.strides[d] : call.table().integer(1);
  sizes.insert(sizes.begin() + d, call.table().integer(1));
  strides.insert(strides.begin() + d, stride);
  return viewOf(self, sizes, strides);
}

// slice(dim, start, end, step) as Python's x[start:end:step] along one dim:
// negative bounds count from the end, bounds are clamped to the size.
Value inferSlice(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (self.dim() == 0) call.fail("self", "a 0-d tensor cannot be sliced");
  size_t d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
  int64_t step = call.intArg("step");
  if (step <= 0) call.fail("step", "must be positive, got " + std::to_string(step));
  sym::Expr size = self.sizes[d];
  auto bound = [&](std::string_view arg, sym::Expr fallback, sym::Expr lo) {
    if (!call.has(arg)) return fallback;
    int64_t v = call.intArg(arg);
    sym::Expr at = v < 0 ? size + v : call.table().integer(v);
    return sym::max(sym::min(at, size), lo);
  };
  sym::Expr zero = call.table().integer(0);
  sym::Expr start = bound("start", zero, zero);
  sym::Expr end = bound("end", size, start);
  Shape sizes = self.sizes, strides = self.strides;
  sizes[d] = sym::floorDiv(end - start + (step - 1), step);
  strides[d] = self.strides[d] * step;
  TensorMeta m = viewOf(self, sizes, strides);
  m.storageOffset = self.storageOffset + start * self.strides[d];
  return m;
}

// select(dim, index): the index-th sub-tensor along dim (negative from the end).
Value inferSelect(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (self.dim() == 0) call.fail("self", "a 0-d tensor has no dim to select from");
  size_t d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
  int64_t index = call.intArg("index");
  sym::Expr size = self.sizes[d];
  sym::Expr at = index < 0 ? size + index : call.table().integer(index);
  require(call, "index", sym::logicalAnd(sym::ge(at, 0), sym::lt(at, size)),
          "index " + std::to_string(index) + " out of range for size " + sym::toString(size));
  Shape sizes = self.sizes, strides = self.strides;
  sizes.erase(sizes.begin() + d);
  strides.erase(strides.begin() + d);
  TensorMeta m = viewOf(self, sizes, strides);
  m.storageOffset = self.storageOffset + at * self.strides[d];
  return m;
}

// narrow(dim, start, length): sizes [start, start + length) along dim.
Value inferNarrow(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (self.dim() == 0) call.fail("self", "a 0-d tensor cannot be narrowed");
  size_t d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
  sym::Expr size = self.sizes[d];
  int64_t startArg = call.intArg("start");
  // As torch: start in [-size, size], a negative one counting from the end.
  sym::Expr given = call.table().integer(startArg);
  require(call, "start", sym::logicalAnd(sym::ge(given, -size), sym::le(given, size)),
          "start " + std::to_string(startArg) + " out of range [-" + sym::toString(size) + ", " +
              sym::toString(size) + "]");
  sym::Expr start = startArg < 0 ? size + startArg : given;
  sym::Expr length = call.symInt("length");
  require(call, "length",
          sym::logicalAnd(sym::logicalAnd(sym::ge(start, 0), sym::ge(length, 0)),
                          sym::le(start + length, size)),
          "start " + sym::toString(start) + " + length " + sym::toString(length) +
              " exceeds size " + sym::toString(size));
  Shape sizes = self.sizes;
  sizes[d] = length;
  TensorMeta m = viewOf(self, sizes, self.strides);
  m.storageOffset = self.storageOffset + start * self.strides[d];
  return m;
}

// flatten(start_dim, end_dim): those dims merged into one (a 0-d tensor becomes [1]).
Value inferFlatten(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  auto first =
      static_cast<size_t>(wrapDim(call, "start_dim", call.intArg("start_dim"), self.dim()));
  auto last = static_cast<size_t>(wrapDim(call, "end_dim", call.intArg("end_dim"), self.dim()));
  if (self.dim() == 0) return viewOf(self, {call.table().integer(1)}, {call.table().integer(1)});
  if (first > last) call.fail("start_dim", "comes after end_dim");
  Shape sizes(self.sizes.begin(), self.sizes.begin() + first);
  Shape merged(self.sizes.begin() + first, self.sizes.begin() + last + 1);
  sizes.push_back(numel(merged, call.table()));
  sizes.insert(sizes.end(), self.sizes.begin() + last + 1, self.sizes.end());
  if (first == last) return self;
  if (!self.isContiguous()) { // a view where the strides allow it, else a copy (reshape)
    if (std::optional<Shape> strides = viewStrides(call, self, sizes))
      return viewOf(self, std::move(sizes), std::move(*strides));
    return fresh(call, self.dtype, sizes, self.device, self.requiresGrad);
  }
  Shape strides = contiguousViewStrides(call, self, sizes);
  return viewOf(self, std::move(sizes), std::move(strides));
}

// contiguous: the input itself when already contiguous (as torch, an empty tensor always is),
// else a contiguous copy; clone: always a copy, in the input's layout.
Value inferCopy(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (call.op().name == "clone")
    return preserveLike(call, self, self.dtype, self.device, self.requiresGrad);
  if (self.isContiguous() || provable(sym::eq(numel(self.sizes, call.table()), 0))) return self;
  return fresh(call, self.dtype, self.sizes, self.device, self.requiresGrad);
}

// Whether torch suggests channels-last for a 4-d (5-d: channels-last-3d) tensor, as
// c10::is_channels_last_strides_2d/3d: strides ascending over dims 1, last.., 2, 0. nullopt when
// the ranges cannot decide.
std::optional<bool> channelsLast(const TensorMeta& t) {
  size_t r = t.dim();
  if (r != 4 && r != 5) return false;
  auto known = [](sym::Expr c) { return sym::staticallyKnown(c); };
  std::optional<bool> zero = known(sym::eq(t.strides[1], 0));
  if (!zero || *zero) return zero ? std::optional<bool>(false) : std::nullopt;
  std::vector<size_t> order = {1};
  for (size_t d = r - 1; d >= 2; --d) order.push_back(d);
  order.push_back(0);
  std::optional<sym::Expr> min;
  for (size_t d : order) {
    std::optional<bool> empty = known(sym::eq(t.sizes[d], 0));
    std::optional<bool> below = min ? known(sym::lt(t.strides[d], *min)) : false;
    std::optional<bool> tie = d == 0 && min ? known(sym::eq(*min, t.strides[1])) : false;
    if (!empty || !below || !tie) return std::nullopt;
    if (*empty || *below || *tie) return false;
    std::optional<bool> many = known(sym::gt(t.sizes[d], 1));
    if (!many) return std::nullopt;
    min = *many ? t.strides[d] * t.sizes[d] : t.strides[d];
  }
  return true;
}

// Channels-last strides of sizes (N, C, [D,] H, W): C fastest, then W, H, [D,] N.
Shape channelsLastStrides(const Shape& sizes, sym::SymbolTable& table) {
  size_t r = sizes.size();
  Shape strides(r);
  sym::Expr running = table.integer(1);
  strides[1] = running;
  running = sizes[1];
  for (size_t d = r - 1; d >= 2; --d) {
    strides[d] = running;
    running = running * sizes[d];
  }
  strides[0] = running;
  return strides;
}

// cat: along dim, sizes add up; the other dims must be provably equal. 1-d inputs of size 0 are
// skipped, as torch's legacy rule (their dtype still counts). The result is channels-last when
// every input is (torch's cat_compute_output_memory_format). stack: as torch computes it,
// cat along dim then a view splitting it (at the last dim: cat of the inputs unsqueezed there).
// Operand dtypes are promoted.
Value inferCat(const OpCall& call) {
  std::vector<const TensorMeta*> all = call.tensors("tensors");
  bool stack = call.op().name == "stack";
  ResultType dtype;
  std::vector<const TensorMeta*> ins;
  for (const TensorMeta* t : all) {
    dtype.add(t->dtype, Operand::Tensor);
    bool legacyEmpty = !stack && t->dim() == 1 && provable(sym::eq(t->sizes[0], 0));
    if (!legacyEmpty) ins.push_back(t);
  }
  if (ins.empty()) ins.push_back(all[0]); // only empty 1-d inputs: an empty 1-d result
  const TensorMeta& first = *ins[0];
  size_t rank = first.dim() + (stack ? 1 : 0);
  if (rank == 0) call.fail("tensors", "zero-dimensional tensors cannot be concatenated");
  auto d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), rank));
  Shape sizes = first.sizes;
  if (stack) sizes.insert(sizes.begin() + d, call.table().integer(0));
  bool grad = false, allChannelsLast = true, started = false;
  for (size_t k = 0; k < all.size(); ++k) {
    const TensorMeta& t = *all[k];
    std::string which = "tensor " + std::to_string(k);
    grad = grad || t.requiresGrad;
    if (t.device != first.device) call.fail("tensors", which + " is on another device");
    if (std::find(ins.begin(), ins.end(), &t) == ins.end()) {
      allChannelsLast = false; // a skipped input counts as contiguous, as in torch
      continue;
    }
    if (t.dim() != first.dim())
      call.fail("tensors", which + " has " + std::to_string(t.dim()) + " dims, tensor 0 has " +
                               std::to_string(first.dim()));
    for (size_t i = 0; i < t.dim(); ++i) {
      size_t at = stack && i >= d ? i + 1 : i;
      if (at == d && !stack) continue;
      requireEqual(call, "tensors", t.sizes[i], first.sizes[i],
                   which + " differs at dim " + std::to_string(i));
    }
    sizes[d] = stack ? sizes[d] + 1 : (started ? sizes[d] + t.sizes[d] : t.sizes[d]);
    started = true;
    TensorMeta u = t; // what torch's stack concatenates
    if (stack && d == t.dim()) {
      u.sizes.push_back(call.table().integer(1));
      u.strides.push_back(call.table().integer(1));
    }
    allChannelsLast = allChannelsLast && channelsLast(u) == std::optional<bool>(true);
  }
  TensorMeta m = fresh(call, dtype.result(), sizes, first.device, grad);
  if (!allChannelsLast) return m;
  if (!stack || d == first.dim()) {
    m.strides = channelsLastStrides(m.sizes, call.table());
    return m;
  }
  Shape catSizes = first.sizes; // stack: a channels-last cat along d, viewed split
  catSizes[d] = catSizes[d] * static_cast<int64_t>(all.size());
  m.strides = channelsLastStrides(catSizes, call.table());
  m.strides.insert(m.strides.begin() + d, m.strides[d] * first.sizes[d]);
  return m;
}

// unflatten(dim, sizes): dim split into sizes (one may be -1); always a view, as torch's view.
Value inferUnflatten(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (self.dim() == 0) call.fail("self", "a 0-d tensor cannot be unflattened");
  auto d = static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
  Shape parts = call.symIntList("sizes");
  if (parts.empty()) call.fail("sizes", "must not be empty");
  std::optional<size_t> inferred;
  sym::Expr known = call.table().integer(1);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].asInteger() == std::optional<int64_t>(-1)) {
      if (inferred) call.fail("sizes", "only one size can be -1");
      inferred = i;
    } else {
      known = known * parts[i];
    }
  }
  if (inferred) {
    require(call, "sizes", sym::ne(known, 0), "cannot infer -1 with a size of 0");
    parts[*inferred] = sym::floorDiv(self.sizes[d], known);
    known = known * parts[*inferred];
  }
  requireEqual(call, "sizes", known, self.sizes[d], "product differs from the size at dim");
  Shape sizes = self.sizes, strides = self.strides;
  Shape inner(parts.size());
  sym::Expr running = self.strides[d];
  for (size_t i = parts.size(); i-- > 0;) {
    inner[i] = running;
    running = running * parts[i];
  }
  sizes.erase(sizes.begin() + d);
  sizes.insert(sizes.begin() + d, parts.begin(), parts.end());
  strides.erase(strides.begin() + d);
  strides.insert(strides.begin() + d, inner.begin(), inner.end());
  // torch views: computeStride's strides, which differ from these only at dims of size 1.
  return viewOf(self, sizes, decidedViewStrides(call, self, sizes).value_or(strides));
}

// as_strided(size, stride, storage_offset): exactly the view asked for.
Value inferAsStrided(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  Shape sizes = call.symIntList("size"), strides = call.symIntList("stride");
  if (sizes.size() != strides.size()) call.fail("stride", "needs one stride per size");
  for (sym::Expr s : sizes) require(call, "size", sym::ge(s, 0), "negative size");
  for (sym::Expr s : strides) require(call, "stride", sym::ge(s, 0), "negative stride");
  TensorMeta m = viewOf(self, sizes, strides);
  if (call.has("storage_offset")) m.storageOffset = call.symInt("storage_offset");
  require(call, "storage_offset", sym::ge(m.storageOffset, 0), "negative offset");
  return m;
}

// --- multi-output views: split, split_with_sizes, chunk, unbind, and getitem ---

// The dim a multi-output view cuts along; 0-d tensors have none (as torch).
size_t cutDim(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (self.dim() == 0)
    call.fail("self", call.op().name + " expects at least a 1-dimensional tensor");
  return static_cast<size_t>(wrapDim(call, "dim", call.intArg("dim"), self.dim()));
}

// A tuple's length must be a number: a count that depends on a symbol's value
// is Error{Unsupported} until the caller guards on it.
[[noreturn]] void countDependsOnSymbol(const OpCall& call, std::string_view arg, sym::Expr size) {
  throw Error(ErrorCode::Unsupported, call.op().name + ": argument '" + std::string(arg) +
                                          "': the number of chunks of " + sym::toString(size) +
                                          " depends on a symbol; guard on it first");
}

// How many pieces of `chunk` elements cover `size`: ceil(size / chunk), the
// last piece short. Decided by the ranges, or by `size` fitting in one piece.
// TODO(issue 9): counts fixed by arithmetic the ranges miss are Unsupported
// until a guard pins the size (chunk(x, 2) of s0 >= 2 is always 2 pieces); the
// shapes solver is the one to prove them.
int64_t pieceCount(const OpCall& call, std::string_view arg, sym::Expr size, sym::Expr chunk) {
  if (provable(sym::le(size, chunk))) return 1;
  if (std::optional<int64_t> n = sym::range(sym::floorDiv(size + chunk - 1, chunk)).value())
    return *n;
  countDependsOnSymbol(call, arg, size);
}

// Consecutive pieces of `self` along dim d, of these sizes: views with the
// input's strides, each starting where the one before ended.
Value::Tuple pieces(const TensorMeta& self, size_t d, const Shape& sizes) {
  Value::Tuple out;
  sym::Expr offset = self.storageOffset;
  for (sym::Expr size : sizes) {
    TensorMeta m = self;
    m.sizes[d] = size;
    m.storageOffset = offset;
    out.push_back(std::move(m));
    offset = offset + size * self.strides[d];
  }
  return out;
}

// `count` pieces of `chunk` elements along d, the last one taking what is left.
Value::Tuple evenPieces(const TensorMeta& self, size_t d, sym::Expr chunk, int64_t count) {
  Shape sizes(static_cast<size_t>(count), chunk);
  sizes.back() = self.sizes[d] - chunk * (count - 1);
  return pieces(self, d, sizes);
}

// split(split_size, dim): pieces of split_size, the last smaller; at least
// one piece, and a split_size of 0 only for a size of 0 (as torch).
Value inferSplit(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  size_t d = cutDim(call);
  sym::Expr size = self.sizes[d], chunk = call.symInt("split_size");
  require(call, "split_size", sym::ge(chunk, 0),
          "must be non-negative, got " + sym::toString(chunk));
  if (provable(sym::eq(chunk, 0))) {
    require(call, "split_size", sym::eq(size, 0),
            "can only be 0 if the size is 0, got size " + sym::toString(size));
    return Value(pieces(self, d, {size}));
  }
  require(call, "split_size", sym::ge(chunk, 1),
          "can only be 0 if the size is 0, got size " + sym::toString(size));
  return Value(evenPieces(self, d, chunk, pieceCount(call, "split_size", size, chunk)));
}

// split_with_sizes(split_sizes, dim): exactly these pieces, which must cover the dim.
Value inferSplitWithSizes(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  size_t d = cutDim(call);
  Shape sizes = call.symIntList("split_sizes");
  sym::Expr total = call.table().integer(0);
  for (sym::Expr s : sizes) {
    require(call, "split_sizes", sym::ge(s, 0), "negative size " + sym::toString(s));
    total = total + s;
  }
  requireEqual(call, "split_sizes", total, self.sizes[d],
               "must sum to the size at dim " + std::to_string(d));
  return Value(pieces(self, d, sizes));
}

// chunk(chunks, dim): pieces of ceil(size / chunks), so possibly fewer than
// asked; a size of 0 gives `chunks` empty pieces (as torch).
Value inferChunk(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  size_t d = cutDim(call);
  int64_t chunks = call.intArg("chunks");
  if (chunks <= 0) call.fail("chunks", "must be positive, got " + std::to_string(chunks));
  sym::Expr size = self.sizes[d];
  std::optional<bool> empty = sym::staticallyKnown(sym::eq(size, 0));
  if (!empty) countDependsOnSymbol(call, "chunks", size);
  if (*empty) return Value(evenPieces(self, d, size, chunks));
  sym::Expr chunk = sym::floorDiv(size + (chunks - 1), chunks);
  return Value(evenPieces(self, d, chunk, pieceCount(call, "chunks", size, chunk)));
}

// unbind(dim): select(dim, i) for every i.
Value inferUnbind(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  size_t d = cutDim(call);
  std::optional<int64_t> count = sym::range(self.sizes[d]).value();
  if (!count) countDependsOnSymbol(call, "dim", self.sizes[d]);
  Value::Tuple out = pieces(self, d, Shape(static_cast<size_t>(*count), call.table().integer(1)));
  for (TensorMeta& m : out) {
    m.sizes.erase(m.sizes.begin() + d);
    m.strides.erase(m.strides.begin() + d);
  }
  return Value(std::move(out));
}

// getitem(self, index): one element of a tuple.
Value inferGetitem(const OpCall& call) {
  const Value::Tuple& tuple = call.tuple("self");
  int64_t index = call.intArg("index");
  if (index < 0 || index >= static_cast<int64_t>(tuple.size()))
    call.fail("index", "index " + std::to_string(index) + " out of range for a tuple of " +
                           std::to_string(tuple.size()));
  return tuple[static_cast<size_t>(index)];
}

Value inferSymSize(const OpCall& call) {
  const TensorMeta& self = call.tensor("self");
  if (self.dim() == 0) call.fail("self", "a 0-d tensor has no sizes");
  return Value(self.sizes[wrapDim(call, "dim", call.intArg("dim"), self.dim())]);
}

} // namespace

void canonicalDims(const OpCall& call, const Value& result, std::vector<Attr>& attrs) {
  // An out= or in-place form counts dims as its functional op does.
  const std::string& op = call.op().functional.empty() ? call.op().name : call.op().functional;
  bool ofResult = op == "unsqueeze" || op == "cat" || op == "stack";
  size_t rank = ofResult ? result.tensor().dim() : call.tensor("self").dim();
  auto n = static_cast<int64_t>(std::max<size_t>(rank, 1));
  auto wrap = [&](int64_t d) { return d < 0 ? d + n : d; };
  for (const ArgSpec& spec : call.op().args) {
    const std::string& a = spec.name;
    if (a != "dim" && a != "dims" && a != "dim0" && a != "dim1" && a != "start_dim" &&
        a != "end_dim")
      continue;
    auto it = std::find_if(attrs.begin(), attrs.end(), [&](const Attr& x) { return x.name == a; });
    if (it == attrs.end()) continue;
    if (auto* d = std::get_if<int64_t>(&it->value)) {
      if (spec.kind == ArgKind::IntList)
        it->value = std::vector<int64_t>{wrap(*d)};
      else
        *d = wrap(*d);
    }
    if (auto* list = std::get_if<std::vector<int64_t>>(&it->value)) {
      for (int64_t& d : *list) d = wrap(d);
      if (a == "dim") { // a set of dims
        std::sort(list->begin(), list->end());
        list->erase(std::unique(list->begin(), list->end()), list->end());
      }
    }
    if (auto* d = std::get_if<int64_t>(&spec.defaultValue); d && it->value == AttrValue(wrap(*d)))
      attrs.erase(it);
  }
}

void addViewOps(std::vector<OpInfo>& ops) {
  ArgSpec self{"self", ArgKind::Tensor};
  ops.push_back({"view", {self, {"size", ArgKind::SymIntList}}, inferView});
  ops.push_back({"reshape", {self, {"size", ArgKind::SymIntList}}, inferView});
  ops.push_back({"permute", {self, {"dims", ArgKind::IntList}}, inferPermute});
  ops.push_back(
      {"transpose", {self, {"dim0", ArgKind::Int}, {"dim1", ArgKind::Int}}, inferTranspose});
  ops.push_back({"expand", {self, {"size", ArgKind::SymIntList}}, inferExpand});
  ops.push_back({"detach", {self}, inferDetach});
  ops.push_back({"squeeze", {self, {"dim", ArgKind::IntList, true}}, inferSqueeze});
  ops.push_back({"unsqueeze", {self, {"dim", ArgKind::Int}}, inferUnsqueeze});
  ops.push_back({"sym_size", {self, {"dim", ArgKind::Int}}, inferSymSize});
  ops.push_back({"slice",
                 {self,
                  {"dim", ArgKind::Int, false, int64_t{0}},
                  {"start", ArgKind::Int, true},
                  {"end", ArgKind::Int, true},
                  {"step", ArgKind::Int, false, int64_t{1}}},
                 inferSlice});
  ops.push_back({"select", {self, {"dim", ArgKind::Int}, {"index", ArgKind::Int}}, inferSelect});
  ops.push_back(
      {"narrow",
       {self, {"dim", ArgKind::Int}, {"start", ArgKind::Int}, {"length", ArgKind::Scalar}},
       inferNarrow});
  ops.push_back({"flatten",
                 {self,
                  {"start_dim", ArgKind::Int, false, int64_t{0}},
                  {"end_dim", ArgKind::Int, false, int64_t{-1}}},
                 inferFlatten});
  ops.push_back(
      {"unflatten", {self, {"dim", ArgKind::Int}, {"sizes", ArgKind::SymIntList}}, inferUnflatten});
  ops.push_back({"as_strided",
                 {self,
                  {"size", ArgKind::SymIntList},
                  {"stride", ArgKind::SymIntList},
                  {"storage_offset", ArgKind::Scalar, true}},
                 inferAsStrided});
  for (const char* n : {"cat", "stack"})
    ops.push_back({n,
                   {{"tensors", ArgKind::TensorList}, {"dim", ArgKind::Int, false, int64_t{0}}},
                   inferCat});
  ops.push_back({"contiguous", {self}, inferCopy});
  ops.push_back({"clone", {self}, inferCopy});
  ArgSpec dim0{"dim", ArgKind::Int, false, int64_t{0}};
  ops.push_back({"split", {self, {"split_size", ArgKind::Scalar}, dim0}, inferSplit});
  ops.push_back({"split_with_sizes",
                 {self, {"split_sizes", ArgKind::SymIntList}, dim0},
                 inferSplitWithSizes});
  ops.push_back({"chunk", {self, {"chunks", ArgKind::Int}, dim0}, inferChunk});
  ops.push_back({"unbind", {self, dim0}, inferUnbind});
  ops.push_back({"getitem", {{"self", ArgKind::Tuple}, {"index", ArgKind::Int}}, inferGetitem});
}

} // namespace kiln::ir::detail
