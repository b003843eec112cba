// Snapshot format version 3 (runtime/snapshot.h) changed what a kivi4 state holds for a model whose
// layer 0 is full attention: layer_kv_format (models/kv_format.h) keeps that layer in f16. A version 2
// file of such a state is refused with a message that says why; version 2 files whose bytes mean the
// same today (f32, f16, kivi4 of a hybrid, whose layer 0 is DeltaNet) still load and continue exactly.
#include "engine_test_support.h"
#include "runtime/session.h"
#include "runtime/snapshot.h"
#include "snapshot_test_support.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deltabit {
namespace {

#if DELTABIT_HAVE_XXHASH

using namespace test;

SessionOptions options_for(KvFormat kv) {
    return {.sequence = {.max_positions = 512, .kv_format = kv}, .checkpoints = {.interval = 64, .max_kept = 4}};
}

// A session that holds 200 tokens (kivi4 has quantised groups: 8 sinks + 128 + 32 < 200), saved, and
// the same file relabelled as `version` with every checksum recomputed.
struct Saved {
    std::filesystem::path current, relabelled;
};

Saved save_and_relabel(Engine& engine, KvFormat kv, uint32_t version, const std::string& tag) {
    Session writer(engine, options_for(kv));
    writer.run_turn(random_tokens(190, 81), greedy_options(11));
    Saved s{temp_file("kv_versions_" + tag), temp_file("kv_versions_" + tag + "_v" + std::to_string(version))};
    writer.save(s.current);
    Layout layout = parse(read_bytes(s.current));
    EXPECT_EQ(layout.version, kSnapshotVersion);
    layout.version = version;
    write_bytes(s.relabelled, build(layout));
    return s;
}

TEST(SnapshotKvVersions, AnOldKivi4StateOfAModelWhoseLayer0AttendsIsRefusedByName) {
    const std::unique_ptr<Engine> engine = make_cpu_engine(load_model("qwen3_binary"));  // 4 × full attention
    ASSERT_EQ(layer_kv_format(engine->config(), KvFormat::kivi4, 0), KvFormat::f16);
    for (uint32_t version : {1u, 2u}) {
        const Saved s = save_and_relabel(*engine, KvFormat::kivi4, version, "qwen3_kivi4");
        Session reader(*engine, options_for(KvFormat::kivi4));
        EXPECT_EQ(message_of([&] { reader.load(s.relabelled); }),
                  "snapshot " + s.relabelled.string() + ": format version " + std::to_string(version) +
                      " (byte 8) stored layer 0 of this model as kivi4, but since version 3 kivi4 keeps that layer "
                      "in f16 (docs/kv_cache.md); this build cannot load its KV cache");
        EXPECT_EQ(reader.stats().position, 0);
        reader.load(s.current);  // the same state written by this build loads
        EXPECT_EQ(reader.stats().position, 200);
    }
}

// Bytes that mean the same in version 2 and 3: the file loads and the session continues as the one
// loaded from the version 3 file does.
TEST(SnapshotKvVersions, OldFilesWhoseBytesDidNotChangeStillLoad) {
    struct Case {
        const char* fixture;
        KvFormat kv;
    };
    for (const Case c : {Case{"qwen3_binary", KvFormat::f32}, Case{"qwen3_binary", KvFormat::f16},
                         Case{"qwen3_5_binary", KvFormat::kivi4}}) {
        const std::string tag = std::string(c.fixture) + "_" + std::string(kv_format_name(c.kv));
        SCOPED_TRACE(tag);
        const std::unique_ptr<Engine> engine = make_cpu_engine(load_model(c.fixture));
        const Saved s = save_and_relabel(*engine, c.kv, 2, tag);
        Session old_file(*engine, options_for(c.kv)), new_file(*engine, options_for(c.kv));
        old_file.load(s.relabelled);
        new_file.load(s.current);
        std::vector<int32_t> next(new_file.ledger().tokens().begin(), new_file.ledger().tokens().end());
        for (int32_t id : random_tokens(5, 82)) next.push_back(id);
        EXPECT_EQ(old_file.run_turn(next, greedy_options(20)).generation.tokens,
                  new_file.run_turn(next, greedy_options(20)).generation.tokens);
    }
}

#endif

}  // namespace
}  // namespace deltabit
