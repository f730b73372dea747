# `cmake --install`: the static library, the public headers, a CMake package (arfusionConfig.cmake,
# version file, targets exported as arfusion::arfusion), a pkg-config file (arfusion.pc) and the
# command-line tools. Included by the top-level CMakeLists.txt after the library target exists.
#
# The installed tree is relocatable: the CMake package locates itself through PACKAGE_PREFIX_DIR
# and arfusion.pc through ${pcfiledir}, so `cmake --install build --prefix DIR` (a prefix chosen at
# install time, not at configure time) yields a usable tree. Only the CUDA toolkit's paths are
# absolute: they name the toolkit this build used, outside the tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ARF_CMAKE_PACKAGE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/arfusion")

# The exported include directory comes from the target's own $<INSTALL_INTERFACE:include>.
install(TARGETS arfusion EXPORT arfusionTargets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
# The public API is exactly include/arfusion/; src/ headers are private (the target's PRIVATE
# include directory) and never installed.
install(DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}/include/arfusion"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}"
  FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")

# ---- CMake package ------------------------------------------------------------------------------
install(EXPORT arfusionTargets
  NAMESPACE arfusion::
  FILE arfusionTargets.cmake
  DESTINATION "${ARF_CMAKE_PACKAGE_DIR}")
# The library's kernels were compiled by this toolkit and must link against its static runtime, so
# the package records the major version and the toolkit root as a hint for consumers (see .in).
get_filename_component(ARF_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/arfusionConfig.cmake.in"
  "${CMAKE_CURRENT_BINARY_DIR}/arfusionConfig.cmake"
  INSTALL_DESTINATION "${ARF_CMAKE_PACKAGE_DIR}")
# Before 1.0 a minor release may change the ABI (ARF_API_VERSION structs), so only the same
# major.minor satisfies a request.
write_basic_package_version_file(
  "${CMAKE_CURRENT_BINARY_DIR}/arfusionConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)
install(FILES
  "${CMAKE_CURRENT_BINARY_DIR}/arfusionConfig.cmake"
  "${CMAKE_CURRENT_BINARY_DIR}/arfusionConfigVersion.cmake"
  DESTINATION "${ARF_CMAKE_PACKAGE_DIR}")

# ---- pkg-config -------------------------------------------------------------------------------
# A static archive carries none of its dependencies, so Libs lists all of them: the CUDA static
# runtime (with the pthread/dl/rt it needs) and the C++ runtime, which a C program linked with
# `cc` would otherwise lack. Cflags carries the CUDA include directories because arfusion.h
# includes cuda_runtime_api.h.
file(RELATIVE_PATH ARF_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(REGEX REPLACE "/$" "" ARF_PC_TO_PREFIX "${ARF_PC_TO_PREFIX}")
# The directory of the libcudart_static.a this build linked, not a guess at the toolkit layout.
get_filename_component(ARF_PC_CUDA_LIBDIR "${CUDA_cudart_static_LIBRARY}" DIRECTORY)
set(ARF_PC_CUDA_CFLAGS "")
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  string(APPEND ARF_PC_CUDA_CFLAGS " -I${dir}")
endforeach()
# Only the C++ runtime libraries of the compiler that built the archive (libstdc++ for g++).
set(ARF_PC_CXX_LIBS "")
foreach(lib IN LISTS CMAKE_CXX_IMPLICIT_LINK_LIBRARIES)
  if(lib MATCHES "^(stdc\\+\\+|c\\+\\+|c\\+\\+abi|m)$")
    string(APPEND ARF_PC_CXX_LIBS " -l${lib}")
  endif()
endforeach()
configure_file("${CMAKE_CURRENT_LIST_DIR}/arfusion.pc.in"
  "${CMAKE_CURRENT_BINARY_DIR}/arfusion.pc" @ONLY)
install(FILES "${CMAKE_CURRENT_BINARY_DIR}/arfusion.pc"
  DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

# ---- tools ------------------------------------------------------------------------------------
# Every executable named arfusion-* is a user-facing tool (tests use arfusion_*). Tools may be
# defined by optional parts included after this file (cmake/<part>.cmake), so the list is taken
# once the whole top-level directory has been processed.
function(arf_install_tools)
  get_property(targets DIRECTORY "${CMAKE_SOURCE_DIR}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "EXECUTABLE" AND target MATCHES "^arfusion-")
      install(TARGETS ${target} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL arf_install_tools)
