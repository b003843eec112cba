// The switch of ops/programmatic_launch.cuh.
#include "ops/programmatic_launch.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace deltabit::cuda {

namespace {
std::atomic<bool>& enabled_flag() {
    static std::atomic<bool> flag{[] {
        const char* v = std::getenv("DELTABIT_PROGRAMMATIC_LAUNCH");
        return v == nullptr || std::strcmp(v, "0") != 0;
    }()};
    return flag;
}
}  // namespace

bool programmatic_launch_enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_programmatic_launch(bool enabled) { enabled_flag().store(enabled, std::memory_order_relaxed); }

}  // namespace deltabit::cuda
