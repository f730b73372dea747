// Launch-shape experiment for the world-1 streaming kernel: the library's epilogue code
// (ResidualRmsNormEpilogue and the FP8 per-group epilogue, unchanged) under several row loops and
// launch shapes, timed against each other in one process on the same buffers, and checked bitwise
// against the register-pipelined loop (the library's loop before rows were staged). The block size,
// and so the reduction order, is the same in every variant; what changes is where the next rows
// wait (registers, or the library's staged rows in shared memory: streaming_epilogue.cuh), how
// many CTAs an SM holds (__launch_bounds__ min blocks, hence the register cap; a capped variant
// that spills shows what spilling costs), the staged rows' buffer count, and the grid (one wave of
// resident CTAs, or one CTA per row). With the norm run controls (copy4_*): the same four streams of
// bytes by the same thread -> element map with no arithmetic, at 2 and 4 CTAs an SM (capped by
// shared memory), so what the launch shape alone reaches, and move_*: the same bytes through the
// library's staged and register row loops, with and without the row's block reduction; their
// outputs are not compared.
//
//   cmake --build build --target arfusion_stream_variants     (or nvcc -std=c++20 -O3 -arch=sm_90
//     -Isrc -Iinclude --expt-relaxed-constexpr dev/experiments/stream_variants.cu)
//   build/arfusion_stream_variants [--tokens 512,2048,4096,16384] [--hidden 8192] [--repeats 7] [--iters 50]
//                                  [--clean-l2 1 | --graph 1]
//
// --clean-l2 1 times each call alone, right after a kernel that reads a buffer several times the
// L2's size (its lines clean, so nothing an earlier call wrote is left dirty in L2 for this one to
// write back), as Nsight Compute's cache control starts a profiled kernel; by default the calls run
// back to back, as in a model step, each paying the write-back of the previous call's outputs.
// --graph 1 replays the back-to-back calls from a CUDA graph (captured once per variant), so at
// small token counts the kernels, not the host's launch rate, set the figure (as arfusion-bench and
// torch's baselines time them).
//
// Prints one line per (pattern, tokens, variant): median us per call (eager launches; at small
// token counts the launch rate, not the kernel, sets the figure), min..max over the repeats, bytes
// moved per call over the time as a share of the device-to-device copy bandwidth measured in the
// same run, and whether every output matched the reference variant's bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quant_epilogue.cuh"
#include "launch/kernel_set.h"
#include "kernels/streaming_epilogue.cuh"

