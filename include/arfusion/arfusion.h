/*
 * arfusion — fused tensor-parallel collectives for LLM inference (C API).
 *
 * One call performs   all-reduce(input over ranks) -> + residual -> RMSNorm   in a single kernel
 * over peer-mapped memory, with a rank-symmetric planner that picks the algorithm and grid from the
 * shape and static facts only, so every rank launches the same kernel with the same grid.
 *
 * General contracts (apply to every function below unless it says otherwise):
 *  - Return value: an arfStatus_t. On failure arfGetLastErrorString() (thread-local) says why.
 *    A call that fails validation (or planning) launches nothing. Made the same way on every rank,
 *    it leaves the communicator usable. Refused on some ranks while others issue it (a call with
 *    tokens; those without are no-ops everywhere), it fails the communicator on every rank at
 *    once: the refusing rank gets its own error code, saying that peers had issued the call; every
 *    other rank gets arfCommFailed naming the refusing rank and its reason — from that call if it
 *    comes later, else from its next call or arfCommGetAsyncError — and peer kernels already
 *    waiting for the call give up at once (they launched it: it and every later call count as
 *    lost, arfCommGetFirstLostCall; nothing is corrupted). Peer kernels of a call captured into a
 *    graph are released only by the bound (timeout_seconds), those of an nccl-algorithm call
 *    only when arfCommDestroy aborts NCCL (NCCL's kernels have no bound).
 *  - Thread safety: a communicator belongs to one rank; call it from one host thread at a time.
 *    Different communicators (ranks) may be driven from different threads concurrently. The
 *    exception: arfCommGetAsyncError and arfCommGetFirstLostCall may also be called from other
 *    threads (a watchdog polling every communicator, as engines poll NCCL), concurrently with the
 *    calls and with each other, but not concurrently with or after arfCommDestroy.
 *  - Streams: operations are stream-ordered and asynchronous; outputs are valid once the work
 *    enqueued on `stream` has completed. All ops of one communicator must be issued on one stream
 *    at a time (two concurrent streams on one communicator can interleave the protocol's epochs).
 *    With ARF_DEBUG_CHECKS=1 in the environment at communicator creation, a call on another stream
 *    while the previous call has not completed is refused (arfInvalidArgument, before launch; the
 *    check is conservative: it also refuses a switch the caller ordered with an event). That
 *    refusal takes no place in the call sequence: reissue the call on the right stream.
 *  - ARF_TUNING_TABLE=<file> at communicator creation: rank 0 reads a measured dispatch table
 *    (written by `arfusion-bench --op fused --tune-out <file>`) and every rank uses rank 0's copy,
 *    so plans stay identical on every rank; `auto` then takes the table's choice where it is
 *    feasible (arfPlan's reason says "tuned table: ..."). A named table that cannot be read or fails
 *    validation makes creation fail on every rank, with the reason.
 *  - ARF_DEBUG_COUNTERS_NEAR_WRAP=N at communicator creation, N in [1, 2^30] (a debug setting for
 *    tests, not for production): the protocol's 32-bit counters (barrier and gate epochs, and the
 *    call index, whose low 32 bits the flags carry) start N calls short of their wrap, so a short
 *    run crosses the wrap that a deployment reaches after days (2^32 calls: ~5 days at 10^4
 *    calls/s). Call indices (arfCommGetFirstLostCall, error messages) then start at 2^32 - N.
 *    Every rank must set the same N; otherwise creation fails on every rank, naming the ranks.
 *  - Collective: every rank of a communicator must issue the same sequence of operations with the
 *    same pattern, algorithm, dtype, num_tokens and hidden. A rank that does not join stalls its
 *    peers until the bounded wait expires (see arfCommGetAsyncError). A rank whose call differs
 *    (or that refused a call its peers issue: Return value, above) fails the communicator on every
 *    rank as soon as the ranks compare that call, without waiting for the bound.
 *  - Ranks sharing one GPU (virtual ranks, local transport; a testing and development mode, not
 *    how engines deploy): a rank's collective kernel spins until its peers' kernels run, so
 *      - drive each virtual rank from its own host thread: a call returns only once every rank on
 *        its GPU has enqueued the same call (so that nothing the caller enqueues after it can sit
 *        ahead of a peer's call in a hardware queue the streams share); a rank that stops calling
 *        makes its mates' calls return arfTimeout after timeout_seconds (phase host_enqueue), and
 *        a mate whose call was refused makes theirs return arfCommFailed at once;
 *      - any kernels may precede or follow a call on a rank's stream: before its collective kernel
 *        every call runs a one-CTA gate that waits until every rank on the GPU has reached the
 *        call, so no collective holds SMs a mate's earlier kernel needs. A kernel that needs every
 *        SM of the GPU at once (a cooperative launch) cannot run beside those gates;
 *      - no device-synchronizing call on any rank's thread while a peer's collective is in flight
 *        (cudaMalloc, cudaFree, cudaDeviceSynchronize, synchronous cudaMemcpy, graph
 *        instantiation), and every kernel a rank launches between collectives must already be
 *        loaded (with lazy module loading, the default, a first launch may wait for the context to
 *        go idle, which it never does while a peer spins): warm them up before the first
 *        collective, or set CUDA_MODULE_LOADING=EAGER. The library loads its own at creation;
 *      - CUDA graph launches are the caller's to order likewise (every rank's launch i before any
 *        rank's launch i+1; graphs may contain other kernels: the gate is captured with each call).
 *    Ranks on distinct GPUs are not affected by any of this. Ranks of different processes on one
 *    GPU (ipc) run the gate too (under MPS their kernels run at once) but not the enqueue order
 *    (separate contexts do not share hardware queues). CUDA_DEVICE_MAX_CONNECTIONS=32 (set before CUDA initialises) makes
 *    queue sharing rarer; the tests and tools set it.
 *  - Two communicators over the same GPUs (e.g. attention-TP and MoE-TP groups): use them in turn
 *    (each rank orders one group's calls after the other's with events or one stream), as with
 *    NCCL communicators: two collectives of different groups in flight at once can each hold the
 *    SMs the other needs.
 *  - Co-residency with other spinning kernels: a call's collective kernels spin until every peer's
 *    kernel of the call runs, and so do NCCL's kernels (data-parallel or pipeline-stage groups),
 *    DeepEP's and another communicator's. A call's grid can fill every SM (264 CTAs at 8192
 *    tokens on a 132-SM GPU), so two GPUs can deadlock, each full of one party's CTAs waiting for
 *    the other party's kernel that cannot start on the other GPU. The rule is NCCL's for
 *    concurrent communicators: an engine either never has two such parties in flight at once on
 *    a GPU (one stream, or events, ordering them the same way on every rank), or bounds each
 *    party's CTAs so that all of them fit on the GPU together: arfCommConfig_t.max_ctas here,
 *    ncclConfig_t.maxCTAs for NCCL, the SM count for DeepEP, their sum (counted as whole SMs) at
 *    most the GPU's SM count. Bounded waits end a deadlock as arfTimeout, not before.
 *  - CUDA graphs: operations may be captured and replayed. Nothing is registered per tensor: the
 *    kernels copy inputs into the communicator's own workspace, and protocol state lives on device.
 *  - Asynchronous errors and lost calls: a call that returns arfSuccess has only been enqueued. If
 *    a bounded wait later expires (or the integrity check fails), arfCommGetAsyncError reports it
 *    on every rank, naming the rank that waited, the peer, the phase, the CTA and the call index,
 *    and arfCommGetFirstLostCall gives the first call whose outputs may be lost: that call and
 *    every later one (enqueued before or after the error) must be treated as lost on every rank;
 *    earlier calls completed everywhere. A lost call's outputs are undefined (rows written before
 *    the error, old contents elsewhere); kernels enqueued after the error do nothing. Poll
 *    arfCommGetAsyncError (it does not synchronize), e.g. once per engine step.
 *
 * Numerics (what a caller needs to check the outputs; src/reference/cpu_reference.h implements it):
 *  - The sum: each element is summed in fp32 over the ranks' inputs in rank order 0, 1, ..., N-1
 *    (acc = 0; acc += x_r), then rounded once to the activation dtype (round to nearest even).
 *    Every algorithm and every call shape produces these exact bits (the nccl algorithm excepted:
 *    NCCL's order, bitwise equal across ranks but not to this). -0.0 inputs are read as +0.0
 *    (-0.0 is the Lamport "not yet written" sentinel) and a sum that rounds to -0.0 is returned as
 *    +0.0: the all-reduce never returns -0.0 (NCCL would for an all -0.0 column). NaN and Inf
 *    propagate as IEEE fp32 addition does.
 *  - residual_out = round(float(sum) + float(residual_in)): one fp32 add, one rounding (bitwise;
 *    = the rounded sum, bit for bit, when residual_in is NULL).
 *  - norm_out: y = float(residual_out); mean = (fp32 sum of y*y over the row, in column order per
 *    thread then a fixed reduction tree) / hidden; s = rsqrt(mean + eps) (eps inside the square
 *    root, added in fp32; eps > 0, so an all-zero row normalises to zeros); g = gamma (+1 with
 *    gamma_plus_one, in fp32); norm = round(y * s * g), or round(round(y * s) * g) with
 *    arfNormRoundBeforeWeight. Against an exact (double)
 *    reference it is within 1 ulp of the dtype at the exact value + 1e-6 (fp32 rsqrt and the
 *    fp32 sum of squares differ from double); for arfNormRoundBeforeWeight the exact reference
 *    rounds the intermediate y * s to the dtype (either neighbour when y * s is that close to a
 *    tie). The fused and unfused paths of this library are bitwise equal to each other.
 *  - Sandwich calls (post_gamma set): h = the norm of the rounded sum by the norm_out rules above
 *    with post_gamma for gamma (the same gamma_plus_one, eps and norm_rounding), rounded to the
 *    dtype, within the same 1 ulp of its exact value; residual_out = round(float(h) +
 *    float(residual_in)) from that h (= h when residual_in is NULL); norm_out as above from that
 *    residual_out. So residual_out is exact given h, and h is what a separate norm over the sum
 *    writes: the fused and unfused paths are bitwise equal to each other here too.
 *  - Across ranks every output is bitwise identical when residual_in and gamma are identical on
 *    every rank (as in tensor parallelism); with per-rank residuals each rank's outputs follow the
 *    rules above with its own residual.
 *  - Quantized patterns quantize the dtype-rounded norm (the unfused contract) with the rules of
 *    src/common/quant_formats.h (saturation, NaN, -0.0, subnormals), bitwise.
 *  - Dynamic FP8 scales (per-token, per-group): amax = the largest |x| of the row or group (NaN
 *    elements ignored), scale = max(amax / 448, 2^-9 / 448) in fp32, the quotient taken as the
 *    args' scale_rule says (arfFp8ScaleRule_t: an IEEE division by default, or amax * fp32(1/448),
 *    torch's GPU arithmetic); the UE8M0 formats round that scale up to a power of two. Elements
 *    are q = e4m3(saturate(x / scale)), an IEEE division, under either rule.
 */
