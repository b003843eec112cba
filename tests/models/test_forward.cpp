// Forward-pass behaviour beyond parity: named intermediates, state snapshots, and bad input.
#include "fixture.h"

#include "core/error.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <map>
#include <span>

namespace deltabit {
namespace {

TEST(Forward, IntermediatesAreNamedPerLayer) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_5_moe_float");  // layers: linear, full; MoE
    std::map<std::string, int64_t> seen;
    const ActivationObserver observer = [&](std::string_view name, const float*, int64_t n) { seen[std::string(name)] = n; };
    SequenceState state = model.new_sequence();
    const std::vector<int32_t> ids = {3, 1, 4};
    model.forward(state, ids, &observer);
    const ModelConfig& c = model.config();
    const int64_t T = 3;
    EXPECT_EQ(seen.at("blk.0.gdn.conv_out"), T * c.ssm_conv_channels());
    EXPECT_EQ(seen.at("blk.0.gdn.out"), T * c.n_embd);
    EXPECT_EQ(seen.at("blk.1.attn.q"), T * c.n_head * c.head_dim);
    EXPECT_EQ(seen.at("blk.1.attn.k"), T * c.n_head_kv * c.head_dim);
    EXPECT_EQ(seen.at("blk.1.moe.out"), T * c.n_embd);
    EXPECT_EQ(seen.at("blk.1.out"), T * c.n_embd);
    EXPECT_EQ(seen.count("blk.0.attn.q"), 0u);  // layer 0 is a DeltaNet layer
}

TEST(Forward, CopiedStateContinuesIdentically) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_5_float");
    const std::vector<int32_t> prompt = {7, 8, 9, 10, 11, 12}, more = {13, 14};
    SequenceState state = model.new_sequence();
    model.forward(state, prompt);
    const SequenceState snapshot = state;
    const std::vector<float> first = model.forward(state, more);
    SequenceState restored = snapshot;
    EXPECT_EQ(restored.position(), 6);
    EXPECT_EQ(model.forward(restored, more), first);  // bit-identical: the state is all there is
    state.reset();
    EXPECT_EQ(state.position(), 0);
}

TEST(Forward, BadTokenIdLeavesStateUntouched) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_next_float");
    SequenceState state = model.new_sequence();
    const std::vector<int32_t> good = {1, 2}, bad = {3, int32_t(model.config().n_vocab)};
    model.forward(state, good);
    const SequenceState before = state;
    EXPECT_THROW(model.forward(state, bad), Error);
    EXPECT_EQ(state.position(), 2);
    for (int64_t l = 0; l < state.n_layer(); ++l) {
        EXPECT_EQ(state.layer(l).k, before.layer(l).k);
        EXPECT_EQ(state.layer(l).conv, before.layer(l).conv);
        EXPECT_EQ(state.layer(l).recurrent, before.layer(l).recurrent);
    }
}

TEST(Forward, EmptyInputIsANoOp) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_float");
    SequenceState state = model.new_sequence();
    EXPECT_TRUE(model.forward(state, std::span<const int32_t>()).empty());
    EXPECT_EQ(state.position(), 0);
}

}  // namespace
}  // namespace deltabit
