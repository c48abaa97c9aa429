// What this build is: the version and the commit it was built from.
#pragma once

#include <string_view>

namespace kiln {

std::string_view version();
std::string_view buildId();

} // namespace kiln