#ifndef ARFUSION_ARFUSION_H_
#define ARFUSION_ARFUSION_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ARF_VERSION_MAJOR 0
#define ARF_VERSION_MINOR 1
/* Bumped whenever a public struct changes layout; structs carry struct_size + version. */
#define ARF_API_VERSION 6

/* Largest world size the kernels are built for. */
#define ARF_MAX_RANKS 8

typedef enum arfStatus_t {
  arfSuccess = 0,
  arfInvalidArgument = 1, /* bad pointer, shape, dtype, alignment, aliasing or capacity */
  arfUnsupported = 2,     /* valid request this build/communicator cannot run (e.g. forced algorithm not eligible) */
  arfCudaError = 3,       /* a CUDA runtime/driver call failed */
  arfNcclError = 4,       /* an NCCL call failed */
  arfTimeout = 5,         /* a bounded wait expired (a peer did not arrive) */
  arfInternal = 6,        /* a bug in arfusion */
  arfCommFailed = 7       /* the communicator saw an earlier fatal error and refuses further work */
} arfStatus_t;

typedef enum arfDataType_t {
  arfBFloat16 = 0,
  arfFloat16 = 1,
  arfFloat32 = 2 /* only as a gamma dtype */
} arfDataType_t;

typedef enum arfTransport_t {
  arfTransportLocal = 0, /* all ranks in this process, one host thread per rank; devices may repeat */
  arfTransportIpc = 1    /* one process per rank: cuMem workspaces shared by POSIX file descriptors
                            over a Unix socket rendezvous keyed by the id (arfCommInitRank) */
} arfTransport_t;

