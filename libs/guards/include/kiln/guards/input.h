// The C++ description of a call: what a C++ application (or the guards
// service, from the wire) checks guard sets against. Python callers never
// build one on the fast path: their guard VM reads Python objects directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/guards/guard_set.h"

namespace kiln::guards {

struct TensorInput {
  DType dtype = DType::Float32;
  ir::Device device;
  bool requiresGrad = false;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storageOffset = 0;
  // A 0-d CPU tensor's value (an int for integral and bool dtypes), when described.
  std::variant<std::monostate, int64_t, double> value;
};

// A value as the guards see it: a Python-like object with a type, an id and
// attributes, or one of the builtin kinds.
struct Input {
  enum class Kind : uint8_t { None, Bool, Int, Float, Str, Tensor, List, Tuple, Dict, Object };
  Kind kind = Kind::None;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string str;
  TensorInput tensor;
  std::vector<Input> items;                      // List, Tuple
  std::vector<std::pair<Input, Input>> entries;  // Dict, in order
  TypeRef type;                                  // Object (and subclasses of the builtins)
  uint64_t id = 0;
  std::vector<std::pair<std::string, Input>> attrs;

  // The type's name as Python would report it: builtins.int, torch.Tensor, or `type`.
  TypeRef typeRef() const;

  static Input none();
  static Input of(bool v);
  static Input of(int64_t v);
  static Input of(int v) { return of(static_cast<int64_t>(v)); }
  static Input of(double v);
  static Input of(std::string v);
  static Input of(const char* v) { return of(std::string(v)); }
  static Input of(TensorInput t);
  static Input list(std::vector<Input> items);
  static Input tuple(std::vector<Input> items);
  static Input dict(std::vector<std::pair<Input, Input>> entries);
  static Input object(TypeRef type, uint64_t id, std::vector<std::pair<std::string, Input>> attrs);
};

// A contiguous tensor description of these sizes.
TensorInput contiguousTensor(DType dtype, std::vector<int64_t> sizes, bool requiresGrad = false);

// The dims a dense tensor broadcasts (stride 0 over 2 or more elements, as expand makes
// them) when its other dims are laid out contiguously: all false for a contiguous tensor,
// nullopt for any other layout. Such a tensor's sizes may be symbols: its strides follow.
std::optional<std::vector<bool>> broadcastLayout(const TensorInput& t);

struct CallInput {
  std::vector<Input> args;
  std::vector<std::pair<std::string, Input>> kwargs;
  std::vector<std::pair<std::string, Input>> globals; // those the guards may read
  std::vector<Input> closure;                         // cell contents, by index
  GlobalState state;                                  // every field set
  uint64_t scope = 0;                                 // the caller's process token
  std::vector<Input> defaults;                        // the function's __defaults__
  std::vector<std::pair<std::string, Input>> kwDefaults; // its __kwdefaults__

  // A call with these positional arguments under torch's default global state.
  static CallInput of(std::vector<Input> args);
};

// A state with every field set to torch's defaults (grad on, float32, not
// deterministic, autocast off on cpu and cuda).
GlobalState defaultGlobalState();

} // namespace kiln::guards