namespace {

using arf::KernelParams;
using T = __nv_bfloat16;
// The experiment's rows are 8192 columns: the library's 512-thread block, 2 vectors a thread.
constexpr int kBlock = arf::kNarrowBlockThreads;

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

// Rows through registers (stream_register_rows: the library's loop before rows were staged).
template <typename E, bool kPipe, int kMinBlocks>
__global__ void __launch_bounds__(kBlock, kMinBlocks) variant_kernel(const KernelParams p) {
  arf::stream_register_rows<E, true, kPipe>(p);
}

// The library's staged rows (stream_staged_rows, whether or not the library stages this epilogue:
// kernel_set.h, stages_rows), with the library's launch bounds.
template <typename E>
__global__ void __launch_bounds__(arf::kMaxBlockThreads, arf::kMinCtasPerSm) staged_kernel(const KernelParams p) {
  arf::stream_staged_rows<E, true>(p);
}

// Staged rows with kBuffers row buffers a CTA and a register cap for kMinBlocks CTAs of the block an SM.
template <typename E, int kBuffers, int kMinBlocks>
__global__ void __launch_bounds__(kBlock, kMinBlocks) staged_shape_kernel(const KernelParams p) {
  arf::stream_staged_rows<E, true, kBuffers>(p);
}

// Control, not an epilogue: the norm's four streams (input and residual_in read, residual_out and
// norm_out written, 16-byte vectors by the same thread -> element map) with no arithmetic and no
// reduction, so what the launch shape alone reaches on this memory system. Its occupancy is set
// by the dynamic shared memory the variant asks for, not by its registers.
__global__ void __launch_bounds__(kBlock, 4) copy4_kernel(const KernelParams p) {
  for (int row = static_cast<int>(blockIdx.x); row < p.num_rows; row += static_cast<int>(gridDim.x)) {
    const arf::RowSlice s = arf::row_slice(p, row);
    uint4 a[2], b[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (!s.owns(k)) continue;
      a[k] = arf::ld_stream_v4(arf::elem_ptr(p.input, s.elem(k)));
      b[k] = arf::ld_stream_v4(arf::elem_ptr(p.residual_in, s.elem(k)));
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (!s.owns(k)) continue;
      arf::st_v4(arf::elem_ptr(p.residual_out, s.elem(k)), a[k]);
      arf::st_v4(arf::elem_ptr(p.norm_out, s.elem(k)), b[k]);
    }
  }
}

// Controls through the library's row loops: an epilogue that moves the norm's bytes (input ->
// residual_out, residual_in -> norm_out) with no arithmetic, and one that also reduces each row
// over the CTA (the norm's one barrier a row) before its second store. Run by the staged loop and
// by the register loop, they split the norm's cost back to back into the loop, the reduction and
// the rest (the arithmetic).
template <bool kReduce>
struct MoveEpilogue : arf::NoScalePadding, arf::NoPostNorm {
  static constexpr int kVecs = 2;
  static constexpr bool kStagesRows = true;
  struct Cta {};
  struct Prefetch {
    uint4 residual[kVecs];
  };
  __device__ static Cta cta_state(const KernelParams&) { return {}; }
  __device__ static Prefetch prefetch(const KernelParams& p, const arf::RowSlice& s, const Cta&) {
    Prefetch pre;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (s.owns(k)) pre.residual[k] = arf::ld_stream_v4(arf::elem_ptr(p.residual_in, s.elem(k)));
    }
    return pre;
  }
  template <typename Reducer>
  __device__ static void apply(const KernelParams& p, const arf::RowSlice& s, const uint4 (&in)[kVecs],
                               const Prefetch& pre, const Cta&, Reducer& red) {
    float part = 0.0f;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      arf::st_v4(arf::elem_ptr(p.residual_out, s.elem(k)), in[k]);
      part += __uint_as_float(in[k].x & 0x3fffffffu);  // one add a vector: the reduction's operand
    }
    uint32_t mark = 0;
    if constexpr (kReduce) mark = red.template reduce<arf::SumOp>(part) == -1.0f ? 1u : 0u;  // never 1
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!s.owns(k)) continue;
      uint4 v = pre.residual[k];
      v.x ^= mark;
      arf::st_v4(arf::elem_ptr(p.norm_out, s.elem(k)), v);
    }
  }
};

static_assert(arf::RowEpilogue<MoveEpilogue<false>> && arf::RowEpilogue<MoveEpilogue<true>>);
static_assert(MoveEpilogue<false>::kStagesRows && MoveEpilogue<true>::kStagesRows);  // run staged, as the norm

template <typename E>
__global__ void __launch_bounds__(arf::kMaxBlockThreads, arf::kMinCtasPerSm) move_staged_kernel(const KernelParams p) {
  arf::stream_staged_rows<E, false>(p);
}
template <typename E>
__global__ void __launch_bounds__(kBlock, 2) move_registers_kernel(const KernelParams p) {
  arf::stream_register_rows<E, false, true>(p);
}

enum class GridRule { kPersistent, kPerRow };

struct Variant {
  const char* name;
  void (*fn)(KernelParams);
  int ctas_per_sm;  // the grid of a persistent variant: ctas_per_sm * SMs
  GridRule grid;
  int stages = 0;  // row buffers in dynamic shared memory (the library's staged rows)
  size_t occupancy_smem = 0;  // dynamic shared memory asked for only to cap the CTAs per SM
  bool control = false;       // not an epilogue: its outputs are not compared
};

// Dynamic shared memory that leaves room for at most n CTAs an SM (227 KiB usable, 1 KiB reserved
// per CTA).
constexpr size_t smem_for_ctas_per_sm(int n) { return (227 * 1024) / n - 1024; }