typedef enum arfPattern_t {
  arfPatternAllReduce = 0,       /* out = sum over ranks(input) */
  arfPatternResidualRmsNorm = 1, /* residual_out = ar + residual_in; norm_out = RMSNorm(residual_out) * gamma */
  /* residual_rmsnorm + quantization of the dtype-ROUNDED norm value (the unfused contract). norm_out
   * is optional for these (NULL: not written; set: the bf16/fp16 side output). Encodings saturate;
   * src/common/quant_formats.h states NaN, -0 and subnormal rules. */
  arfPatternResidualRmsNormFp8PerTensor = 2, /* quant_out e4m3 [T,H] = e4m3(norm / *scale_in) */
  arfPatternResidualRmsNormFp8PerToken = 3,  /* quant_out e4m3 [T,H]; scale_out fp32 [T] =
                                                max(amax_t / 448, 2^-9 / 448) (scale_rule) */
  arfPatternResidualRmsNormFp8PerGroup = 4,  /* quant_out e4m3 [T,H]; one scale per 1x128 group,
                                                H % 128 == 0; scale_layout row-major [T,H/128] or
                                                MN-major [H/128, round_up(T,4)]; scale_format */
  arfPatternResidualRmsNormNvfp4 = 5,        /* quant_out packed e2m1 [T,H/2] (even element in the low
                                                nibble); scale_out e4m3 per 16 elements; *scale_in =
                                                fp32 global scale; H % 16 == 0 */
  arfPatternResidualRmsNormMxfp4 = 6         /* quant_out packed e2m1 [T,H/2]; scale_out UE8M0 per 32
                                                elements; H % 32 == 0 */
} arfPattern_t;

/* Where scales live (arfScaleBufferBytes gives the size, padding included; padding is written 0). */
typedef enum arfScaleLayout_t {
  arfScaleRowMajor = 0,      /* [T, cols]; NVFP4/MXFP4 "linear" */
  arfScaleMnMajor = 1,       /* FP8 per-group only: [cols, round_up(T,4)] (Hopper DeepGEMM/TMA) */
  arfScaleSwizzled128x4 = 2  /* NVFP4/MXFP4 only: 128x4 tiles (cuBLASLt/CUTLASS/TRT-LLM) */
} arfScaleLayout_t;

/* FP8 per-group scale storage. NVFP4/MXFP4 scales are always one byte (e4m3 / UE8M0). */
typedef enum arfScaleFormat_t {
  arfScaleFp32 = 0,        /* amax / 448 (floored; scale_rule), fp32 */
  arfScaleUe8m0AsFp32 = 1, /* rounded up to a power of two, stored as fp32 */
  arfScaleUe8m0Packed = 2  /* rounded up to a power of two, UE8M0 bytes packed 4 per word along K */
} arfScaleFormat_t;

/* The fallback chain of the quantized patterns: 1 kernel (all-reduce + norm + quant),
 * 2 kernels (fused all-reduce + norm, then a quant kernel), 3 kernels' worth (all-reduce kernel,
 * then norm + quant). The level and the algorithm combine as follows (arfPlan reports both):
 *  - auto: level 1 with the chosen or forced fused algorithm (level 1 is eligible whenever a fused
 *    algorithm can run the shape); algorithm arfAlgoUnfused means level 3.
 *  - level 1 or 2: with algorithm auto or a forced fused algorithm; with arfAlgoUnfused it is
 *    arfUnsupported.
 *  - level 3: runs arfAlgoUnfused; a forced fused algorithm becomes its inner all-reduce
 *    (arfPlan_t.inner_allreduce), auto picks the inner one as for a plain all-reduce.
 * Patterns allreduce and residual_rmsnorm take arfFallbackAuto only (anything else is
 * arfInvalidArgument; residual_rmsnorm's two-kernel form is algorithm arfAlgoUnfused) and report
 * fallback_level 1. Values outside the enum are arfInvalidArgument. Like the algorithm, the level is
 * decided from the shape and static facts only, identically on every rank. */
typedef enum arfFallbackLevel_t {
  arfFallbackAuto = 0,
  arfFallbackOneKernel = 1,
  arfFallbackTwoKernels = 2,
  arfFallbackThreeKernels = 3
} arfFallbackLevel_t;

/* How norm_out is rounded (API version 4). Both compute y = residual_out (the rounded value),
 * s = rsqrt(mean(y^2) + eps) in fp32 (mean = fp32 sum of y^2 in column order / hidden), g = gamma
 * (+ 1 for gamma_plus_one) in fp32:
 *  - arfNormRoundOnce (default): norm = round(y * s * g), each product rounded in fp32, one
 *    rounding to the dtype (Gemma's (1 + w) in fp32; TensorRT-LLM, FlashInfer).
 *  - arfNormRoundBeforeWeight: norm = round(round(y * s) * g), the activation-dtype intermediate
 *    of vLLM's and SGLang's rms_norm kernels and of Hugging Face's LlamaRMSNorm
 *    (weight * x.to(dtype)), so a model that used those unfused kernels sees the same bits.
 * Quantized patterns quantize this rounded norm. */
