// On/off switches read from the environment (experiment switches such as DELTABIT_SEAM_FOLD=0, documented
// where they act). A misspelt value must not silently mean "on": anything but unset, "", "0" or "1" is an
// error that names the variable and says what it takes.
#pragma once

namespace deltabit {

// `name` unset or empty: default_value; "0": false; "1": true; anything else throws deltabit::Error.
bool env_switch(const char* name, bool default_value);

}  // namespace deltabit
