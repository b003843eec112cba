// The CPU backend: host heap memory, synchronous copies, the naive reference ops.
#pragma once

#include "backend/backend.h"

namespace deltabit {

class CpuBackend final : public Backend {
public:
    std::string_view name() const override { return "cpu"; }
    std::string description() const override { return "cpu"; }
    bool host_accessible() const override { return true; }
    void* allocate(size_t bytes) override;
    void free(void* ptr) override;
    void copy_to_device(void* dst, const void* host, size_t bytes) override;
    void copy_to_host(void* host, const void* src, size_t bytes) override;
    void copy_on_device(void* dst, const void* src, size_t bytes) override;
    void synchronize() override {}
    bool supports(Op op, DType type) const override { return cpu::supports(op, type); }
};

}  // namespace deltabit