typedef enum arfNormRounding_t {
  arfNormRoundOnce = 0,
  arfNormRoundBeforeWeight = 1
} arfNormRounding_t;

/* How the dynamic FP8 scale of fp8 per-token and per-group is computed from the amax (API version
 * 5). Under both rules amax is the largest |x| of the row or group, NaN elements ignored (an
 * all-zero or all-NaN row has amax 0), the floor 2^-9 / 448 is applied after the quotient
 * (scale = max(quotient, 2^-9 / 448), as torch's clamp_min(amax / 448.0, 1 / (448 * 512)) does),
 * an infinite amax gives an infinite scale (UE8M0: saturated to 2^127), and the UE8M0 formats
 * round the chosen scale up to a power of two:
 *  - arfFp8ScaleDivide (default): amax / 448, the IEEE quotient (the bits of earlier versions).
 *  - arfFp8ScaleTimesReciprocal: amax * fp32(1/448), one IEEE multiplication by the fp32 constant
 *    RN(1/448) (bits 0x3B124925). That is what torch computes for `amax / 448.0` on a GPU, eager
 *    CUDA (a Python-scalar divisor becomes a multiplication by its reciprocal) and Inductor alike.
 *    The two quotients differ by one ulp for 17,468 of the 32,512 positive normal bf16 values
 *    (9,727 scales once the floor applies; fp16: 17,420 and 14,050 of 31,743); the rounded-up
 *    UE8M0 scales of the two rules are equal for every bf16 and fp16 amax.
 * The elements are x / scale (IEEE) under both rules. Patterns without a dynamic FP8 scale
 * (allreduce, residual_rmsnorm, fp8 per-tensor, nvfp4, mxfp4) take arfFp8ScaleDivide only:
 * another rule is arfInvalidArgument, as is a value outside the enum. */
typedef enum arfFp8ScaleRule_t {
  arfFp8ScaleDivide = 0,
  arfFp8ScaleTimesReciprocal = 1
} arfFp8ScaleRule_t;

/* One name per algorithm, spelled the same in code, CLI, logs and tests (arfAlgorithmName). */
typedef enum arfAlgorithm_t {
  arfAlgoAuto = 0,
  arfAlgoOneshotLamport = 1, /* push into peers' Lamport buffers, poll local, no barrier */
  arfAlgoOneshotPull = 2,    /* copy-in, start barrier, pull all peers, end barrier */
  arfAlgoTwoshot = 3,        /* reduce-scatter + all-gather by push, two flag barriers */
  arfAlgoUnfused = 4,        /* our all-reduce kernel, then a separate epilogue kernel */
  arfAlgoNccl = 5            /* ncclAllReduce, then our epilogue kernel (residual + RMSNorm [+ quant],
                                level 3). Needs one rank per GPU and NCCL 2.14+ loadable at init
                                (libnccl.so.2 or $ARF_NCCL_LIBRARY; ARF_NCCL=0 disables): creation
                                then builds an NCCL communicator on every rank and all agree whether
                                it came up; otherwise a forced nccl call is arfUnsupported saying
                                why. auto takes it only from a tuned table. The sum follows NCCL's
                                reduction order (bitwise identical on all ranks, not bitwise the
                                fp32 reference); the epilogue follows the unfused contract. */
} arfAlgorithm_t;

/* Opaque rendezvous key: ranks that pass the same id form one communicator. The ipc transport
 * uses its first 16 bytes (the part arfUniqueIdToString prints): its rendezvous socket is named
 * after them. Whoever knows them can take that name before rank 0 does (creation then fails on
 * every rank, bounded), so hand the id to other processes privately: through their environment, a
 * file only you can read, or a channel like NCCL's broadcast (arfCommInitRankFromNccl), never on
 * a command line, which every user of the host can read. */
typedef struct arfUniqueId {
  char internal[64];
} arfUniqueId;

/* Characters arfUniqueIdToString writes: 32 lower-case hex digits and a terminating NUL. */
#define ARF_UNIQUE_ID_STRING_BYTES 33

typedef struct arfCommConfig_t {
  size_t struct_size;     /* = sizeof(arfCommConfig_t); set by arfCommConfigInit */
  unsigned version;       /* = ARF_API_VERSION */
  arfTransport_t transport;
  int rank;               /* 0 .. world_size-1 */
  int world_size;         /* 1, 2, 4 or 8 */
  int device;             /* CUDA device ordinal of this rank */
  arfUniqueId id;         /* from arfGetUniqueId, identical on every rank */
  size_t max_tokens;      /* capacity: largest num_tokens of any call */
  size_t max_hidden;      /* capacity: largest hidden of any call (multiple of 8, <= 16384) */
  arfDataType_t dtype;    /* activation dtype of every call: arfBFloat16 or arfFloat16 */
  size_t oneshot_max_tokens; /* Lamport capacity, in tokens of max_hidden: the Lamport buffers
                                hold 3 x world x this x max_hidden elements, and a call can run
                                on oneshot_lamport when num_tokens x hidden <= this x max_hidden
                                (elements: a narrower call may have more tokens); 0 = max_tokens.
                                Larger calls use other algorithms. */
  double timeout_seconds; /* bound of every device spin-wait; 0 = default (10 s) */
  double init_timeout_seconds; /* bound of the host rendezvous in arfCommInitRank; 0 = 60 s */
  /* API version 3. 1: launch every kernel with programmatic dependent launch (PDL, sm_90+): a
   * kernel of ours may be scheduled while the previous kernel on the stream finishes; it waits
   * (griddepcontrol.wait) for that kernel's completion before touching memory, and it signals its
   * dependents only after its last output store. A following kernel launched with the PDL
   * attribute must itself wait (cudaGridDependencySynchronize) before reading our outputs; one
   * launched without it is ordered by the stream as usual. 0 (default): ordinary launches.
   * Version-2 callers (struct_size without this field) get 0. */
  int programmatic_launch;
  /* API version 4. 1: every collective kernel runs the per-call integrity check: each rank
   * publishes its call index with its data and barrier flags, and readers compare it with their
   * own, so a protocol slip (ranks in different calls exchanging data) becomes arfInternal naming
   * the call and both ranks (arfCommGetAsyncError) instead of silently wrong numbers. Costs one
   * extra store and load per CTA and peer. ARF_VERIFY_CALLS=1 in the environment at creation turns
   * it on as well. 0 (default): off. Version 1-3 callers get 0. Agreed at creation: the check runs
   * on every rank as soon as one rank asks for it (by this field or the variable), since it
   * compares what every peer publishes. */
  int verify_calls;
  /* API version 6. The most CTAs one call keeps on a GPU at once, counting every rank of this
   * communicator on that GPU (ranks sharing a GPU split it: max_ctas / ranks on the GPU each, at
   * least 1); 0 (default): no bound. Every kernel of every algorithm launches at most that many
   * (the nccl algorithm passes it to NCCL as ncclConfig_t.maxCTAs), and a CTA is resident on one
   * SM, so a call occupies at most max_ctas SMs of each GPU: the rest stays free for the spinning
   * kernels of other communicators (Co-residency, above). A bound too small for the algorithms (less
   * than one CTA per rank sharing a GPU) makes them infeasible: auto falls back where it can,
   * else arfUnsupported with the reason; a call never waits for SMs it cannot get. Must be equal
   * on every rank (creation fails on every rank otherwise, naming the ranks); arfPlanFacts_t and
   * arfPlan's reason show it. Version 1-5 callers get 0. */
  int max_ctas;
} arfCommConfig_t;

