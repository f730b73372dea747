# CPU tests of arfusion-bench's command line (tests/bench/): the nccl-tests vocabulary must keep
# meaning what nccl-tests users expect, and parsing runs no CUDA, so it is tested on every machine
# (ctest label cpu). Only bench/args.cc, bench/tune.cc (--tune-out's table derivation, pure host
# code over measured rows) and tools/common/process_group.cc (the multi-process host channel, tested
# with forked processes) are compiled in; they use the library's arfAlgorithmFromName and tuning
# table, hence the link to arfusion (no device call happens).
if(ARF_BUILD_TESTS AND ARF_BUILD_BENCH)
  file(GLOB ARF_BENCH_TEST_SOURCES CONFIGURE_DEPENDS
    ${CMAKE_CURRENT_SOURCE_DIR}/tests/bench/*.cc)
  add_executable(arfusion_bench_tests ${ARF_BENCH_TEST_SOURCES}
    ${CMAKE_CURRENT_SOURCE_DIR}/bench/args.cc ${CMAKE_CURRENT_SOURCE_DIR}/bench/tune.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tools/common/process_group.cc)
  target_include_directories(arfusion_bench_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/bench
    ${CMAKE_CURRENT_SOURCE_DIR}/tools/common
    ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(arfusion_bench_tests PRIVATE arfusion CLI11::CLI11 GTest::gtest_main)
  target_compile_options(arfusion_bench_tests PRIVATE ${ARF_WARNINGS})
  add_test(NAME bench_args_tests COMMAND arfusion_bench_tests)
  set_tests_properties(bench_args_tests PROPERTIES LABELS cpu)
endif()
