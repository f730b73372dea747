// The public structs' layout and enum values as compiled (abi.cc): what arfAbiQuery answers.
#pragma once

#include <cstdint>

namespace arf {

// The value of `name` (a struct's size, "struct.field" offset or enum constant); false if unknown.
bool abi_lookup(const char* name, int64_t* value);
// Every name abi_lookup knows, one per line, in static storage.
const char* abi_names();

}  // namespace arf