typedef struct arfComm* arfComm_t;

/* Fills defaults: struct_size/version set, local transport, rank 0 of 1, device 0, bf16,
 * max_tokens 1024, max_hidden 8192, default timeouts. */
void arfCommConfigInit(arfCommConfig_t* config);

/* A fresh random rendezvous id: all 64 bytes from the kernel's random source (getrandom), so the
 * 16 bytes that name the ipc socket are 128 unpredictable bits, and two ids collide with
 * negligible probability. arfInternal when the random source fails. */
arfStatus_t arfGetUniqueId(arfUniqueId* id);

/* The rendezvous id as text, for handing it to other processes (ipc transport): 32 hex digits of
 * the id's first 16 bytes. out must hold ARF_UNIQUE_ID_STRING_BYTES. */
arfStatus_t arfUniqueIdToString(const arfUniqueId* id, char* out);
/* Parses 32 hex digits (as arfUniqueIdToString writes them, or ARF_RENDEZVOUS_ID from arfusion-run)
 * into an id whose remaining bytes are zero. arfInvalidArgument says what is wrong otherwise. */
arfStatus_t arfUniqueIdFromString(const char* text, arfUniqueId* id);

/* For a process started by `arfusion-run` (or anything that sets the same variables): fills
 * transport ipc, rank (ARF_RANK), world_size (ARF_WORLD_SIZE), device (ARF_DEVICE; default 0) and
 * id (ARF_RENDEZVOUS_ID) into a config already initialised by arfCommConfigInit, leaving
 * capacity and timeouts alone. arfInvalidArgument naming the variable when one is missing or
 * malformed. */
arfStatus_t arfCommConfigFromEnv(arfCommConfig_t* config);

/* Creates this rank's communicator. Collective over the world.
 * local transport: every rank's thread calls this with the same id and blocks (bounded by
 * init_timeout_seconds) until all have joined; workspaces are then allocated on each rank's device
 * and exchanged, and peer access is enabled between distinct devices.
 * ipc transport: one process per rank, each calling this with the same id (arfUniqueIdToString /
 * FromString, or arfCommConfigFromEnv). Rank 0 listens on an abstract Unix socket named after the
 * id (owning user only, checked by SO_PEERCRED); every rank allocates its workspace with cuMem as
 * an exportable POSIX file descriptor, the descriptors are exchanged (SCM_RIGHTS), and each rank
 * imports, maps and access-enables every peer's. A write/read probe then runs on every pair and all
 * ranks vote. When some pair cannot reach each other's memory and every rank has NCCL (one rank per
 * GPU; see arfAlgoNccl), the communicator is created on every rank and runs every call on nccl
 * (arfPlan's reason says so; forced custom algorithms are arfUnsupported); without NCCL creation
 * fails on every rank with arfUnsupported naming the pair. Other failures are the same on every
 * rank too: arfTimeout naming ranks that never joined, arfCommFailed when a rank exited.
 * Needs cuMem with POSIX file descriptor handles (Linux, CUDA 11.3+ driver).
 * Both: when several ranks share one device, launch grids are capped so that all ranks' blocks
 * co-reside (spinning kernels would otherwise deadlock); ranks of different processes on one GPU
 * time-slice (correct, slow) or, under an MPS daemon, run at once behind the shared-device gate.
 * Not graph-capturable. Sets the calling thread's current device to config->device. */
arfStatus_t arfCommInitRank(arfComm_t* comm, const arfCommConfig_t* config);

/* ipc transport bootstrapped from an NCCL communicator the caller already has (one process per
 * GPU, as engines run): rank and world_size are the NCCL communicator's (ncclCommUserRank,
 * ncclCommCount), device is its ncclCommCuDevice; rank 0 draws a fresh id and broadcasts it over
 * `nccl_comm` on `stream` (waited for, bounded by init_timeout_seconds), then every rank proceeds
 * as arfCommInitRank with transport ipc. Collective over the NCCL communicator's ranks. config
 * supplies capacity and timeouts; its transport, rank, world_size, device and id are ignored.
 * nccl_comm is an ncclComm_t (void* keeps nccl.h out of this header), used only during this call;
 * NCCL must be loadable (libnccl.so.2 or $ARF_NCCL_LIBRARY), else arfUnsupported. */
