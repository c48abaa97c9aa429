#include "kiln/common/version.h"

#include "kiln_build_id.h" // KILN_BUILD_ID: the commit and the sources' hash

namespace kiln {

std::string_view version() {
  return KILN_VERSION;
}
std::string_view buildId() {
  return KILN_BUILD_ID;
}

} // namespace kiln
