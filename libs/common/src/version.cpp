#include "kiln/common/version.h"

namespace kiln {

std::string_view version() {
  return KILN_VERSION;
}
std::string_view buildId() {
  return KILN_BUILD_ID;
}

} // namespace kiln