arfStatus_t arfCommInitRankFromNccl(arfComm_t* comm, const arfCommConfig_t* config,
                                    void* nccl_comm, cudaStream_t stream);

/* Convenience for the local transport: creates all `world_size` ranks from one thread (like
 * ncclCommInitAll). devices[r] is rank r's device; config supplies capacity and timeouts (its rank,
 * world_size, device, transport and id are ignored: always the local transport). comms must hold
 * world_size entries. */
arfStatus_t arfCommInitAll(arfComm_t* comms, int world_size, const int* devices,
                           const arfCommConfig_t* config);

/* Collective: every rank calls it (from its own thread for the local transport, or all from one
 * thread in any order). Waits for this rank's outstanding work, then releases its resources once all
 * ranks have called it. comm may be NULL (no-op). Bounded: where the communicator has the nccl
 * algorithm, NCCL is shut down first (its kernels do not bound their waits): a failed communicator
 * aborts it (ncclCommAbort: NCCL kernels still waiting for a peer give up); a healthy one flushes
 * it (ncclCommFinalize) for up to timeout_seconds and aborts it when that runs out, returning
 * arfTimeout (an nccl call in flight whose peer died is then lost). Not concurrently with any other
 * call on comm, arfCommGetAsyncError's watchdog included. */
arfStatus_t arfCommDestroy(arfComm_t comm);

arfStatus_t arfCommGetRank(arfComm_t comm, int* rank);
arfStatus_t arfCommGetWorldSize(arfComm_t comm, int* world_size);

/* Reads the device-side error records of every rank without synchronizing. arfSuccess while
 * healthy; arfTimeout once a bounded wait expired, arfInternal once the per-call integrity check
 * (verify_calls) failed. The message names the rank that waited, the peer, the phase, the CTA and
 * the call index; the communicator is then failed and every later operation returns
 * arfCommFailed. Once the communicator has failed for any reason it returns that failure. Safe to
 * call from a thread other than the one issuing calls, concurrently with them (Thread safety,
 * above); the error string is that thread's (arfGetLastErrorString is thread-local). */
arfStatus_t arfCommGetAsyncError(arfComm_t comm);

/* Calls are numbered 0, 1, 2, ... per communicator in the order their collective kernels run on
 * the device: every eager call and every graph replay of a captured call takes the next index,
 * identically on every rank; calls with num_tokens 0 and calls run by the nccl algorithm take
 * none. After an asynchronous error: *call is the index of the first call whose outputs may be
 * lost on some rank; every call before it completed on every rank, and it and every later call
 * (already enqueued or not) must be treated as lost. UINT64_MAX while no error was seen. The
 * figure is final once every rank's streams have drained (every wait is bounded). No
 * synchronization. */
arfStatus_t arfCommGetFirstLostCall(arfComm_t comm, uint64_t* call);

/* Zero-copy inputs. *ptr: this rank's input buffer, *bytes = max_tokens * max_hidden * 2: device
 * memory of the workspace, on config->device, that every peer reads in place. A call (either
 * entry point) whose input is exactly *ptr skips copying its input into the workspace where its
 * algorithm copies (oneshot_pull); everything else about the call, its plan and its result bits
 * included, is unchanged, and ranks may differ in whether they use it. Write the input there
 * (e.g. as a GEMM's output) in stream order before the call. Contract, checked before launch
 * (arfInvalidArgument): an input overlapping the buffer starts at *ptr and fits in it (so a call
 * over max_tokens, which only the nccl algorithm runs, cannot use it); no other tensor of the
 * call overlaps it, outputs aliasing such an input included (peers read it while the call runs).
 * The buffer is left unchanged by calls whose input is *ptr; a call of this communicator whose
 * input is elsewhere may overwrite it. Valid until arfCommDestroy. No synchronization. */
arfStatus_t arfCommGetInputBuffer(arfComm_t comm, void** ptr, size_t* bytes);

/* Bytes of device memory arfCommInitRank allocates on config->device for this rank's workspace
 * (config's capacity, dtype and world_size; nothing else of it is read): what an engine counts
 * before sizing its KV cache. Ranks sharing a device each allocate this much. Excludes the CUDA
 * context, the kernels' code and NCCL's own buffers (nccl algorithm). Pure: no CUDA call.
 * arfInvalidArgument for a config arfCommInitRank would refuse. */
arfStatus_t arfCommWorkspaceBytes(const arfCommConfig_t* config, size_t* bytes);

