// SequenceState's byte images and checkpoints (models/sequence_state.h, models/state_image.h): a
// state saved, loaded into a fresh sequence and continued gives the uninterrupted run's logits bit for
// bit; a checkpoint restored after the sequence ran on and re-fed gives a fresh run's logits bit for
// bit; and every image or checkpoint that does not fit is refused with a message, the state untouched.
// Every fixture family (hybrids and plain attention) × every KV format.
#include "fixture.h"

#include "core/error.h"
#include "core/half.h"
#include "models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace deltabit {
namespace {

std::vector<int32_t> byte_tokens(size_t n, uint32_t seed) {
    std::vector<int32_t> out(n);
    uint32_t x = seed;
    for (int32_t& id : out) {
        x = x * 1664525u + 1013904223u;  // Numerical Recipes LCG: any fixed sequence of byte ids will do
        id = int32_t(x >> 24);
    }
    return out;
}

// Feeds `ids` one token per call (the decode path) and returns every position's logits.
std::vector<float> feed_steps(const Model& model, SequenceState& state, const std::vector<int32_t>& ids) {
    std::vector<float> all;
    for (int32_t id : ids) {
        const std::vector<float> one = model.forward(state, std::vector<int32_t>{id});
        all.insert(all.end(), one.begin(), one.end());
    }
    return all;
}

const std::string kFamilies[] = {"qwen3_5_float", "qwen3_5_moe_float", "qwen3_next_float", "qwen3_next_moe_float",
                                 "qwen3_float"};
const KvFormat kFormats[] = {KvFormat::f32, KvFormat::f16, KvFormat::kivi4};

class StateImageRoundTrip : public ::testing::TestWithParam<std::tuple<std::string, KvFormat>> {};

// 190 prompt tokens leave kivi4 at 8 sinks, 32 quantised, 150 residual; the 45 steps after cross two
// more quantisation points (200 and 232), so the continuation rewrites what the image held as exact.
constexpr size_t kPrompt = 190, kContinue = 45;

TEST_P(StateImageRoundTrip, SaveLoadContinueIsBitIdentical) {
    const auto& [family, format] = GetParam();
    const Model model = Model::load(test::fixtures_dir() / family);
    const std::vector<int32_t> prompt = byte_tokens(kPrompt, 1), more = byte_tokens(kContinue, 2);

    SequenceState original = model.new_sequence(format);
    model.forward(original, prompt);
    const StateImage image = original.save();
    EXPECT_EQ(image.position, int64_t(kPrompt));
    EXPECT_EQ(image.kv_format, format);

    SequenceState loaded = model.new_sequence(format);
    model.forward(loaded, byte_tokens(7, 3));  // something to overwrite
    loaded.load(image);
    EXPECT_TRUE(loaded == original);
    EXPECT_EQ(feed_steps(model, loaded, more), feed_steps(model, original, more));
    EXPECT_TRUE(loaded == original);
}

// Checkpoints depend only on where the layer kinds put attention and DeltaNet, so three families cover
// them: attention last (qwen3_5: lin, lin, full), in the middle (qwen3_next: lin, full, lin), and only
// (qwen3); MoE changes nothing here and would only add time.
class StateCheckpointRoundTrip : public StateImageRoundTrip {};

TEST_P(StateCheckpointRoundTrip, RestoredCheckpointRefedIsBitIdenticalToAFreshRun) {
    const auto& [family, format] = GetParam();
    const Model model = Model::load(test::fixtures_dir() / family);
    const std::vector<int32_t> prompt = byte_tokens(kPrompt, 4), ran_on = byte_tokens(kContinue, 5),
                               other = byte_tokens(kContinue, 6);

    SequenceState state = model.new_sequence(format);
    model.forward(state, prompt);
    const SequenceState at_checkpoint = state;
    const StateCheckpoint checkpoint = state.checkpoint();
    EXPECT_EQ(checkpoint.position, int64_t(kPrompt));
    feed_steps(model, state, ran_on);
    state.restore(checkpoint);
    EXPECT_TRUE(state == at_checkpoint);

    SequenceState fresh = model.new_sequence(format);
    model.forward(fresh, prompt);
    EXPECT_EQ(feed_steps(model, state, other), feed_steps(model, fresh, other));

    // A checkpoint of the current position changes nothing; one of the empty sequence empties it.
    const SequenceState before = state;
    state.restore(state.checkpoint());
    EXPECT_TRUE(state == before);
    state.restore(model.new_sequence(format).checkpoint());
    EXPECT_TRUE(state == model.new_sequence(format));
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, KvFormat>>& info) {
    return std::get<0>(info.param) + "_" + std::string(kv_format_name(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(FamiliesAndFormats, StateImageRoundTrip,
                         ::testing::Combine(::testing::ValuesIn(kFamilies), ::testing::ValuesIn(kFormats)), case_name);
INSTANTIATE_TEST_SUITE_P(LayerOrdersAndFormats, StateCheckpointRoundTrip,
                         ::testing::Combine(::testing::Values("qwen3_5_float", "qwen3_next_float", "qwen3_float"),
                                            ::testing::ValuesIn(kFormats)),
                         case_name);

// Runs `change`, expects an Error whose message contains `says`, and the state exactly as before.
void expect_refused(SequenceState& state, const std::function<void()>& change, const std::string& says) {
    const SequenceState before = state;
    try {
        change();
        ADD_FAILURE() << "accepted; expected an error saying '" << says << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_TRUE(state == before) << says;
}

StateChunk& chunk_named(StateImage& image, const std::string& name) {
    const auto it =
        std::find_if(image.chunks.begin(), image.chunks.end(), [&](const StateChunk& c) { return c.name == name; });
    if (it == image.chunks.end()) throw std::runtime_error("test: no chunk " + name);
    return *it;
}

TEST(StateImageRefusals, EveryMismatchIsNamedAndChangesNothing) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_5_float");  // linear, linear, full
    const Model other = Model::load(test::fixtures_dir() / "qwen3_float");    // 4 × full
    for (KvFormat format : kFormats) {
        SCOPED_TRACE(std::string(kv_format_name(format)));
        SequenceState state = model.new_sequence(format);
        model.forward(state, byte_tokens(200, 7));
        SequenceState source = model.new_sequence(format);
        model.forward(source, byte_tokens(180, 8));
        const StateImage good = source.save();
        const std::string k = format == KvFormat::kivi4 ? "blk.2.attn.k.codes" : "blk.2.attn.k";

        StateImage image = good;
        image.kv_format = format == KvFormat::f32 ? KvFormat::f16 : KvFormat::f32;
        expect_refused(state, [&] { state.load(image); }, "KV cache format");

        SequenceState foreign = other.new_sequence(format);
        other.forward(foreign, byte_tokens(20, 9));
        expect_refused(state, [&] { state.load(foreign.save()); }, "blk.0.gdn.conv is missing");

        image = good;
        image.chunks.erase(image.chunks.begin() + 1);  // blk.0.gdn.recurrent
        expect_refused(state, [&] { state.load(image); }, "chunk blk.0.gdn.recurrent is missing");

        image = good;
        image.chunks.push_back({"blk.7.attn.v", {}});
        expect_refused(state, [&] { state.load(image); }, "chunk blk.7.attn.v is not part of this model's state");

        image = good;
        image.chunks.push_back(image.chunks.front());
        expect_refused(state, [&] { state.load(image); }, "chunk blk.0.gdn.conv appears twice");

        image = good;
        chunk_named(image, k).bytes.pop_back();
        expect_refused(state, [&] { state.load(image); }, "chunk " + k + " holds");

        image = good;
        chunk_named(image, "blk.1.gdn.recurrent").bytes.resize(4);
        expect_refused(state, [&] { state.load(image); }, "chunk blk.1.gdn.recurrent holds 4 bytes");

        image = good;
        image.position += 1;  // the KV chunks hold 180 positions
        expect_refused(state, [&] { state.load(image); }, "at position 181");

        image = good;
        image.position = -1;
        expect_refused(state, [&] { state.load(image); }, "position -1 is outside");
        image.position = int64_t(1) << 50;
        expect_refused(state, [&] { state.load(image); }, "is outside");

        // The good image does load, so the refusals above were about what they changed.
        state.load(good);
        EXPECT_TRUE(state == source);
    }
}

TEST(StateCheckpointRefusals, EveryMismatchIsNamedAndChangesNothing) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_next_float");  // linear, full, linear
    SequenceState state = model.new_sequence(KvFormat::kivi4);
    model.forward(state, byte_tokens(200, 10));

    SequenceState longer = state;
    model.forward(longer, byte_tokens(5, 11));
    expect_refused(state, [&] { state.restore(longer.checkpoint()); },
                   "position 205 is ahead of the sequence (at 200)");

    StateCheckpoint cp = state.checkpoint();
    cp.position = -3;
    expect_refused(state, [&] { state.restore(cp); }, "position -3 is outside");

    cp = state.checkpoint();
    cp.chunks.erase(std::remove_if(cp.chunks.begin(), cp.chunks.end(),
                                   [](const StateChunk& c) { return c.name == "blk.1.attn.v.residual"; }),
                    cp.chunks.end());
    expect_refused(state, [&] { state.restore(cp); }, "chunk blk.1.attn.v.residual is missing");

    cp = state.checkpoint();
    cp.chunks.front().bytes.push_back(std::byte{0});
    expect_refused(state, [&] { state.restore(cp); }, "chunk blk.0.gdn.conv holds");

    // A checkpoint of another format: f32 carries no residual windows, kivi4 carries ones f32 has not.
    SequenceState exact = model.new_sequence(KvFormat::f32);
    model.forward(exact, byte_tokens(200, 10));
    expect_refused(state, [&] { state.restore(exact.checkpoint()); }, "chunk blk.1.attn.k.residual is missing");
    expect_refused(exact, [&] { exact.restore(state.checkpoint()); }, "is not part of this model's state");
}

// The check other backends run before restoring (the GPU sequence state calls it): the same refusals,
// with no sequence involved.
TEST(StateCheckpointRefusals, ValidateStateCheckpointNamesWhatIsWrong) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_next_float");
    SequenceState state = model.new_sequence(KvFormat::kivi4);
    model.forward(state, byte_tokens(150, 12));
    const ModelConfig& c = model.config();
    EXPECT_NO_THROW(validate_state_checkpoint(c, KvFormat::kivi4, state.checkpoint()));
    const auto refused = [&](const StateCheckpoint& cp, KvFormat kv, std::string_view what) {
        try {
            validate_state_checkpoint(c, kv, cp);
            ADD_FAILURE() << "accepted a checkpoint that should fail with: " << what;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    StateCheckpoint cp = state.checkpoint();
    cp.position = -1;
    refused(cp, KvFormat::kivi4, "position -1 is outside");
    cp = state.checkpoint();
    cp.chunks.push_back(cp.chunks.front());
    refused(cp, KvFormat::kivi4, "appears twice");
    cp = state.checkpoint();
    cp.chunks.back().bytes.pop_back();
    refused(cp, KvFormat::kivi4, "holds");
    refused(state.checkpoint(), KvFormat::f32, "is not part of this model's state");
}

// `chunk` holds the f16 bits of what attention observed as `name` when a fresh sequence of `kv` reads `ids`.
void expect_f16_of_observed(const Model& model, KvFormat kv, const std::vector<int32_t>& ids, std::string_view name,
                            const StateChunk& chunk) {
    std::vector<float> observed;
    const ActivationObserver observer = [&](std::string_view n, const float* data, int64_t count) {
        if (n == name) observed.assign(data, data + count);
    };
    SequenceState probe = model.new_sequence(kv);
    model.forward(probe, ids, &observer);
    ASSERT_EQ(observed.size() * 2, chunk.bytes.size()) << chunk.name;
    for (size_t i = 0; i < observed.size(); ++i) {
        uint16_t bits;
        std::memcpy(&bits, chunk.bytes.data() + 2 * i, 2);
        ASSERT_EQ(bits, float_to_half(observed[i])) << chunk.name << " element " << i;
    }
}

TEST(StateImage, ChunksFollowTheDocumentedLayout) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_5_moe_float");  // linear, full
    const ModelConfig& c = model.config();
    SequenceState state = model.new_sequence(KvFormat::f16);
    const std::vector<int32_t> ids = byte_tokens(9, 12);
    model.forward(state, ids);
    const StateImage image = state.save();
    std::vector<std::string> names;
    for (const StateChunk& chunk : image.chunks) names.push_back(chunk.name);
    EXPECT_EQ(names,
              (std::vector<std::string>{"blk.0.gdn.conv", "blk.0.gdn.recurrent", "blk.1.attn.k", "blk.1.attn.v"}));
    // Sizes from the config by hand: conv (K−1)·(2·H_k·d_k + H_v·d_v) f32, S H_v·d_k·d_v f32,
    // keys 9 positions × n_head_kv × head_dim f16.
    EXPECT_EQ(image.chunks[0].bytes.size(), size_t(3 * (2 * 2 * 32 + 4 * 128) * 4));
    EXPECT_EQ(image.chunks[1].bytes.size(), size_t(4 * 32 * 128 * 4));
    EXPECT_EQ(image.chunks[2].bytes.size(), size_t(9 * 2 * 64 * 2));
    EXPECT_EQ(c.ssm_conv_kernel, 4);
    // And the keys are the f16 bits of what attention observed as blk.1.attn.k for the same tokens.
    expect_f16_of_observed(model, KvFormat::f16, ids, "blk.1.attn.k", image.chunks[2]);
}

// A kivi4 sequence of qwen3 (every layer full attention) keeps layer 0 in f16 (models/kv_format.h,
// layer_kv_format): its image has layer 0's f16 chunks, the KIVI chunks for layers 1-3, and a
// checkpoint holds residual windows of layers 1-3 only (an f16 layer is cut back exactly).
TEST(StateImage, Kivi4KeepsLayer0OfAPlainAttentionModelInF16) {
    const Model model = Model::load(test::fixtures_dir() / "qwen3_float");  // 4 × full, 2 KV heads × 64
    SequenceState state = model.new_sequence(KvFormat::kivi4);
    const std::vector<int32_t> ids = byte_tokens(200, 13);
    model.forward(state, ids);
    const StateImage image = state.save();
    EXPECT_EQ(image.kv_format, KvFormat::kivi4);
    std::vector<std::string> names;
    for (const StateChunk& chunk : image.chunks) names.push_back(chunk.name);
    std::vector<std::string> want = {"blk.0.attn.k", "blk.0.attn.v"};
    for (int layer : {1, 2, 3})
        for (const char* side : {"k", "v"})
            for (const char* part : {"sink", "codes", "min", "scale", "residual"})
                want.push_back("blk." + std::to_string(layer) + ".attn." + side + "." + part);
    EXPECT_EQ(names, want);
    // Layer 0: 200 positions × 2 heads × 64, 2 bytes each. Layer 1's key codes: of the 192 positions
    // after the 8 sinks, two groups of 32 have left the window of 128, at 4 bits for 128 values a row.
    EXPECT_EQ(image.chunks[0].bytes.size(), size_t(200 * 2 * 64 * 2));
    EXPECT_EQ(image.chunks[3].name, "blk.1.attn.k.codes");
    EXPECT_EQ(image.chunks[3].bytes.size(), size_t(64 * 128 / 2));
    // Layer 0's keys are the f16 bits of what attention observed, as in an f16 sequence.
    expect_f16_of_observed(model, KvFormat::kivi4, ids, "blk.0.attn.k", image.chunks[0]);

    std::vector<std::string> checkpoint_names;
    for (const StateChunk& chunk : state.checkpoint().chunks) checkpoint_names.push_back(chunk.name);
    EXPECT_EQ(checkpoint_names, (std::vector<std::string>{"blk.1.attn.k.residual", "blk.1.attn.v.residual",
                                                          "blk.2.attn.k.residual", "blk.2.attn.v.residual",
                                                          "blk.3.attn.k.residual", "blk.3.attn.v.residual"}));
}

}  // namespace
}  // namespace deltabit
