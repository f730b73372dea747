# CPU tests of arfusion-bench's command line (tests/bench/): the nccl-tests vocabulary must keep
# meaning what nccl-tests users expect, and parsing runs no CUDA, so it is tested on every machine
# (ctest label cpu). Only bench/args.cc is compiled in; it resolves -a names through the library's
# arfAlgorithmFromName, hence the link to arfusion (no device call happens at parse time).
if(ARF_BUILD_TESTS AND ARF_BUILD_BENCH)
  file(GLOB ARF_BENCH_TEST_SOURCES CONFIGURE_DEPENDS
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench/*.cc)
  add_executable(arfusion_bench_tests ${ARF_BENCH_TEST_SOURCES}
    ${CMAKE_CURRENT_SOURCE_DIR}/bench/args.cc)
  target_include_directories(arfusion_bench_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/bench)
  target_link_libraries(arfusion_bench_tests PRIVATE arfusion CLI11::CLI11 GTest::gtest_main)
  target_compile_options(arfusion_bench_tests PRIVATE ${ARF_WARNINGS})
  add_test(NAME bench_args_tests COMMAND arfusion_bench_tests)
  set_tests_properties(bench_args_tests PROPERTIES LABELS cpu)
endif()
