// The sampler's random numbers: xoshiro256** seeded through splitmix64. Fully specified here (no
// std:: distributions, whose outputs differ between standard libraries), so the same seed gives the
// same tokens on every machine and on the GPU sampler. Host and device code share this one definition:
// the CUDA diffusion step (runtime/diffusion_step_cuda.h) advances a copy of the state on the device.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace deltabit {

class SamplerRng {
public:
    explicit SamplerRng(uint64_t seed) {
        uint64_t x = seed;
        for (uint64_t& word : state_) word = splitmix64(x);
    }

    // The four state words, to carry the stream to another place (device memory) and back.
    struct State {
        uint64_t words[4];
    };
    DELTABIT_HOST_DEVICE static SamplerRng from_state(const State& state) { return SamplerRng(state); }
    DELTABIT_HOST_DEVICE State state() const { return State{{state_[0], state_[1], state_[2], state_[3]}}; }

    DELTABIT_HOST_DEVICE uint64_t next_u64() {
        const uint64_t result = rotl(state_[1] * 5, 7) * 9;
        const uint64_t t = state_[1] << 17;
        state_[2] ^= state_[0];
        state_[3] ^= state_[1];
        state_[1] ^= state_[2];
        state_[0] ^= state_[3];
        state_[2] ^= t;
        state_[3] = rotl(state_[3], 45);
        return result;
    }

    // Uniform in [0, 1) with 53 random bits.
    DELTABIT_HOST_DEVICE double next_unit() { return double(next_u64() >> 11) * 0x1.0p-53; }

private:
    DELTABIT_HOST_DEVICE explicit SamplerRng(const State& state)
        : state_{state.words[0], state.words[1], state.words[2], state.words[3]} {}
    DELTABIT_HOST_DEVICE static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    static uint64_t splitmix64(uint64_t& x) {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    uint64_t state_[4];
};

}  // namespace deltabit
