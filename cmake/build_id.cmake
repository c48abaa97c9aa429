# Writes OUTPUT (a header defining KILN_BUILD_ID) from the commit and a hash of every
# source that decides what kiln computes: the C++ libraries and services, the schemas
# and the Python SDK. Run at each build (libs/common's kiln_build_id target): an edit
# not yet committed changes the id too, so the guards' and codegen's caches on disk,
# keyed by it, never serve what an older build made. The header is rewritten only
# when the id changes.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${SOURCE_DIR}
  OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit "unknown")
endif()
file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/libs/* ${SOURCE_DIR}/services/* ${SOURCE_DIR}/schemas/* ${SOURCE_DIR}/python/*)
list(FILTER sources EXCLUDE REGEX "__pycache__|\\.pyc$")
list(SORT sources)
set(listing "")
foreach(source IN LISTS sources)
  file(SHA256 ${SOURCE_DIR}/${source} digest)
  string(APPEND listing "${source} ${digest}\n")
endforeach()
string(SHA256 digest "${listing}")
string(SUBSTRING ${digest} 0 12 digest)
set(content "#define KILN_BUILD_ID \"${commit}-${digest}\"\n")
if(EXISTS ${OUTPUT})
  file(READ ${OUTPUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUTPUT} "${content}")
endif()