template <typename E>
std::vector<Variant> variants() {
  return {
      {"registers_pipelined_2", &variant_kernel<E, true, 2>, 2, GridRule::kPersistent},
      {"staged (library's)", &staged_kernel<E>, arf::resident_ctas_per_sm(kBlock), GridRule::kPersistent,
       arf::kStagedRowBuffers},
      {"registers_plain_2", &variant_kernel<E, false, 2>, 2, GridRule::kPersistent},
      {"registers_pipelined_3", &variant_kernel<E, true, 3>, 3, GridRule::kPersistent},
      {"registers_plain_2_per_row", &variant_kernel<E, false, 2>, 2, GridRule::kPerRow},
      {"staged_2buf_2cta", &staged_shape_kernel<E, 2, 2>, 2, GridRule::kPersistent, 2},
      {"staged_2buf_3cta", &staged_shape_kernel<E, 2, 3>, 3, GridRule::kPersistent, 2},
  };
}

// The controls, run with the norm: the same bytes with no epilogue, at 2 and 4 CTAs an SM.
std::vector<Variant> controls() {
  return {
      {"copy4_persistent_2cta", &copy4_kernel, 2, GridRule::kPersistent, 0, smem_for_ctas_per_sm(2), true},
      {"copy4_per_row_2cta", &copy4_kernel, 2, GridRule::kPerRow, 0, smem_for_ctas_per_sm(2), true},
      {"copy4_per_row_4cta", &copy4_kernel, 4, GridRule::kPerRow, 0, smem_for_ctas_per_sm(4), true},
      {"copy4_persistent_4cta", &copy4_kernel, 4, GridRule::kPersistent, 0, smem_for_ctas_per_sm(4), true},
      {"move_staged", &move_staged_kernel<MoveEpilogue<false>>, 2, GridRule::kPersistent, arf::kStagedRowBuffers, 0,
       true},
      {"move_staged_reduce", &move_staged_kernel<MoveEpilogue<true>>, 2, GridRule::kPersistent,
       arf::kStagedRowBuffers, 0, true},
      {"move_registers", &move_registers_kernel<MoveEpilogue<false>>, 2, GridRule::kPersistent, 0,
       smem_for_ctas_per_sm(2), true},
      {"move_registers_reduce", &move_registers_kernel<MoveEpilogue<true>>, 2, GridRule::kPersistent, 0,
       smem_for_ctas_per_sm(2), true},
  };
}

struct Set {  // one call's buffers
  void *input, *residual_in, *residual_out, *norm_out, *quant_out, *scale_out;
};

struct Args {
  std::vector<int> tokens{512, 2048, 4096, 16384};
  int hidden = 8192;
  int repeats = 7;
  int iters = 50;
  bool clean_l2 = false;
  bool graph = false;
};

std::vector<int> parse_list(const char* s) {
  std::vector<int> v;
  for (const char* q = s; *q;) {
    v.push_back(std::atoi(q));
    while (*q && *q != ',') ++q;
    if (*q == ',') ++q;
  }
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--tokens") a.tokens = parse_list(argv[i + 1]);
    else if (k == "--hidden") a.hidden = std::atoi(argv[i + 1]);
    else if (k == "--repeats") a.repeats = std::atoi(argv[i + 1]);
    else if (k == "--iters") a.iters = std::atoi(argv[i + 1]);
    else if (k == "--clean-l2") a.clean_l2 = std::atoi(argv[i + 1]) != 0;
    else if (k == "--graph") a.graph = std::atoi(argv[i + 1]) != 0;
    else { std::fprintf(stderr, "unknown option %s\n", k.c_str()); std::exit(2); }
  }
  if (a.clean_l2 && a.graph) {
    std::fprintf(stderr, "--clean-l2 and --graph: one or the other\n");
    std::exit(2);
  }
  return a;
}

double copy_gbps() {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 5; ++i) {
    CHECK(cudaEventRecord(e0));
    CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaFree(a));
  CHECK(cudaFree(b));
  return 2.0 * bytes / (ms[2] * 1e-3) / 1e9;
}

