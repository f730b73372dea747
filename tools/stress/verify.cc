// Output checks of one call (verify.h). Rows are compared with memcmp first; only rows that differ
// are walked element by element, so the common case (all equal) runs at memory speed.
#include "verify.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "export/reference_api.h"

namespace arf::stress {
namespace {

struct Region {
  const char* output;
  const uint16_t* got;       // [tokens * hidden]
  const uint16_t* want;      // reference bits (or rank 0's)
  const double* exact;       // norm only: unrounded reference
  const char* against;
};

struct Counter {
  const CallSpec* call;
  int64_t hidden;
  DType dtype;
  CallCheck* check;

  void note(int rank, const Region& r, int64_t i, bool cross_rank) {
    if (cross_rank) {
      ++check->cross_rank_elems;
    } else {
      ++check->wrong_elems;
    }
    if (check->has_mismatch) return;
    check->has_mismatch = true;
    Mismatch& m = check->first;
    m.call = call->index;
    m.rank = rank;
    m.output = r.output;
    m.against = r.against;
    m.row = i / hidden;
    m.col = i % hidden;
    m.got = r.got[i];
    m.want = r.want[i];
    m.want_exact = r.exact != nullptr ? r.exact[i] : ref::to_float(r.want[i], dtype);
  }

  // Bitwise, or norm tolerance where `exact` is set (a differing row may still pass).
  void compare(int rank, const Region& r, bool cross_rank) {
    const size_t row_bytes = static_cast<size_t>(hidden) * sizeof(uint16_t);
    for (int64_t row = 0; row < call->tokens; ++row) {
      const int64_t base = row * hidden;
      if (std::memcmp(r.got + base, r.want + base, row_bytes) == 0) continue;
      for (int64_t i = base; i < base + hidden; ++i) {
        if (r.got[i] == r.want[i]) continue;
        if (r.exact != nullptr && ref::norm_within_tolerance(r.got[i], r.exact[i], dtype)) continue;
        note(rank, r, i, cross_rank);
      }
    }
  }
};

}  // namespace

std::string Mismatch::describe(DType dtype) const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "call %" PRIu64 " rank %d %s row %" PRId64 " col %" PRId64
                ": got 0x%04x (%.9g) want 0x%04x (%.9g) vs %s",
                call, rank, output.c_str(), row, col, got, ref::to_float(got, dtype), want,
                want_exact, against.c_str());
  return buf;
}

CallCheck check_call(const CallSpec& call, const DataSet& set, int64_t hidden, DType dtype,
                     const std::vector<RankOutputs>& outputs) {
  CallCheck check;
  Counter counter{&call, hidden, dtype, &check};
  const int64_t base = call.row_offset * hidden;
  const bool norm = call.pattern == arfPatternResidualRmsNorm;
  for (size_t r = 0; r < outputs.size(); ++r) {
    const RankOutputs& o = outputs[r];
    const RankOutputs& o0 = outputs[0];
    const int rank = static_cast<int>(r);
    if (!norm) {
      counter.compare(rank, {"allreduce_out", o.allreduce, set.allreduce.data() + base, nullptr,
                             "reference"}, false);
      if (r > 0) {
        counter.compare(rank, {"allreduce_out", o.allreduce, o0.allreduce, nullptr, "rank 0"}, true);
      }
      continue;
    }
    counter.compare(rank, {"residual_out", o.residual_out, set.residual_out.data() + base,
                           nullptr, "reference"}, false);
    counter.compare(rank, {"norm_out", o.norm_out, set.norm_out.data() + base,
                           set.norm_exact.data() + base, "reference"}, false);
    if (r > 0) {
      counter.compare(rank, {"residual_out", o.residual_out, o0.residual_out, nullptr, "rank 0"},
                      true);
      counter.compare(rank, {"norm_out", o.norm_out, o0.norm_out, nullptr, "rank 0"}, true);
    }
  }
  return check;
}

}  // namespace arf::stress
