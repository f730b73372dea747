# CPU tests of arfusion-bench's command line (tests/bench/): the nccl-tests vocabulary must keep
# meaning what nccl-tests users expect, and parsing runs no CUDA, so it is tested on every machine
# (ctest label cpu), with the op table (bench/ops.h) the parser reads, --tune-out's table
# derivation (pure host code over measured rows) and tools/common/process_group.cc (the
# multi-process host channel, tested with forked processes). The tests link the bench's own
# objects (arfusion_bench_core: everything but main); no device call happens.
if(ARF_BUILD_TESTS AND ARF_BUILD_BENCH AND TARGET arfusion_bench_core)
  file(GLOB ARF_BENCH_TEST_SOURCES CONFIGURE_DEPENDS
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench/*.cc)
  add_executable(arfusion_bench_tests ${ARF_BENCH_TEST_SOURCES})
  target_link_libraries(arfusion_bench_tests PRIVATE arfusion_bench_core GTest::gtest_main)
  target_compile_options(arfusion_bench_tests PRIVATE ${ARF_WARNINGS})
  add_test(NAME bench_args_tests COMMAND arfusion_bench_tests)
  set_tests_properties(bench_args_tests PROPERTIES LABELS cpu)
endif()

# The benchmark and soak scripts' rules (dev/measure/tests: compare_world1*.py's targets and the noise
# allowance of timing_noise.py, ab_summary.py's A/A rule, dev/measure/soak_tally.py's pooling of churn
# runs), on synthetic JSON:
# plain Python.
find_package(Python3 COMPONENTS Interpreter)
if(ARF_BUILD_TESTS AND Python3_Interpreter_FOUND)
  add_test(NAME bench_scripts_cpu
    COMMAND ${Python3_EXECUTABLE} -m unittest discover -s ${CMAKE_CURRENT_SOURCE_DIR}/dev/measure/tests
            -t ${CMAKE_CURRENT_SOURCE_DIR}/dev/measure/tests -v)
  set_tests_properties(bench_scripts_cpu PROPERTIES LABELS cpu TIMEOUT 60)
endif()
