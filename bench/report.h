// Output of a run: nccl-tests-style tables on stdout (rows printed as they complete) and, with -J,
// one JSON file holding a header object and every row with all its fields.
//
// Tables (time = max over ranks of elapsed / calls, in microseconds):
//  allreduce: size(B) count type, then per column time(us) algbw(GB/s) busbw(GB/s) #wrong,
//             busbw = algbw * 2(n-1)/n.
//  fused:     tokens hidden bytes(per rank) unfused(us), each fused algorithm (us), auto (us) and
//             the algorithm arfPlan chose, the NCCL column if any, speedup (unfused / fastest other
//             arfusion column), #wrong.
//  epilogue:  tokens hidden bytes moved (read input + residual + gamma, write residual_out +
//             norm_out) time(us) achieved GB/s and % of the D2D copy bandwidth printed above it.
//  quant:     variant tokens hidden, then 3_kernels 2_kernels 1_kernel 1_kernel+bf16 (us), speedup
//             3_kernels / 1_kernel, at world 1 the 1_kernel call's % of the D2D copy bandwidth
//             (bytes: read input + residual + gamma, write residual_out + quant_out + scales),
//             #wrong (the gate: quant_check.h).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "args.h"
#include "results.h"

namespace arf::bench {

class Report {
 public:
  // columns: the measured columns in the order the runner fills each row's cells.
  Report(const BenchArgs& args, const RunHeader& header, std::vector<std::string> columns);

  // Ranks other than 0 of a multi-process run keep rows (for their exit status) but print nothing.
  void set_quiet(bool quiet) { quiet_ = quiet; }
  void print_header() const;
  void add_row(Row row);  // prints the row and keeps it for the footer and the JSON
  // Why the sweep ended early ("" when it ran to the end); printed in the footer and the JSON.
  void set_stopped(std::string why) { stopped_ = std::move(why); }
  void print_footer() const;
  std::string write_json(const std::string& path) const;  // "" or why not

  const std::vector<Row>& rows() const { return rows_; }

  // No cell failed and no check found a wrong element.
  bool all_passed() const;

  // The ops' tables (their descriptors, ops.cc, name which one a run prints): the column header
  // and one line per row.
  void print_allreduce_header() const;
  void print_allreduce_row(const Row& row) const;
  void print_fused_header() const;
  void print_fused_row(const Row& row) const;
  void print_epilogue_header() const;
  void print_epilogue_row(const Row& row) const;
  void print_quant_header() const;
  void print_quant_row(const Row& row) const;

 private:
  void print_copy_bandwidth() const;
  bool world1() const { return header_.layout.devices.size() == 1; }
  std::vector<int> fused_display_order() const;  // unfused, fused algorithms, auto, nccl

  const BenchArgs& args_;
  RunHeader header_;
  std::vector<std::string> columns_;
  std::vector<Row> rows_;
  std::string stopped_;
  bool quiet_ = false;
};

// The ops' fields of a JSON row beyond the common ones (their descriptors, ops.cc, name them):
// fused: unfused vs best fused and auto; epilogue: bytes moved and % of copy bandwidth; quant:
// the variant, times per level, speedup and (world 1) % of copy bandwidth.
void fused_json_fields(const Row& row, const BenchArgs& args, const RunHeader& header,
                       nlohmann::json* out);
void epilogue_json_fields(const Row& row, const BenchArgs& args, const RunHeader& header,
                          nlohmann::json* out);
void quant_json_fields(const Row& row, const BenchArgs& args, const RunHeader& header,
                       nlohmann::json* out);

}  // namespace arf::bench
