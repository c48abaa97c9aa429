// Internal to libs/runtime: CUDA libraries loaded at run time (dlopen), so
// that kiln links none and, in a torch process, shares torch's loaded copies.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
#include <optional>
#include <string>

namespace kiln::runtime::detail {

// The first of `paths` that loads (a soname first, then a full path); null
// with each attempt's reason in `why` when none does.
inline void* openFirst(std::initializer_list<const char*> paths, std::string& why) {
  for (const char* path : paths) {
    if (void* handle = ::dlopen(path, RTLD_NOW | RTLD_LOCAL)) return handle;
    const char* e = ::dlerror();
    why += std::string(why.empty() ? "" : "; ") + (e ? e : path);
  }
  return nullptr;
}

// Sets `slot` to the library's function `name`; false when it has none.
template <class Function> bool loadSymbol(void* handle, const char* name, Function& slot) {
  slot = reinterpret_cast<Function>(::dlsym(handle, name));
  return slot != nullptr;
}

// A library's functions (`Functions`, a struct of function pointers), or why
// there are none.
template <class Functions> struct LoadedLibrary {
  std::optional<Functions> functions;
  std::string why;
};

// `what` (the library's name in messages) from the first of `paths` that
// opens (the first is its soname), its functions filled by
// `fill(handle, functions)`, which returns the name of the first symbol it
// could not find, or null.
template <class Functions, class Fill>
LoadedLibrary<Functions> loadLibrary(const std::string& what,
                                     std::initializer_list<const char*> paths, Fill fill) {
  LoadedLibrary<Functions> out;
  std::string soname = *paths.begin(), why;
  void* handle = openFirst(paths, why);
  if (!handle) {
    out.why = "no " + what + ": " + soname + " could not be loaded: " + why;
    return out;
  }
  Functions functions{};
  if (const char* missing = fill(handle, functions)) {
    out.why = "no " + what + ": " + soname + " lacks " + missing;
    return out;
  }
  out.functions = functions;
  return out;
}

} // namespace kiln::runtime::detail