// Distinct pseudo-random bf16 values in about [-4, 4) per (seed, index), written on the device.
__global__ void fill_kernel(T* out, size_t elems, uint32_t seed) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < elems;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed * 0x9e3779b9u) ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 16; h *= 0x85ebca6bu; h ^= h >> 13; h *= 0xc2b2ae35u; h ^= h >> 16;
    out[i] = __float2bfloat16(static_cast<float>(h >> 8) * (8.0f / 16777216.0f) - 4.0f);
  }
}

void fill_random(void* dev, size_t elems, uint32_t seed) {
  fill_kernel<<<1024, 256>>>(static_cast<T*>(dev), elems, seed);
  CHECK(cudaGetLastError());
}

std::vector<char> fetch(const void* dev, size_t bytes) {
  std::vector<char> h(bytes);
  CHECK(cudaMemcpy(h.data(), dev, bytes, cudaMemcpyDeviceToHost));
  return h;
}

// Reads every 16-byte vector of `buf` once through L2 (plain loads: the lines it leaves are clean).
__global__ void read_sweep_kernel(const uint4* buf, size_t vecs, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < vecs;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = buf[i];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;  // a use of the loads the compiler cannot drop
}

// A buffer four times the L2 and the sweep that leaves L2 holding only its clean lines.
struct L2Cleaner {
  uint4* buf = nullptr;
  size_t vecs = 0;
  unsigned* sink = nullptr;
  void init() {
    int l2 = 0;
    CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    vecs = 4 * static_cast<size_t>(l2) / sizeof(uint4);
    CHECK(cudaMalloc(&buf, vecs * sizeof(uint4)));
    CHECK(cudaMemset(buf, 0x5a, vecs * sizeof(uint4)));
    CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  }
  void run(cudaStream_t stream) const { read_sweep_kernel<<<1024, 512, 0, stream>>>(buf, vecs, sink); }
};

struct Pattern {
  const char* name;
  std::vector<Variant> vs;
  bool quant;
};

