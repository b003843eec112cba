// core/env_switch.h: unset and empty give the default, 0 and 1 their meaning, anything else an error that
// names the variable and the value.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/env_switch.h"
#include "core/error.h"

namespace deltabit {
namespace {

constexpr const char* kName = "DELTABIT_TEST_ENV_SWITCH";

TEST(EnvSwitch, UnsetAndEmptyGiveTheDefault) {
    ::unsetenv(kName);
    EXPECT_TRUE(env_switch(kName, true));
    EXPECT_FALSE(env_switch(kName, false));
    ::setenv(kName, "", 1);
    EXPECT_TRUE(env_switch(kName, true));
    EXPECT_FALSE(env_switch(kName, false));
    ::unsetenv(kName);
}

TEST(EnvSwitch, ZeroAndOneOverrideEitherDefault) {
    ::setenv(kName, "0", 1);
    EXPECT_FALSE(env_switch(kName, true));
    EXPECT_FALSE(env_switch(kName, false));
    ::setenv(kName, "1", 1);
    EXPECT_TRUE(env_switch(kName, true));
    EXPECT_TRUE(env_switch(kName, false));
    ::unsetenv(kName);
}

TEST(EnvSwitch, AnythingElseIsAnErrorNamingVariableAndValue) {
    for (const char* value : {"false", "off", "no", "2", " 0", "0 ", "true"}) {
        ::setenv(kName, value, 1);
        try {
            env_switch(kName, true);
            ADD_FAILURE() << value << " was accepted";
        } catch (const Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(kName), std::string::npos) << what;
            EXPECT_NE(what.find(value), std::string::npos) << what;
            EXPECT_NE(what.find("expected 0 (off) or 1 (on)"), std::string::npos) << what;
        }
    }
    ::unsetenv(kName);
}

TEST(EnvNumber, UnsetAndEmptyGiveTheDefaultAndAllowedValuesTheirNumber) {
    ::unsetenv(kName);
    EXPECT_EQ(env_number(kName, {16, 8, 4}, 0, "planned"), 0);
    ::setenv(kName, "", 1);
    EXPECT_EQ(env_number(kName, {16, 8, 4}, 0, "planned"), 0);
    for (const int n : {16, 8, 4}) {
        ::setenv(kName, std::to_string(n).c_str(), 1);
        EXPECT_EQ(env_number(kName, {16, 8, 4}, 0, "planned"), n);
    }
    ::unsetenv(kName);
}

TEST(EnvNumber, AnythingElseIsAnErrorNamingVariableValueAndChoices) {
    for (const char* value : {"0", "2", "016", " 8", "8 ", "sixteen", "-4"}) {
        ::setenv(kName, value, 1);
        try {
            env_number(kName, {16, 8, 4}, 0, "planned per launch");
            ADD_FAILURE() << value << " was accepted";
        } catch (const Error& e) {
            const std::string what = e.what();
            EXPECT_NE(what.find(kName), std::string::npos) << what;
            EXPECT_NE(what.find(value), std::string::npos) << what;
            EXPECT_NE(what.find("expected one of 16, 8, 4"), std::string::npos) << what;
            EXPECT_NE(what.find("planned per launch"), std::string::npos) << what;
        }
    }
    ::unsetenv(kName);
}

}  // namespace
}  // namespace deltabit
