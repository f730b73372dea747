// The GPU verifier's first bad record as the host verifier's Mismatch (gpu_report.h).
#include "gpu_report.h"

#include "export/reference_api.h"

namespace arf::stress {

Mismatch first_mismatch(const CallSpec& call, const gv::KeyFields& f, uint16_t got,
                        uint16_t rank0, const DataSet& set, int64_t hidden, DType dtype) {
  Mismatch m;
  m.call = call.index;
  m.rank = f.rank;
  const bool norm = call.pattern == arfPatternResidualRmsNorm;
  const bool out_b = gv::kind_is_out_b(f.kind);
  m.output = !norm ? "allreduce_out" : (out_b ? "norm_out" : "residual_out");
  m.against = gv::kind_is_cross_rank(f.kind) ? "rank 0" : "reference";
  m.row = f.elem / hidden;
  m.col = f.elem % hidden;
  m.got = got;
  const size_t at = static_cast<size_t>(call.row_offset * hidden + f.elem);
  if (gv::kind_is_cross_rank(f.kind)) {
    m.want = rank0;
    m.want_exact = ref::to_float(rank0, dtype);
  } else if (!norm) {
    m.want = set.allreduce[at];
    m.want_exact = ref::to_float(m.want, dtype);
  } else if (!out_b) {
    m.want = set.residual_out[at];
    m.want_exact = ref::to_float(m.want, dtype);
  } else {
    m.want = set.norm_out[at];
    m.want_exact = set.norm_exact[at];
  }
  return m;
}

}  // namespace arf::stress
