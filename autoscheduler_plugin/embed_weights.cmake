# Writes OUTPUT, a C++ file holding the bytes of INPUT (a .weights file) for the plugin.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" length)
math(EXPR size "${length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE "${OUTPUT}" "// Generated from ${INPUT} by autoscheduler_plugin/embed_weights.cmake.
#include <cstddef>
#include <cstdint>
namespace hkfac::sched {
namespace {
alignas(16) const uint8_t kWeights[] = {${bytes}};
}
const uint8_t *embedded_baseline_weights() { return kWeights; }
size_t embedded_baseline_weights_size() { return ${size}; }
} // namespace hkfac::sched
")
