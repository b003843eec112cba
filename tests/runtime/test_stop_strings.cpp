// StopStringMatcher: what is released, what is held, and that a match ends the text exactly before it.
#include "core/error.h"
#include "runtime/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deltabit {
namespace {

TEST(StopStrings, HoldsOnlyAPossibleStartOfAStopString) {
    StopStringMatcher m({"END"});
    EXPECT_EQ(m.push("hello E").released, "hello ");  // "E" may begin "END"
    EXPECT_EQ(m.held_bytes(), 1u);
    EXPECT_EQ(m.push("X").released, "EX");  // it did not
    EXPECT_EQ(m.held_bytes(), 0u);
    EXPECT_EQ(m.push("EN").released, "");
    const StopStringMatcher::Step step = m.push("D and more");
    EXPECT_TRUE(step.stopped);
    EXPECT_EQ(step.released, "");
    EXPECT_EQ(m.push("after").released, "");  // done after a match
}

TEST(StopStrings, EarliestMatchAmongSeveralWins) {
    StopStringMatcher m({"cd", "bcx", "b"});
    // "b" at 1 comes before "cd" at 2; the held tail is released up to the match only.
    const StopStringMatcher::Step step = m.push("abcd");
    EXPECT_TRUE(step.stopped);
    EXPECT_EQ(step.released, "a");
}

TEST(StopStrings, MatchAcrossManyPushesAndFinishReleasesTheTail) {
    StopStringMatcher m({"<|end|>"});
    std::string out;
    for (const char* piece : {"x", "<", "|", "en"}) out += m.push(piece).released;
    EXPECT_EQ(out, "x");
    EXPECT_EQ(m.held_bytes(), 4u);
    EXPECT_EQ(m.finish(), "<|en");  // the stream ended: it was text after all
}

TEST(StopStrings, NeverReleasesHalfACharacter) {
    // Stop "é!" (C3 A9 21): after "café" the two bytes of é are held together, never one of them.
    StopStringMatcher m({"\xC3\xA9!"});
    EXPECT_EQ(m.push("caf\xC3\xA9").released, "caf");
    EXPECT_EQ(m.held_bytes(), 2u);
    EXPECT_EQ(m.push("?").released, "\xC3\xA9?");
}

TEST(StopStrings, EmptyStopStringIsRefused) { EXPECT_THROW(StopStringMatcher({"a", ""}), Error); }

}  // namespace
}  // namespace deltabit
