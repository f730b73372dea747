# arfusion_ipc_tests (tests/ipc/): the ipc transport (one process per rank) end to end on GPUs.
# Each test forks one child process per rank from the gtest binary; the parent never initialises
# CUDA (tests/ipc/ipc_test_util.h says why). Its own main() probes for a device in a child and
# exits 77 without one, which ctest reports as skipped (never as passed), like the GPU suite.
# Devices: ARF_TEST_DEVICES="0,1" (rank r on entry r % n), default every rank on device 0.
#
#   ctest --test-dir build -R ipc_tests --output-on-failure
#   ARF_TEST_DEVICES=0,1 ./build/arfusion_ipc_tests --gtest_filter='IpcInit.*'
if(NOT ARF_BUILD_TESTS)
  return()
endif()

file(GLOB ARF_IPC_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/tests/ipc/*.cc)
if(NOT ARF_IPC_TEST_SOURCES)
  return()
endif()

add_executable(arfusion_ipc_tests ${ARF_IPC_TEST_SOURCES} ${ARF_CALLKIT_SOURCES})
target_include_directories(arfusion_ipc_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src
  ${CMAKE_CURRENT_SOURCE_DIR}/tests ${CMAKE_CURRENT_SOURCE_DIR}/tools/common)
target_link_libraries(arfusion_ipc_tests PRIVATE arfusion arfusion_reference GTest::gtest
  Threads::Threads)
target_compile_options(arfusion_ipc_tests PRIVATE ${ARF_WARNINGS})
# Exit code 77 = no GPU on this machine: skipped. 900 s: the children's own deadlines (at most
# 180 s per test, reached only by a hang) keep a broken build well inside it. RUN_SERIAL: the leak
# checks compare the GPU's free memory before and after (create/destroy cycles, a killed rank), so
# any other process allocating on the GPU meanwhile fails them; `ctest -j` runs this test alone.
add_test(NAME ipc_tests COMMAND arfusion_ipc_tests)
set_tests_properties(ipc_tests PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900 RUN_SERIAL TRUE)
