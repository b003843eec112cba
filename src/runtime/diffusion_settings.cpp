#include "runtime/diffusion_settings.h"

namespace deltabit {

const char* diffusion_inapplicable_reason(std::string_view setting) {
    // The loop's temperature is a schedule from t_max down towards t_min over the denoising steps
    // (generation_config.json), not one number, and it samples every position of the canvas from the
    // plain softmax, so no part of the sampler chain has a place in it.
    struct Reason {
        std::string_view setting;
        const char* why;
    };
    static constexpr Reason kReasons[] = {
        {"temperature", "its temperature follows the t_max → t_min schedule of generation_config.json"},
        {"top_k", "it samples each canvas position from the whole softmax (no sampler chain)"},
        {"top_p", "it samples each canvas position from the whole softmax (no sampler chain)"},
        {"min_p", "it samples each canvas position from the whole softmax (no sampler chain)"},
        {"repeat_penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"presence_penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"frequency_penalty", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"penalty_last_n", "penalties look back at earlier tokens, and a canvas is denoised all at once"},
        {"dry", "DRY looks back at earlier tokens, and a canvas is denoised all at once"},
        {"stop", "a block is committed whole; it stops at the EOS ids of generation_config.json"},
        {"logprobs", "a committed token is the argmax of the last denoising step, not a draw whose probability could be reported"},
        {"tools", "the server forces and parses tool calls in a reply written left to right, and a block is written whole"},
        {"echo", "scoring a prompt needs next-token logits, and the encoder that reads the prompt computes none"},
    };
    for (const Reason& r : kReasons)
        if (r.setting == setting) return r.why;
    return nullptr;
}

}  // namespace deltabit
