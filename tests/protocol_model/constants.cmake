# Writes protocol_constants.h, everything protocol.pml takes from the code (cmake -P; the ctest
# fixture protocol_model_constants of cmake/model_check.cmake):
#  - what arfusion_protocol_model_constants (GENERATOR) prints: the Lamport buffer count and
#    rotation, the epoch comparison and the barrier integrity rule, computed by the C++ functions;
#  - what the kernels' call sites fix: the epoch step of every barrier and the epoch a CTA writes
#    back, read from the sources;
#  - and a check that the other facts the model mirrors are still written where it expects them.
# A call site that is gone or changed fails here, naming what the model mirrors: change
# tests/protocol_model/protocol.pml with the kernel, then the pattern below.
#
# Arguments: -DGENERATOR=<exe> -DSOURCE_DIR=<repository root> -DOUT=<header to write>
cmake_minimum_required(VERSION 3.25)

execute_process(COMMAND ${GENERATOR} OUTPUT_VARIABLE generated ERROR_VARIABLE error RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} failed (${rc}): ${error}")
endif()

set(call_sites "/* Taken from the kernels' call sites by tests/protocol_model/constants.cmake. */\n")
# Exactly one match of REGEX in FILE; NAME (when not empty) becomes a macro with its first group.
function(call_site name file regex meaning)
  file(READ ${SOURCE_DIR}/${file} text)
  # A ';' would split CMake's list of matches: both sides spell it differently first.
  string(REPLACE ";" "@semicolon@" text "${text}")
  string(REPLACE ";" "@semicolon@" pattern "${regex}")
  string(REGEX MATCHALL "${pattern}" matches "${text}")
  list(LENGTH matches count)
  if(NOT count EQUAL 1)
    message(FATAL_ERROR "protocol model out of date: ${file} should hold exactly one match of\n"
                        "  ${regex}\n(${meaning}); it holds ${count}. The kernel changed what "
                        "tests/protocol_model/protocol.pml mirrors: update the model with it, then "
                        "this pattern (tests/protocol_model/constants.cmake).")
  endif()
  if(name)
    string(REGEX REPLACE "${pattern}" "\\1" value "${matches}")
    set(call_sites "${call_sites}#define ${name} ${value}\n" PARENT_SCOPE)
  endif()
endfunction()

set(pull src/kernels/oneshot_pull.cuh)
set(twoshot src/kernels/twoshot.cuh)
set(protocol src/kernels/protocol.cuh)
set(lamport src/kernels/oneshot_lamport.cuh)
call_site(PULL_START_STEP ${pull}
  "peer_barrier<kWorld>\\(p, epoch \\+ ([0-9]+), Phase::kPullStartBarrier, call\\)"
  "the pull start barrier's epoch")
call_site(PULL_END_STEP ${pull}
  "peer_barrier<kWorld>\\(p, epoch \\+ ([0-9]+), Phase::kPullEndBarrier, call\\)"
  "the pull end barrier's epoch")
call_site(PULL_EPOCH_ADVANCE ${pull} "store_cta_epoch\\(p, epoch \\+ ([0-9]+)\\)"
  "the epoch a pull CTA writes back")
call_site(TWOSHOT_SCATTER_STEP ${twoshot}
  "peer_barrier<kWorld>\\(p, epoch \\+ ([0-9]+), Phase::kTwoshotScatterBarrier, call\\)"
  "the twoshot scatter barrier's epoch")
call_site(TWOSHOT_GATHER_STEP ${twoshot}
  "peer_barrier<kWorld>\\(p, epoch \\+ ([0-9]+), Phase::kTwoshotGatherBarrier, call\\)"
  "the twoshot gather barrier's epoch")
call_site(TWOSHOT_EPOCH_ADVANCE ${twoshot} "store_cta_epoch\\(p, epoch \\+ ([0-9]+)\\)"
  "the epoch a twoshot CTA writes back")
call_site(GATE_STEP ${protocol} "epoch = p\\.ctrl->gate_epoch \\+ ([0-9]+);"
  "the shared-device gate's epoch")
# Facts the model mirrors without a number.
call_site("" ${protocol} "e\\.lamport\\.clear_buffer = lamport_clear_buffer\\(buffer\\);"
  "a Lamport call clears the buffer lamport_clear_buffer names")
call_site("" ${protocol}
  "p\\.ctrl->lamport_clear_elems\\[e\\.lamport\\.buffer\\] = static_cast<uint64_t>\\(p\\.num_elems\\);"
  "call_exit records the call's own size for the buffer it read")
call_site("" ${protocol} "p\\.ctrl->lamport_buffer = lamport_next_buffer\\(e\\.lamport\\.buffer\\);"
  "call_exit rotates with lamport_next_buffer")
call_site("" ${lamport} "const int64_t vecs_per_slot = s\\.clear_elems / kElemsPerVec;"
  "the clear is sized by the recorded size of the cleared buffer")
call_site("" ${lamport}
  "lamport_push_rows<T, kWorld, Epilogue::kVecs>\\(p, s\\);[^\n]*\n[ ]*lamport_clear_previous<kWorld>\\(p, s\\);"
  "the clear follows the push")

file(WRITE ${OUT} "${generated}${call_sites}")
message(STATUS "wrote ${OUT}:\n${generated}${call_sites}")
