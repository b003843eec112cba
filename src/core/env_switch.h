// Switches read from the environment (experiment switches such as DELTABIT_SEAM_FOLD=0; docs/switches.md
// lists them all). A misspelt value must not silently mean "on": anything but unset, "" or one of the values
// a switch takes is an error that names the variable and says what it takes.
#pragma once

#include <initializer_list>

namespace deltabit {

// `name` unset or empty: default_value; "0": false; "1": true; anything else throws deltabit::Error.
bool env_switch(const char* name, bool default_value);

// A numeric switch: `name` unset or empty gives default_value (which need not be one of `allowed`, e.g. 0
// for "not set, plan it"); the decimal text of one of `allowed` gives that number; anything else throws
// deltabit::Error naming the variable, the value and the numbers it takes, with `unset_meaning` saying what
// leaving it unset does.
int env_number(const char* name, std::initializer_list<int> allowed, int default_value, const char* unset_meaning);

}  // namespace deltabit
