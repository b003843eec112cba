#include "runtime/engine_checks.h"

#include "core/error.h"

namespace deltabit {

void check_sequence_options(const SequenceOptions& options) {
    if (options.max_positions < 1)
        fail("engine: a sequence needs room for at least one token (max_positions {})", options.max_positions);
}

void check_forward(const ModelConfig& config, std::span<const int32_t> ids, int64_t position, int64_t max_positions) {
    if (ids.empty()) fail("engine: forward needs at least one token");
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= config.n_vocab)
            fail("engine: token {} (at {}) is outside the vocabulary of {} entries", ids[i], i, config.n_vocab);
    if (position + int64_t(ids.size()) > max_positions)
        fail("engine: the sequence holds {} tokens; {} more would pass its capacity of {}", position, ids.size(),
             max_positions);
}

void check_forward_batch(const ModelConfig& config, std::span<EngineSequence* const> sequences,
                         std::span<const int32_t> ids) {
    if (sequences.empty()) fail("engine: a batched step needs at least one sequence");
    if (ids.size() != sequences.size())
        fail("engine: a batched step of {} sequences got {} token ids (one each)", sequences.size(), ids.size());
    for (size_t i = 0; i < sequences.size(); ++i) {
        if (sequences[i] == nullptr) fail("engine: sequence {} of a batched step is null", i);
        check_forward(config, ids.subspan(i, 1), sequences[i]->position(), sequences[i]->max_positions());
        for (size_t j = 0; j < i; ++j)
            if (sequences[j] == sequences[i])
                fail("engine: sequences {} and {} of a batched step are the same sequence", j, i);
    }
}

void check_image_fits(const StateImage& image, int64_t max_positions) {
    if (image.position > max_positions)
        fail("engine: the saved state holds {} tokens, more than this sequence's capacity of {}", image.position,
             max_positions);
}

void fail_non_finite_logit(int64_t token, int64_t position, float value) {
    fail("engine: the model's logit for token {} at position {} is {}: its weights or activations are not finite "
         "(deltabit info MODEL lists the tensors); generation stopped",
         token, position, value);
}

}  // namespace deltabit
