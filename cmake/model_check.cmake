# The synchronization protocol, model-checked by Spin (tests/protocol_model/protocol.pml;
# docs/protocol.md, "Model checking"): ctest entries labelled cpu.
#   protocol_model_constants       writes the constants the model takes from the code (the C++
#                                  rules, run by arfusion_protocol_model_constants, and the
#                                  kernels' barrier epochs); fails when a call site the model
#                                  mirrors changed. Every entry below needs it (a ctest fixture).
#   protocol_model_<seq>_n<N>      the protocol as coded, exhaustively: no assertion fails and no
#                                  state deadlocks, for each call sequence at 2 and 3 ranks;
#   ..._liveness                   every call completes under weak fairness (pan -a -f);
#   protocol_model_mixed_n2_unfair the same without fairness has a counterexample (a spinning CTA
#                                  may starve the peer it waits for): fairness is needed;
#   protocol_model_mutant_<m>_n<N> a broken protocol must yield a counterexample; one that
#                                  verifies clean fails the entry.
# Every search is exhaustive (no bitstate): about 30 s of CPU in all (liveness at 3 ranks most).
# Without spin the entries print "SKIPPED: spin not installed" and ctest lists them as skipped
# (scripts/setup.sh installs it where it can). Not registered in sanitizer builds: nothing of the
# library runs here.
if(ARF_BUILD_TESTS AND NOT ARF_SANITIZE)
  add_executable(arfusion_protocol_model_constants tests/protocol_model/model_constants.cc)
  target_include_directories(arfusion_protocol_model_constants PRIVATE src)
  target_compile_options(arfusion_protocol_model_constants PRIVATE ${ARF_WARNINGS})

  set(model_dir ${CMAKE_CURRENT_SOURCE_DIR}/tests/protocol_model)
  set(model_work ${CMAKE_BINARY_DIR}/protocol_model)
  add_test(NAME protocol_model_constants
    COMMAND ${CMAKE_COMMAND} -DGENERATOR=$<TARGET_FILE:arfusion_protocol_model_constants>
            -DSOURCE_DIR=${CMAKE_CURRENT_SOURCE_DIR} -DOUT=${model_work}/protocol_constants.h
            -P ${model_dir}/constants.cmake)
  set_tests_properties(protocol_model_constants PROPERTIES LABELS cpu FIXTURES_SETUP arf_protocol_model)

  # arf_model_check(<name> <sequence> <ranks> <safety|liveness|unfair> <clean|counterexample>
  #                 [switch...])
  function(arf_model_check name sequence ranks mode expect)
    string(TOUPPER ${sequence} config)
    add_test(NAME protocol_model_${name}
      COMMAND ${CMAKE_COMMAND} -DSPIN=spin -DCC=cc -DMODEL_DIR=${model_dir}
              -DCONSTANTS=${model_work}/protocol_constants.h -DWORK=${model_work}/${name}
              -DCONFIG=${config} -DN=${ranks} "-DDEFINES=${ARGN}" -DMODE=${mode} -DEXPECT=${expect}
              -P ${model_dir}/check.cmake)
    set_tests_properties(protocol_model_${name} PROPERTIES LABELS cpu TIMEOUT 600
      FIXTURES_REQUIRED arf_protocol_model SKIP_REGULAR_EXPRESSION "SKIPPED: spin not installed")
  endfunction()

  foreach(sequence lamport barriers mixed)
    foreach(ranks 2 3)
      arf_model_check(${sequence}_n${ranks} ${sequence} ${ranks} safety clean)
      arf_model_check(${sequence}_n${ranks}_liveness ${sequence} ${ranks} liveness clean)
    endforeach()
  endforeach()
  arf_model_check(mixed_n2_unfair mixed 2 unfair counterexample)

  # Each mutant on the sequence that exercises what it breaks (calls.pml says why).
  foreach(ranks 2 3)
    arf_model_check(mutant_no_end_barrier_n${ranks} barriers ${ranks} safety counterexample
                    MUTANT_NO_END_BARRIER)
    arf_model_check(mutant_two_buffers_n${ranks} lamport ${ranks} safety counterexample
                    MUTANT_TWO_BUFFERS)
    arf_model_check(mutant_no_clear_n${ranks} lamport ${ranks} safety counterexample MUTANT_NO_CLEAR)
    arf_model_check(mutant_clear_new_n${ranks} lamport ${ranks} safety counterexample
                    MUTANT_CLEAR_NEW)
    arf_model_check(mutant_flag_first_n${ranks} barriers ${ranks} safety counterexample
                    MUTANT_FLAG_FIRST)
    arf_model_check(mutant_no_gather_barrier_n${ranks} barriers ${ranks} safety counterexample
                    MUTANT_NO_GATHER_BARRIER)
  endforeach()
endif()
