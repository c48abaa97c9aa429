// Conversions between kiln::Error and its wire form, schema::Error.
#pragma once

#include "kiln/common/error.h"
#include "kiln/schema/common.capnp.h"

namespace kiln::rpc {

void toWire(const Error& error, schema::Error::Builder out);
Error fromWire(schema::Error::Reader in);

} // namespace kiln::rpc
