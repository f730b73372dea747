# One model-checking run of protocol.pml (cmake -P; one ctest entry of cmake/model_check.cmake):
# spin -a generates the verifier pan.c for one call sequence, rank count and switch set, the C
# compiler builds it, pan searches the whole state space, and the result must be what the entry
# expects: no error for the protocol as coded, at least one for a mutant. A search that ran out of
# depth or memory fails whatever it found: it was not exhaustive.
#
# Arguments:
#   SPIN, CC            the model checker and the C compiler (a name is looked up on PATH)
#   MODEL_DIR           tests/protocol_model (protocol.pml, calls.pml)
#   CONSTANTS           the generated protocol_constants.h (constants.cmake)
#   WORK                a directory of this run's own (emptied first)
#   CONFIG, N           the call sequence (CONFIG_<CONFIG> in calls.pml) and the rank count
#   DEFINES             further model switches, e.g. MUTANT_NO_CLEAR (a ;-list, may be empty)
#   MODE                safety: assertions and deadlocks (invalid end states);
#                       liveness: the spin loops of BUSY_WAIT and ltl all_done, under weak fairness;
#                       unfair: the same without fairness (a spinning CTA may starve its peers)
#   EXPECT              clean or counterexample
cmake_minimum_required(VERSION 3.25)

find_program(spin_exe NAMES ${SPIN})
if(NOT spin_exe)
  message("SKIPPED: spin not installed (scripts/setup.sh installs the Debian package spin)")
  return()
endif()
find_program(cc_exe NAMES ${CC} cc gcc clang)
if(NOT cc_exe)
  message(FATAL_ERROR "no C compiler to build Spin's verifier (pan.c)")
endif()

file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
file(COPY ${MODEL_DIR}/protocol.pml ${MODEL_DIR}/calls.pml ${CONSTANTS} DESTINATION ${WORK})

set(model_defines -DCONFIG_${CONFIG} -DN=${N})
foreach(d IN LISTS DEFINES)
  list(APPEND model_defines -D${d})
endforeach()
# pan: a hash table for a few million states (its size only sets the speed), a depth bound far
# above the deepest path (about 3000 steps), 2 GiB at most. Compiler optimisation only where the
# search is long enough to repay it (3 ranks, no counterexample expected).
set(pan_cflags -w -DMEMLIM=2048 -DNFAIR=3)
set(pan_args -m50000 -w22)
set(opt -O0)
if(N GREATER 2 AND EXPECT STREQUAL "clean")
  set(opt -O2)
endif()
if(MODE STREQUAL "safety")
  list(APPEND pan_cflags ${opt} -DSAFETY)
elseif(MODE STREQUAL "liveness")
  list(APPEND model_defines -DBUSY_WAIT)
  list(APPEND pan_cflags ${opt})
  list(APPEND pan_args -a -f)
elseif(MODE STREQUAL "unfair")
  list(APPEND model_defines -DBUSY_WAIT)
  list(APPEND pan_cflags ${opt})
  list(APPEND pan_args -a)
else()
  message(FATAL_ERROR "MODE is safety, liveness or unfair, not '${MODE}'")
endif()

function(run what)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(out "${out}${err}" PARENT_SCOPE)
  set(rc ${rc} PARENT_SCOPE)
  if(NOT what STREQUAL "pan" AND NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}${err}")
  endif()
endfunction()

run(spin ${spin_exe} ${model_defines} -a protocol.pml)
run(cc ${cc_exe} ${pan_cflags} -o pan pan.c)
run(pan ./pan ${pan_args})
set(pan_out "${out}")

string(REGEX MATCH "errors: ([0-9]+)" found "${pan_out}")
if(NOT found)
  message(FATAL_ERROR "pan gave no result (${rc}):\n${pan_out}")
endif()
set(errors ${CMAKE_MATCH_1})
string(REGEX MATCH "[0-9.e+]+ states, stored" states "${pan_out}")
string(REGEX MATCH "pan: elapsed time [0-9.e+]+ seconds" elapsed "${pan_out}")
set(summary "${CONFIG} N=${N} ${MODE} ${DEFINES}: ${errors} error(s), ${states}, ${elapsed}")

# The counterexample as the model's printf lines (one indentation per process), up to where it
# fails; spin -t -p in WORK replays it statement by statement.
function(counterexample out_var)
  execute_process(COMMAND ${spin_exe} ${model_defines} -t -k protocol.pml.trail protocol.pml
                  WORKING_DIRECTORY ${WORK} OUTPUT_VARIABLE trail ERROR_VARIABLE trail_err)
  string(FIND "${trail}" "#processes:" end)
  if(end GREATER -1)
    string(SUBSTRING "${trail}" 0 ${end} trail)
  endif()
  string(LENGTH "${trail}" length)
  if(length GREATER 12000)
    math(EXPR from "${length} - 12000")
    string(SUBSTRING "${trail}" ${from} -1 trail)
    set(trail "...\n${trail}")
  endif()
  set(${out_var} "${trail}${trail_err}" PARENT_SCOPE)
endfunction()

if(EXPECT STREQUAL "counterexample")
  if(errors GREATER 0)
    string(REGEX MATCH "pan:1: [^\n]*" what "${pan_out}")
    counterexample(trail)
    message(STATUS "${summary}\ncounterexample, as expected: ${what}\n${trail}")
    return()
  endif()
  message(FATAL_ERROR "${summary}\nthe mutant verified clean: the model no longer sees the fault it "
                      "names (${DEFINES}).\n${pan_out}")
endif()

foreach(incomplete "max search depth too small" "reached -DMEMLIM bound" "out of memory"
                   "Bit statespace search")
  string(FIND "${pan_out}" "${incomplete}" at)
  if(at GREATER -1)
    message(FATAL_ERROR "${summary}\nthe search was not exhaustive (${incomplete}):\n${pan_out}")
  endif()
endforeach()
if(errors GREATER 0)
  counterexample(trail)
  message(FATAL_ERROR "${summary}\nthe protocol model failed:\n${pan_out}\ncounterexample "
                      "(spin -t -p in ${WORK} replays it statement by statement):\n${trail}")
endif()
message(STATUS "${summary}")
