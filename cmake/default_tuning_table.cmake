# The planner's built-in defaults (src/policy/default_tuning_table.json) embedded in the library:
# writes ${CMAKE_CURRENT_BINARY_DIR}/generated/default_tuning_table_json.cc, the file's text as the
# string kDefaultTuningTableJson (src/policy/default_tuning_table.h), and sets
# ARF_DEFAULT_TUNING_TABLE_SOURCE to it. Written again (only when the text changed) whenever CMake
# runs; editing the JSON makes the next build run CMake.
set(json ${CMAKE_CURRENT_SOURCE_DIR}/src/policy/default_tuning_table.json)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${json})
file(READ ${json} ARF_DEFAULT_TUNING_TABLE_TEXT)
if(ARF_DEFAULT_TUNING_TABLE_TEXT MATCHES "\\)arf_json\"")
  message(FATAL_ERROR "${json} holds the raw string's closing delimiter )arf_json\"")
endif()
set(ARF_DEFAULT_TUNING_TABLE_SOURCE ${CMAKE_CURRENT_BINARY_DIR}/generated/default_tuning_table_json.cc)
file(CONFIGURE OUTPUT ${ARF_DEFAULT_TUNING_TABLE_SOURCE} @ONLY CONTENT
"// Written by cmake/default_tuning_table.cmake from src/policy/default_tuning_table.json.
// Edit the JSON, not this file.
#include \"policy/default_tuning_table.h\"

const char arf::kDefaultTuningTableJson[] = R\"arf_json(@ARF_DEFAULT_TUNING_TABLE_TEXT@)arf_json\";
")
unset(json)
