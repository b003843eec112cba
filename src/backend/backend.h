// The backend interface: where tensors live and which ops can run there. Small on purpose — memory,
// copies, a synchronisation point and the supports table; the model (not yet moved onto it) calls
// the ops of ops/<op>.h (cpu) or ops/<family>/*_cuda.h (cuda) on the memory a backend
// hands out.
//
// Chosen at run time: make_backend("cpu" | "cuda" | "auto"); "auto" takes CUDA when this build has it
// and a GPU is present, else the CPU. "cpu" always works.
//
// Memory and ordering. allocate() returns memory the backend's ops read and write (host heap for cpu,
// device memory for cuda; never host-accessible there). Work a backend queues (its ops, its copies)
// runs in order. copy_to_device returns once `host` may be reused; copy_to_host returns once the
// bytes are on the host (it waits for the queued work before it); synchronize() waits for everything
// queued. A failing call throws deltabit::Error naming the backend and the operation.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "ops/op_support.h"

namespace deltabit {

class Backend {
public:
    virtual ~Backend() = default;

    virtual std::string_view name() const = 0;        // "cpu", "cuda"
    virtual std::string description() const = 0;      // for logs: "cpu", "cuda: NVIDIA H200, sm_90, ..."
    virtual bool host_accessible() const = 0;         // can host code dereference allocate()'s pointers?

    virtual void* allocate(size_t bytes) = 0;          // nullptr for 0 bytes
    virtual void free(void* ptr) = 0;                  // nullptr is ignored
    virtual void copy_to_device(void* dst, const void* host, size_t bytes) = 0;
    virtual void copy_to_host(void* host, const void* src, size_t bytes) = 0;
    virtual void copy_on_device(void* dst, const void* src, size_t bytes) = 0;
    virtual void synchronize() = 0;

    // Whether `op` runs here for `type` (the weight dtype for matmul and embedding, the activation
    // dtype otherwise); ops/op_support.h.
    virtual bool supports(Op op, DType type) const = 0;
};

// "cpu", "cuda" or "auto"; throws deltabit::Error for an unknown name or "cuda" where there is none
// (naming which: no CUDA in this build, or no device).
std::unique_ptr<Backend> make_backend(std::string_view choice);

// "cpu" or "cuda": where make_backend(choice) runs (auto: CUDA when this build has it and a GPU is
// present), with make_backend's errors, for callers that run a model without a Backend object (the
// block-diffusion runner).
std::string resolve_backend(std::string_view choice);

// True when make_backend("cuda") would succeed.
bool cuda_backend_available();

}  // namespace deltabit
