// The architecture table (models/architectures.h).
#include "models/architectures.h"

#include "core/error.h"

namespace deltabit {

namespace {

constexpr Architecture kArchitectures[] = {
    {Arch::qwen35, bind_qwen35},
    {Arch::qwen35moe, bind_qwen35},
    {Arch::qwen3next, bind_qwen35},
    {Arch::qwen3, bind_qwen3},
    {Arch::diffusion_gemma, bind_diffusion_gemma},
};

}  // namespace

const Architecture& architecture_of(Arch arch) {
    for (const Architecture& a : kArchitectures)
        if (a.arch == arch) return a;
    fail("no forward pass registered for architecture #{}", int(arch));
}

}  // namespace deltabit
