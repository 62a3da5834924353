#pragma once
// Boolean environment variables of the runtime (SIMHPU_STRICT, SIMHPU_LAUNCH_BLOCKING, ...).
// One reading for all of them, so "true" cannot mean on for one flag and off for another.
namespace simhpu {

// Unset or empty: `fallback`. 1/true/yes/on and 0/false/no/off in any case are read
// as such; anything else raises, naming the variable and the accepted spellings.
bool env_flag(const char* name, bool fallback = false);

} // namespace simhpu
