// The build's reader of the kernel set: a host program, compiled and run when CMake configures
// (cmake/kernel_rows.cmake), that writes one translation unit per row of kernel_set.def (each an
// explicit instantiation of kernel_row.cuh's row_kernels, so the rows compile in parallel) and
// the list CMake builds from them. Everything it writes comes from kernel_set.h's tables, so the
// build restates nothing about the set: not the pattern sets' sizes, the vector counts, the
// diagnostic subset or the units' names.
//
//   write_kernel_units <directory>
//
// writes <directory>/row_<dtype>_<kernel>_<patterns>.cu for every row (a file is rewritten only
// when its text changes, so configuring again rebuilds nothing) and <directory>/kernel_units.cmake:
//   ARF_KERNEL_ROW_SOURCES             the units, one per row
//   ARF_KERNEL_NON_DIAGNOSTIC_SOURCES  the units of rows outside in_diagnostic_subset (the stress
//                                      tool's diagnostic variants leave them out: cmake/stress.cmake)
//   ARF_DECLARED_KERNELS               declared_kernel_count(), what the kernel_budget ctest holds
//                                      the built library to
// Exit 0, or 1 with the reason on stderr.
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "launch/kernel_set.h"

namespace arf {
namespace {

std::string unit_name(const KernelRow& row) {
  return std::string("row_") + dtype_name(row.dtype) + "_" + kernel_kind_name(row.kernel) + "_" +
         pattern_set_name(row.patterns) + ".cu";
}

// Row i of kernel_set.def as written there, and its (dtype, kernel, patterns) as row_kernels'
// template arguments: the preprocessor reads the list here as it does for kKernelRows, in the same
// order.
constexpr const char* kRowTexts[] = {
#define ARF_KERNEL_ROW(...) "ARF_KERNEL_ROW(" #__VA_ARGS__ ")",
#include "launch/kernel_set.def"
#undef ARF_KERNEL_ROW
};
constexpr const char* kRowArguments[] = {
#define ARF_KERNEL_ROW(dtype, kernel, patterns, ...) \
  "arf::DType::" #dtype ", arf::KernelKind::" #kernel ", arf::PatternSet::" #patterns,
#include "launch/kernel_set.def"
#undef ARF_KERNEL_ROW
};
static_assert(std::size(kRowTexts) == std::size(kKernelRows) && std::size(kRowArguments) == std::size(kKernelRows));

std::string unit_text(size_t i) {
  std::string arguments = kRowArguments[i];
  for (int w : kKernelRows[i].worlds) {
    if (w != 0) arguments += ", " + std::to_string(w);
  }
  return std::string("// Written by src/launch/write_kernel_units.cc from src/launch/kernel_set.def: the kernels of the row\n"
                     "//   ") + kRowTexts[i] + "\n"
         "// Edit the list, not this file.\n"
         "#include \"launch/kernel_row.cuh\"\n"
         "\n"
         "template std::span<const arf::KernelEntry> arf::row_kernels<" + arguments + ">();\n";
}

bool write_if_changed(const std::string& path, const std::string& text) {
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::ostringstream old;
    old << in.rdbuf();
    if (old.str() == text) return true;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "write_kernel_units: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int run(const std::string& dir) {
  std::string sources, non_diagnostic;
  for (size_t i = 0; i < std::size(kKernelRows); ++i) {
    const KernelRow& row = kKernelRows[i];
    const std::string name = unit_name(row);
    for (const KernelRow& other : kKernelRows) {
      if (&other != &row && unit_name(other) == name) {
        std::fprintf(stderr, "write_kernel_units: two rows of kernel_set.def make %s\n", name.c_str());
        return 1;
      }
    }
    if (!write_if_changed(dir + "/" + name, unit_text(i))) return 1;
    const std::string entry = "  \"${CMAKE_CURRENT_LIST_DIR}/" + name + "\"\n";
    sources += entry;
    if (!in_diagnostic_subset(row)) non_diagnostic += entry;
  }
  const std::string list =
      "# Written by src/launch/write_kernel_units.cc from src/launch/kernel_set.def (included by\n"
      "# cmake/kernel_rows.cmake). Edit the list, not this file.\n"
      "set(ARF_KERNEL_ROW_SOURCES\n" + sources + ")\n"
      "set(ARF_KERNEL_NON_DIAGNOSTIC_SOURCES\n" + non_diagnostic + ")\n"
      "set(ARF_DECLARED_KERNELS " + std::to_string(declared_kernel_count()) + ")\n";
  return write_if_changed(dir + "/kernel_units.cmake", list) ? 0 : 1;
}

}  // namespace
}  // namespace arf

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_kernel_units <directory>\n");
    return 1;
  }
  return arf::run(argv[1]);
}
