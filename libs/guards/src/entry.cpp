#include "kiln/guards/entry.h"

namespace kiln::guards {

std::string FunctionKey::text() const {
  std::string name = module.empty() ? qualname : module + "." + qualname;
  return name + "@" + codeHash.substr(0, 12);
}

} // namespace kiln::guards