void run_pattern(const Pattern& pat, const Args& a, int sms, double copy, const L2Cleaner& cleaner) {
  const int kSets = 4;
  void* gamma;
  CHECK(cudaMalloc(&gamma, a.hidden * sizeof(T)));
  fill_random(gamma, a.hidden, 7);
  for (int tokens : a.tokens) {
    const size_t elems = static_cast<size_t>(tokens) * a.hidden;
    const size_t scale_bytes = static_cast<size_t>(tokens) * (a.hidden / 128) * sizeof(float);
    std::vector<Set> sets(kSets);
    for (int i = 0; i < kSets; ++i) {
      Set& s = sets[i];
      CHECK(cudaMalloc(&s.input, elems * sizeof(T)));
      CHECK(cudaMalloc(&s.residual_in, elems * sizeof(T)));
      CHECK(cudaMalloc(&s.residual_out, elems * sizeof(T)));
      CHECK(cudaMalloc(&s.norm_out, elems * sizeof(T)));
      s.quant_out = nullptr;
      s.scale_out = nullptr;
      if (pat.quant) {
        CHECK(cudaMalloc(&s.quant_out, elems));
        CHECK(cudaMalloc(&s.scale_out, scale_bytes));
      }
      fill_random(s.input, elems, 100 + i);
      fill_random(s.residual_in, elems, 200 + i);
    }
    auto params = [&](const Set& s) {
      KernelParams p{};
      p.rank = 0;
      p.world = 1;
      p.num_elems = static_cast<int64_t>(elems);
      p.row_elems = a.hidden;
      p.num_rows = tokens;
      p.input = s.input;
      p.residual_in = s.residual_in;
      p.residual_out = s.residual_out;
      p.norm_out = pat.quant ? nullptr : s.norm_out;
      p.gamma = gamma;
      p.eps = 1e-6f;
      p.quant_out = s.quant_out;
      p.scale_out = s.scale_out;
      p.scale_layout = 0;
      p.scale_format = arf::kScaleFormatFp32;
      p.scale_addr = arf::quant::scale_addressing(arf::quant::ScaleLayout::kRowMajor, arf::quant::ScaleStorage::kFp32,
                                                  tokens, a.hidden / arf::quant::kFp8GroupElems);
      p.fallback_level = 1;
      return p;
    };
    const int block = std::min(kBlock, (a.hidden / arf::kElemsPerVec + 31) / 32 * 32);
    auto grid_of = [&](const Variant& v) {
      return v.grid == GridRule::kPerRow ? tokens : std::min(tokens, v.ctas_per_sm * sms);
    };
    auto smem_of = [&](const Variant& v) {
      return v.occupancy_smem + static_cast<size_t>(v.stages) * 2 * (a.hidden / arf::kElemsPerVec) * sizeof(uint4);
    };
    // A kernel several variants share gets the largest of their shared-memory sizes.
    for (const Variant& v : pat.vs) {
      size_t most = 0;
      for (const Variant& w : pat.vs) {
        if (w.fn == v.fn) most = std::max(most, smem_of(w));
      }
      if (most > 0) {
        CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(v.fn), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(most)));
      }
    }
    cudaStream_t stream;  // every launch and event of the timing (a capturable stream)
    CHECK(cudaStreamCreate(&stream));
    auto launch = [&](const Variant& v, const Set& s) {
      v.fn<<<grid_of(v), block, smem_of(v), stream>>>(params(s));
    };
    // Bitwise check against the library shape (variant 0) on every set's outputs.
    std::vector<std::vector<char>> ref;
    std::vector<bool> same(pat.vs.size(), true);
    for (size_t vi = 0; vi < pat.vs.size(); ++vi) {
      for (int i = 0; i < kSets; ++i) {
        const Set& s = sets[i];
        CHECK(cudaMemset(s.residual_out, 0xff, elems * sizeof(T)));  // poison
        if (pat.quant) {
          CHECK(cudaMemset(s.quant_out, 0xff, elems));
          CHECK(cudaMemset(s.scale_out, 0xff, scale_bytes));
        } else {
          CHECK(cudaMemset(s.norm_out, 0xff, elems * sizeof(T)));
        }
        launch(pat.vs[vi], s);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        std::vector<char> out = fetch(s.residual_out, elems * sizeof(T));
        std::vector<char> o2 = pat.quant ? fetch(s.quant_out, elems) : fetch(s.norm_out, elems * sizeof(T));
        out.insert(out.end(), o2.begin(), o2.end());
        if (pat.quant) {
          std::vector<char> o3 = fetch(s.scale_out, scale_bytes);
          out.insert(out.end(), o3.begin(), o3.end());
        }
        if (vi == 0) ref.push_back(std::move(out));
        else if (!pat.vs[vi].control && out != ref[i]) same[vi] = false;
      }
    }
    // Timing: per repeat, every variant in turn (interleaved), iters calls rotating the sets.
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    std::vector<std::vector<double>> us(pat.vs.size());
    for (size_t vi = 0; vi < pat.vs.size(); ++vi) {
      for (int w = 0; w < 8; ++w) launch(pat.vs[vi], sets[w % kSets]);  // warm-up
    }
    // --graph: each variant's iters calls captured once, replayed once per repeat.
    std::vector<cudaGraphExec_t> execs(a.graph ? pat.vs.size() : 0);
    for (size_t vi = 0; vi < execs.size(); ++vi) {
      cudaGraph_t g;
      CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      for (int it = 0; it < a.iters; ++it) launch(pat.vs[vi], sets[it % kSets]);
      CHECK(cudaStreamEndCapture(stream, &g));
      CHECK(cudaGraphInstantiate(&execs[vi], g, 0));
      CHECK(cudaGraphDestroy(g));
      CHECK(cudaGraphLaunch(execs[vi], stream));  // warm-up
    }
    CHECK(cudaStreamSynchronize(stream));
    // --clean-l2: one event pair per call, around the call alone.
    std::vector<cudaEvent_t> marks(a.clean_l2 ? 2 * a.iters : 0);
    for (cudaEvent_t& m : marks) CHECK(cudaEventCreate(&m));
    for (int r = 0; r < a.repeats; ++r) {
      for (size_t vi = 0; vi < pat.vs.size(); ++vi) {
        float ms = 0.0f;
        if (a.clean_l2) {
          for (int it = 0; it < a.iters; ++it) {
            cleaner.run(stream);
            CHECK(cudaEventRecord(marks[2 * it], stream));
            launch(pat.vs[vi], sets[it % kSets]);
            CHECK(cudaEventRecord(marks[2 * it + 1], stream));
          }
          CHECK(cudaEventSynchronize(marks.back()));
          for (int it = 0; it < a.iters; ++it) {
            float one;
            CHECK(cudaEventElapsedTime(&one, marks[2 * it], marks[2 * it + 1]));
            ms += one;
          }
        } else {
          CHECK(cudaEventRecord(e0, stream));
          if (a.graph) {
            CHECK(cudaGraphLaunch(execs[vi], stream));
          } else {
            for (int it = 0; it < a.iters; ++it) launch(pat.vs[vi], sets[it % kSets]);
          }
          CHECK(cudaEventRecord(e1, stream));
          CHECK(cudaEventSynchronize(e1));
          CHECK(cudaEventElapsedTime(&ms, e0, e1));
        }
        us[vi].push_back(1e3 * ms / a.iters);
      }
    }
    for (cudaEvent_t m : marks) CHECK(cudaEventDestroy(m));
    for (cudaGraphExec_t x : execs) CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaStreamDestroy(stream));
    const double bytes = pat.quant ? elems * (2.0 * 3 + 1) + scale_bytes : elems * 2.0 * 4;
    for (size_t vi = 0; vi < pat.vs.size(); ++vi) {
      std::vector<double> t = us[vi];
      std::sort(t.begin(), t.end());
      const double med = t[t.size() / 2];
      std::printf("%-10s h%-6d T%-6d %-22s grid %6d  %9.2f us  (%.2f..%.2f)  %5.1f%% of copy  bits %s\n",
                  pat.name, a.hidden, tokens, pat.vs[vi].name, grid_of(pat.vs[vi]), med, t.front(), t.back(),
                  100.0 * bytes / (med * 1e-6) / 1e9 / copy,
                  pat.vs[vi].control ? "(control)" : same[vi] ? "same" : "DIFFER");
    }
    std::fflush(stdout);
    for (Set& s : sets) {
      CHECK(cudaFree(s.input));
      CHECK(cudaFree(s.residual_in));
      CHECK(cudaFree(s.residual_out));
      CHECK(cudaFree(s.norm_out));
      if (pat.quant) {
        CHECK(cudaFree(s.quant_out));
        CHECK(cudaFree(s.scale_out));
      }
    }
    CHECK(cudaEventDestroy(e0));
    CHECK(cudaEventDestroy(e1));
  }
  CHECK(cudaFree(gamma));
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double copy = copy_gbps();
  std::printf("# %d SMs, copy %.0f GB/s (read + write); block %d; %s\n", sms, copy,
              std::min(kBlock, (a.hidden / arf::kElemsPerVec + 31) / 32 * 32),
              a.clean_l2 ? "each call alone after an L2 clean"
              : a.graph  ? "calls back to back, replayed from a CUDA graph"
                         : "calls back to back");

  L2Cleaner cleaner;
  if (a.clean_l2) cleaner.init();
  if (a.hidden != 8192) {
    std::fprintf(stderr, "this build instantiates 2 vectors per thread (hidden 8192) only\n");
    return 2;
  }
  using Norm = arf::ResidualRmsNormEpilogue<T, 2, true>;
  using Fp8Group = arf::ResidualRmsNormQuantEpilogue<T, 2, arf::Fp8PerGroupQuant, true>;
  std::vector<Variant> norm = variants<Norm>();
  for (const Variant& v : controls()) norm.push_back(v);
  run_pattern({"norm", norm, false}, a, sms, copy, cleaner);
  run_pattern({"fp8_group", variants<Fp8Group>(), true}, a, sms, copy, cleaner);
  return 0;
}
