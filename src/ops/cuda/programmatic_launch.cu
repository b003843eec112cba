// The switch of ops/programmatic_launch.cuh.
#include "ops/cuda/programmatic_launch.cuh"

#include <atomic>

#include "core/env_switch.h"

namespace deltabit::cuda {

namespace {
std::atomic<bool>& enabled_flag() {
    static std::atomic<bool> flag{env_switch("DELTABIT_PROGRAMMATIC_LAUNCH", true)};
    return flag;
}
}  // namespace

bool programmatic_launch_enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_programmatic_launch(bool enabled) { enabled_flag().store(enabled, std::memory_order_relaxed); }

}  // namespace deltabit::cuda