typedef struct arfFusedArgs_t {
  size_t struct_size;        /* = sizeof(arfFusedArgs_t); set by arfFusedArgsInit */
  unsigned version;          /* = ARF_API_VERSION */
  arfPattern_t pattern;
  arfAlgorithm_t algorithm;  /* arfAlgoAuto or a forced algorithm */
  arfDataType_t dtype;       /* must equal the communicator's dtype */
  size_t num_tokens;         /* rows, 1 .. max_tokens (0 is a no-op). More than max_tokens runs
                                only on the nccl algorithm (auto or forced nccl; quantized patterns
                                need norm_out), where the communicator has it; else
                                arfInvalidArgument */
  size_t hidden;             /* columns, multiple of 8, 8 .. max_hidden */

  const void* input;         /* [num_tokens, hidden], this rank's partial sums */
  void* allreduce_out;       /* pattern allreduce: [num_tokens, hidden]; may equal input */

  const void* residual_in;   /* residual_rmsnorm: [num_tokens, hidden]; NULL = no residual (the
                                first layer): residual_out = ar */
  void* residual_out;        /* [num_tokens, hidden] = round(round(ar) + residual_in); may equal residual_in */
  void* norm_out;            /* [num_tokens, hidden]; may equal input */
  const void* gamma;         /* [hidden], dtype gamma_dtype */
  arfDataType_t gamma_dtype; /* activation dtype (default) or arfFloat32 */
  int gamma_plus_one;        /* 1: scale by (1 + gamma) (Gemma style); 0: by gamma */
  float eps;                 /* RMSNorm epsilon (default 1e-6): finite and > 0 (any positive
                                float), else arfInvalidArgument before launch: with 0 an all-zero
                                row's norm would be NaN and a row whose mean of squares underflows
                                +-Inf. Not read by pattern allreduce. */

  /* Quantized patterns (ARF_API_VERSION >= 2). */
  void* quant_out;               /* e4m3 [T,H] or packed e2m1 [T,H/2] */
  void* scale_out;               /* per pattern; arfScaleBufferBytes long */
  const float* scale_in;         /* device pointer: FP8 per-tensor dequant scale (x ~ q * s), or the
                                    NVFP4 global scale; read by the kernel, so graph replays see
                                    updates */
  arfScaleLayout_t scale_layout; /* default row-major */
  arfScaleFormat_t scale_format; /* FP8 per-group only; default fp32 */
  arfFallbackLevel_t fallback;   /* default auto */

  /* API version 4. */
  arfNormRounding_t norm_rounding; /* default arfNormRoundOnce */

  /* API version 5. Version 1-4 callers (struct_size without it) get arfFp8ScaleDivide. */
  arfFp8ScaleRule_t scale_rule;    /* fp8 per-token / per-group only; default arfFp8ScaleDivide */

  /* API version 6. Sandwich (post-norm) calls, the end of a Gemma 2/3 or OLMo 2 attention or MLP
   * block, where the all-reduced value is normalised before it joins the residual stream:
   *   h = round(RMSNorm(ar) * post_gamma)   (not written anywhere)
   *   residual_out = round(h + residual_in) (= h when residual_in is NULL)
   *   norm_out = RMSNorm(residual_out) * gamma, then quantized for the quantized patterns
   * in one call (Numerics, above). post_gamma: [hidden] device memory of gamma_dtype, read with
   * the same gamma_plus_one, eps and norm_rounding as gamma (Gemma's and OLMo 2's norms of a layer
   * share them), 16-byte aligned, overlapping no output. Every algorithm and fallback level runs
   * it (arfPlan's reason says "sandwich"). NULL (default; version 1-5 callers): the residual adds
   * to the sum itself. Pattern allreduce takes NULL only (arfInvalidArgument). Not offered yet:
   * until its GPU tests have passed on a release, a call with post_gamma set is refused with
   * arfUnsupported unless the process sets ARF_EXPERIMENTAL_SANDWICH=1 (testing only; every rank
   * must set it alike, else the calls fail on every rank). Whether it is NULL
   * is part of a call's shape: arfPlanShape and arfPlanFromFacts read that, not the address. */
  const void* post_gamma;
} arfFusedArgs_t;

/* Fills defaults: struct_size/version, pattern residual_rmsnorm, algorithm auto, bf16, eps 1e-6,
 * gamma dtype = activation dtype, all pointers NULL, every enum its default (row-major fp32
 * scales, fallback auto, arfNormRoundOnce, arfFp8ScaleDivide). */
void arfFusedArgsInit(arfFusedArgs_t* args);

typedef struct arfPlan_t {
  arfAlgorithm_t algorithm;       /* what runs (never auto) */
  arfAlgorithm_t inner_allreduce; /* for unfused: the all-reduce kernel's algorithm; else = algorithm */
  int num_kernels;                /* collective and epilogue kernels launched by the call; ranks
                                     sharing a GPU run a one-CTA gate kernel before them as well */
  int grid;                       /* CTAs of the (all-reduce) kernel, identical on every rank */
  int block;                      /* threads per CTA */
  int forced;                     /* 1 when the caller forced the algorithm */
  char reason[128];               /* why this choice, e.g. "auto: 16 KiB/rank <= oneshot limit" */
  int fallback_level;             /* quantized patterns: 1, 2 or 3 (arfFallbackLevel_t); else 1 */
} arfPlan_t;

/* Pure and rank-symmetric: the plan the same call would run. Depends only on the args' shape,
 * pattern, dtype and forced algorithm, and on facts fixed at init (world size, capacity, the
 * smallest device among ranks). Validates like the call itself; no launch, no synchronization,
 * graph-capture safe. */
arfStatus_t arfPlan(arfComm_t comm, const arfFusedArgs_t* args, arfPlan_t* plan);

/* arfPlan for a shape alone: the pointers of args are ignored, but for whether post_gamma is NULL
 * (a sandwich call; any non-NULL value will do) (graph compilers decide before any
 * tensor exists). Every other field is validated as arfPlan does, against the same communicator
 * facts and tuning table, so it is identical on every rank and equal to arfPlan's plan. */
arfStatus_t arfPlanShape(arfComm_t comm, const arfFusedArgs_t* args, arfPlan_t* plan);

/* The facts a plan depends on, fixed at communicator creation and identical on every rank. */
typedef struct arfPlanFacts_t {
  size_t struct_size;        /* = sizeof(arfPlanFacts_t); set by arfPlanFactsInit */
  unsigned version;          /* = ARF_API_VERSION */
  int world_size;            /* 1, 2, 4 or 8 */
  arfDataType_t dtype;
  size_t max_tokens;
  size_t max_hidden;
  size_t oneshot_max_tokens; /* 0 = max_tokens */
  int sm_count;              /* smallest multiprocessor count among the ranks' devices */
  int ranks_per_device;      /* >1 when ranks share a GPU (virtual ranks) */
  int nccl;                  /* 1 when the communicator has the nccl algorithm */
  int max_ctas;              /* API version 6: arfCommConfig_t's (0: no bound). It sits in what
                                was the version 4-5 struct's tail padding, so their facts (the same
                                size) plan with 0, whatever the padding holds */
} arfPlanFacts_t;

/* Defaults: one rank, bf16, max_tokens 1024, max_hidden 8192, 132 SMs, one rank per device, no
 * CTA bound. */
