# Writes OUTPUT, a C++ file holding the bytes of INPUT for the plugin, as NAME() and NAME_size()
# in namespace hkfac::sched (the baseline weights; the timing runner's source).
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" length)
math(EXPR size "${length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by autoscheduler_plugin/embed_file.cmake.
#include <cstddef>
#include <cstdint>
namespace hkfac::sched {
namespace {
alignas(16) const uint8_t kBytes[] = {${bytes}};
}
const uint8_t *${NAME}() { return kBytes; }
size_t ${NAME}_size() { return ${size}; }
} // namespace hkfac::sched
")
