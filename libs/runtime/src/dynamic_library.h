// Internal to libs/runtime: CUDA libraries loaded at run time (dlopen), so
// that kiln links none and, in a torch process, shares torch's loaded copies.
#pragma once

#include <dlfcn.h>

#include <initializer_list>
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

} // namespace kiln::runtime::detail