void arfPlanFactsInit(arfPlanFacts_t* facts);
/* The facts of a communicator. */
arfStatus_t arfCommGetPlanFacts(arfComm_t comm, arfPlanFacts_t* facts);
/* The plan a communicator with these facts (and no tuning table) would make for args' shape;
 * pointers ignored, as arfPlanShape. No GPU needed. */
arfStatus_t arfPlanFromFacts(const arfPlanFacts_t* facts, const arfFusedArgs_t* args,
                             arfPlan_t* plan);

/* Stream-ordered fused all-reduce (+ residual + RMSNorm). Pointers are device pointers on the
 * communicator's device, 16-byte aligned, contiguous row-major. Aliasing: allreduce_out may equal
 * input; residual_out may equal residual_in; norm_out may equal input. Any other overlap is an
 * error. Graph-capture safe. Outputs on all ranks are bitwise identical; residual_out is bitwise
 * equal to the unfused path. */
arfStatus_t arfFusedAllReduce(arfComm_t comm, const arfFusedArgs_t* args, cudaStream_t stream);

/* out = sum over ranks of in, count elements (multiple of 8, <= max_tokens * max_hidden, or any
 * count on the nccl algorithm where the communicator has it) of dtype.
 * out may equal in. Same contracts as arfFusedAllReduce (algorithm auto). */
arfStatus_t arfAllReduce(arfComm_t comm, const void* in, void* out, size_t count,
                         arfDataType_t dtype, cudaStream_t stream);

/* Bytes the scale_out buffer of a quantized pattern needs for num_tokens x hidden, padding included.
 * 0 for per-tensor FP8 and unquantized patterns, for an unsupported pattern/layout/format
 * combination, and for a hidden size the pattern cannot take (not a multiple of its block). */
size_t arfScaleBufferBytes(arfPattern_t pattern, arfScaleLayout_t layout, arfScaleFormat_t format,
                           size_t num_tokens, size_t hidden);

/* Element types of the quantized outputs (arfQuantOutputLayout). */
typedef enum arfElementType_t {
  arfElementFloat32 = 0,    /* fp32 scales */
  arfElementFloat8E4M3 = 1, /* e4m3: FP8 values, NVFP4 scales */
  arfElementUInt8 = 2       /* bytes: packed e2m1 pairs (FP4 values), UE8M0 scale codes */
} arfElementType_t;

/* One output buffer of a quantized pattern: a row-major array of `rank` (1 or 2) dimensions of
 * `element`. dims[] holds the sizes for the num_tokens asked; every dimension is the same function
 * of the token count T for any T, dims[i] = tokens_scale[i] * round_up(T, tokens_align[i]) +
 * fixed[i] (tokens_scale 0: independent of T), for callers that shape a buffer before T is known
 * (a graph compiler's symbolic shapes). Entries past rank are 0. */
typedef struct arfQuantBuffer_t {
  arfElementType_t element;
  int rank;
  size_t element_bytes;   /* 4 (fp32) or 1 */
  size_t dims[2];
  size_t bytes;           /* dims multiplied, times element_bytes */
  size_t tokens_align[2]; /* >= 1 */
  size_t tokens_scale[2];
  size_t fixed[2];
} arfQuantBuffer_t;

typedef struct arfQuantOutputs_t {
  arfQuantBuffer_t quant_out;
  arfQuantBuffer_t scale_out;
} arfQuantOutputs_t;

/* The layout of quant_out and scale_out of a quantized pattern for num_tokens x hidden: what a
 * caller allocates. quant_out: e4m3 [T, H] (FP8) or packed e2m1 [T, H/2] (bytes, even element in
 * the low nibble). scale_out (scale_out.bytes == arfScaleBufferBytes, padding included):
 *   fp8 per-tensor  fp32 [0] (rank 1: nothing is written; the scale is scale_in)
 *   fp8 per-token   fp32 [T, 1]
 *   fp8 per-group   row-major [T, H/128] (fp32, or bytes for UE8M0 packed); MN-major fp32
 *                   [H/128, round_up(T,4)], MN-major UE8M0 packed bytes [ceil(H/512), 4*round_up(T,4)]
 *                   (4 codes per 32-bit word along K, little-endian)
 *   nvfp4           e4m3 [T, H/16] (row-major) or [round_up(T,128), round_up(H/16,4)] (128x4
 *                   swizzled)
 *   mxfp4           UE8M0 bytes [T, H/32] or [round_up(T,128), round_up(H/32,4)]
 * arfInvalidArgument (saying why) for a pattern that does not quantize, a layout or format the
 * pattern does not take, or a hidden size it cannot (0, or not a multiple of its block); the
 * other limits of a call (hidden % 8, capacity) are the call's to check. Pure: no GPU. */
arfStatus_t arfQuantOutputLayout(arfPattern_t pattern, arfScaleLayout_t layout,
                                 arfScaleFormat_t format, size_t num_tokens, size_t hidden,
                                 arfQuantOutputs_t* outputs);

const char* arfGetStatusString(arfStatus_t status);
/* Detail of the last failure on the calling thread ("" if none). */
const char* arfGetLastErrorString(void);
const char* arfAlgorithmName(arfAlgorithm_t algorithm);
/* Parses an algorithm name ("auto", "oneshot_lamport", ...); arfInvalidArgument if unknown. */
arfStatus_t arfAlgorithmFromName(const char* name, arfAlgorithm_t* algorithm);
const char* arfPatternName(arfPattern_t pattern);

/* For language bindings that mirror the public structs: *value is the size of a struct
 * ("arfFusedArgs_t"), the byte offset of a field ("arfFusedArgs_t.eps") or the value of an enum
 * constant ("arfPatternResidualRmsNorm", "ARF_API_VERSION"), so a mirror is checked against the
 * library it loaded instead of trusted. arfInvalidArgument for an unknown name. */
arfStatus_t arfAbiQuery(const char* name, int64_t* value);
/* Every name arfAbiQuery answers, one per line (static storage). */
const char* arfAbiNames(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ARFUSION_ARFUSION_H_ */
