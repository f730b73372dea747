#!/usr/bin/env python3
"""torch.compile baseline for arfusion's world-1 quantized epilogues (`arfusion-bench --op quant
--nranks 1`, whose target is "at least as fast as torch.compile of the same function").

Per quant pattern, ONE function is compiled: the residual add and RMSNorm of torch_baseline.py
(same bf16 rounding: residual_out = bf16(x + residual), norm = bf16(RMSNorm(residual_out) * gamma))
followed by the quantization of the bf16 norm value, with the output contracts of
include/arfusion/arfusion.h and src/common/quant_formats.h (scale layout row-major, fp32 per-group
scales: the arfusion variants fp8_tensor, fp8_token, fp8_group/row/fp32, nvfp4/row, mxfp4/row):

  fp8_tensor  quant e4m3 [T,H] = sat(norm / scale_in)                       scale_in: fp32 scalar
  fp8_token   scale fp32 [T] = max(amax_row / 448, 2^-9/448); quant e4m3 = sat(norm / scale)
  fp8_group   the same per 1x128 group: scale fp32 [T, H/128] (row-major)
  nvfp4       per 16: sf = e4m3((amax / 6) * gs), mult = gs / sf (0 if sf is 0), q = e2m1(x * mult);
              quant uint8 [T, H/2] (even element in the low nibble), scales e4m3 [T, H/16]
  mxfp4       per 32: e = clamp(floor(log2 amax) - 2 + 127) (UE8M0), q = e2m1(x * 2^(127 - e));
              quant uint8 [T, H/2], scales uint8 [T, H/32]

torch has no e2m1 cast, so the FP4 codes are computed with torch ops: round-to-nearest-even onto the
e2m1 grid by comparisons with the midpoints, the UE8M0 exponent and its power of two by bit casts,
two codes packed per byte. For finite inputs this is the arfusion recipe operation for operation:
run eagerly on the CPU (float8 cast emulated), all five functions matched arfusion's CPU reference
(src/reference/quant_reference.cc) byte for byte, values and scales, on random rows with ties,
zeros, -0, subnormals, infinities and saturating rows. The known deviations (the "fidelity_notes"
in the JSON header) concern NaN inputs and the last bit of a compiled fp32 division; they change no
work, so no pattern is marked "approximation". The run itself reports how far the compiled function
is from the same function run eagerly (quant codes in format steps, scales bitwise).

Shapes: --shapes static (torch.compile dynamic=False: one compile and autotune per token count,
as torch_baseline.py does; the strongest baseline, and the slowest to compile) or --shapes dynamic
(the token dimension marked dynamic, as serving engines compile: one compile per pattern, autotuned
at --dynamic-hint tokens, plus dynamo's own specialisation of 1 token).
Timing as torch_baseline.py: `iters` calls captured in one CUDA graph, replayed `replays` times per
repeat, median over repeats of elapsed / calls; inputs rotate among `sets` buffer sets. %copy uses
arfusion-bench's byte count for --op quant (bench/quant_measure.cc quant_bytes_moved: read x,
residual, gamma; write residual_out, quant, scales; no bf16 norm output) over the device-to-device
copy bandwidth measured in this run.
"""
import argparse
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
except ImportError:
    sys.exit("torch_quant_baseline: PyTorch is not installed")
from torch_baseline import (COPY_BYTES, copy_bandwidth_gbps, epilogue, make_inputs,  # noqa: E402
                            raise_recompile_limit, time_graph, token_sweep)

E4M3_MAX = 448.0
E2M1_MAX = 6.0
MIN_FP8_SCALE = 1.0 / (448.0 * 512.0)  # src/common/quant_formats.h kMinFp8Scale
FP8_GROUP = 128
NVFP4_BLOCK = 16
MXFP4_BLOCK = 32
# bench/buffers.h: the scale_in values arfusion-bench passes (static FP8 scale, NVFP4 global scale).
STATIC_SCALE = 1.0 / 64.0
GLOBAL_SCALE = 448.0 * 6.0 / 8.0


# ---- encoders (torch ops only, so torch.compile fuses them) --------------------------------------

def to_e4m3(v):
    """Saturating e4m3 (quant_formats.h encode_e4m3); torch's cast does not saturate: clamp."""
    return v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e2m1_codes(v):
    """4-bit e2m1 codes (int32) of fp32 v, as quant_formats.h encode_e2m1: round to nearest even
    on 0, 0.5, 1, 1.5, 2, 3, 4, 6; above 6 and +-Inf saturate; NaN -> +6 (0x7); zero sign kept.
    Between magnitudes with codes k and k+1 the tie goes to the even code: the midpoint counts
    as above (>=) when k is odd, as below (>) when k is even."""
    a = v.abs()
    i32 = torch.int32
    mag = ((a > 0.25).to(i32) + (a >= 0.75).to(i32) + (a > 1.25).to(i32) + (a >= 1.75).to(i32)
           + (a > 2.5).to(i32) + (a >= 3.5).to(i32) + (a > 5.0).to(i32))
    nan = torch.isnan(v)
    mag = mag.masked_fill(nan, 7)
    sign = ((v.view(i32) < 0) & ~nan).to(i32) << 3  # the sign bit, so -0.0 keeps it
    return mag | sign


def pack_e2m1(codes):
    """[..., 2k] codes -> [..., k] bytes, the even element in the low nibble (pack_fp4_pair)."""
    pairs = codes.unflatten(-1, (-1, 2))
    return (pairs[..., 0] | (pairs[..., 1] << 4)).to(torch.uint8)


def mxfp4_scale_codes(amax):
    """UE8M0 code of each block (quant_formats.h mxfp4_scale_code): biased exponent of amax minus
    2, 0 below 2^-124, 0xFF for an infinite or NaN amax. Exact: integer ops on the fp32 bits."""
    bits = amax.view(torch.int32) & 0x7FFFFFFF
    exp = bits >> 23
    code = torch.where(exp > 2, exp - 2, torch.zeros_like(exp))
    return code.masked_fill(bits >= 0x7F800000, 255)


def ue8m0_reciprocal(code):
    """2^(127 - code) as fp32, exact (bits (254 - code) << 23); NaN for the NaN code."""
    mult = ((254 - code) << 23).view(torch.float32)
    return mult.masked_fill(code == 255, float("nan"))


# ---- the compiled functions: residual + RMSNorm + quant, one per pattern ------------------------
# Signature (x, residual, gamma, scale_in, eps) for all; scale_in is a 0-d fp32 tensor that only
# fp8_tensor (static scale) and nvfp4 (global scale) read. Returns (residual_out, quant[, scales]).

def fp8_tensor(x, residual, gamma, scale_in, eps: float):
    residual_out, norm = epilogue(x, residual, gamma, eps)
    return residual_out, to_e4m3(norm.float() / scale_in)


def fp8_token(x, residual, gamma, scale_in, eps: float):
    residual_out, norm = epilogue(x, residual, gamma, eps)
    n = norm.float()
    scale = torch.clamp(n.abs().amax(dim=-1, keepdim=True) / E4M3_MAX, min=MIN_FP8_SCALE)
    return residual_out, to_e4m3(n / scale), scale.squeeze(-1)


def fp8_group(x, residual, gamma, scale_in, eps: float):
    residual_out, norm = epilogue(x, residual, gamma, eps)
    n = norm.float().unflatten(-1, (-1, FP8_GROUP))
    scale = torch.clamp(n.abs().amax(dim=-1, keepdim=True) / E4M3_MAX, min=MIN_FP8_SCALE)
    return residual_out, to_e4m3(n / scale).flatten(-2), scale.squeeze(-1)


def nvfp4(x, residual, gamma, scale_in, eps: float):
    residual_out, norm = epilogue(x, residual, gamma, eps)
    n = norm.float().unflatten(-1, (-1, NVFP4_BLOCK))
    sf = to_e4m3(n.abs().amax(dim=-1, keepdim=True) / E2M1_MAX * scale_in)
    sf_value = sf.float()
    mult = torch.where(sf_value == 0, torch.zeros_like(sf_value), scale_in / sf_value)
    quant = pack_e2m1(e2m1_codes(n * mult)).flatten(-2)
    return residual_out, quant, sf.squeeze(-1)


def mxfp4(x, residual, gamma, scale_in, eps: float):
    residual_out, norm = epilogue(x, residual, gamma, eps)
    n = norm.float().unflatten(-1, (-1, MXFP4_BLOCK))
    code = mxfp4_scale_codes(n.abs().amax(dim=-1, keepdim=True))
    quant = pack_e2m1(e2m1_codes(n * ue8m0_reciprocal(code))).flatten(-2)
    return residual_out, quant, code.to(torch.uint8).squeeze(-1)


_NAN_NOTE = ("a NaN in a block: torch's amax propagates it, arfusion's ignores NaN elements "
             "(finite inputs: identical)")
_DIV_NOTE = "compiled fp32 division may differ from IEEE div.rn in the last bit"
# name: (function, arfusion-bench label, block the hidden size must be a multiple of, fp4,
#        scale_out bytes per token given hidden (row-major layout), fidelity notes)
PATTERNS = {
    "fp8_tensor": (fp8_tensor, "fp8_tensor", 8, False, lambda h: 0, [_DIV_NOTE]),
    "fp8_token": (fp8_token, "fp8_token", 8, False, lambda h: 4, [_NAN_NOTE, _DIV_NOTE]),
    "fp8_group": (fp8_group, "fp8_group/row/fp32", FP8_GROUP, False, lambda h: 4 * (h // FP8_GROUP),
                  [_NAN_NOTE, _DIV_NOTE]),
    "nvfp4": (nvfp4, "nvfp4/row", NVFP4_BLOCK, True, lambda h: h // NVFP4_BLOCK,
              [_NAN_NOTE, _DIV_NOTE]),
    "mxfp4": (mxfp4, "mxfp4/row", MXFP4_BLOCK, True, lambda h: h // MXFP4_BLOCK, [_NAN_NOTE]),
}


def quant_bytes_moved(pattern, tokens, hidden, elem_bytes=2):
    """arfusion-bench's byte count (bench/quant_measure.cc quant_bytes_moved, context.cc):
    (3 * T * H + H) * elem + quant_out bytes + scale_out bytes (row-major, no padding)."""
    _, _, _, fp4, scale_bytes_per_token, _ = PATTERNS[pattern]
    elems = tokens * hidden
    quant = elems // 2 if fp4 else elems
    return (3 * elems + hidden) * elem_bytes + quant + tokens * scale_bytes_per_token(hidden)


def scale_in_for(pattern, device):
    value = GLOBAL_SCALE if pattern == "nvfp4" else STATIC_SCALE
    return torch.tensor(value, dtype=torch.float32, device=device)


# ---- compiled vs eager check ---------------------------------------------------------------------

def _ordinals(codes, fp4):
    """Signed position of each code on its format's number line (quant_reference e4m3_ordinal /
    e2m1_ordinal): two codes are k steps apart exactly when their ordinals differ by k."""
    c = codes.to(torch.int32)
    if fp4:
        c = torch.stack((c & 0xF, c >> 4), dim=-1)
        mag, neg = c & 0x7, (c & 0x8) != 0
    else:
        mag, neg = c & 0x7F, (c & 0x80) != 0
    return torch.where(neg, -mag, mag)


def _as_bytes(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.contiguous().view(torch.uint8)


def check_compiled(fn, eager_fn, call_args, fp4):
    """The compiled function must compute what the same function computes eagerly: residual_out
    bitwise, quant codes within one step, scales bitwise (reported, not enforced: a dropped
    intermediate rounding moves a norm value by one bf16 ulp, which can move a code or a scale)."""
    got, want = fn(*call_args), eager_fn(*call_args)
    steps = (_ordinals(_as_bytes(got[1]), fp4) - _ordinals(_as_bytes(want[1]), fp4)).abs()
    result = {"residual_out_bitwise_equal_eager": torch.equal(got[0], want[0]),
              "quant_max_steps_vs_eager": int(steps.max().item()),
              "quant_fraction_differing_vs_eager": float((steps != 0).float().mean().item())}
    if len(got) > 2:
        result["scales_fraction_differing_vs_eager"] = float(
            (_as_bytes(got[2]) != _as_bytes(want[2])).float().mean().item())
    return result


# ---- timing ------------------------------------------------------------------------------------

def mark_tokens_dynamic(tensors, tokens, shapes):
    """--shapes dynamic: the token dimension of x and residual is symbolic. One token is never
    marked: dynamo specialises sizes 0 and 1 anyway (and refuses a mark on them)."""
    if shapes != "dynamic" or tokens < 2:
        return
    for t in tensors:
        torch._dynamo.mark_dynamic(t, 0)
        torch._dynamo.mark_static(t, 1)


def call_sets_for(pattern, tokens, hidden, sets, gen, eps, shapes):
    xs, residuals, gamma = make_inputs(tokens, hidden, sets, gen, torch.bfloat16)
    mark_tokens_dynamic(xs + residuals, tokens, shapes)
    scale_in = scale_in_for(pattern, xs[0].device)
    return [(xs[i], residuals[i], gamma, scale_in, eps) for i in range(sets)]


def compile_pattern(pattern, args, hidden, gen):
    fn = PATTERNS[pattern][0]
    if args.shapes == "static":
        return torch.compile(fn, mode=args.mode, dynamic=False), None
    # dynamic=None honours mark_dynamic; compile and autotune at the hint size before the sweep.
    compiled = torch.compile(fn, mode=args.mode)
    call_sets = call_sets_for(pattern, args.dynamic_hint, hidden, 1, gen, args.eps, args.shapes)
    started = time.perf_counter()
    compiled(*call_sets[0])
    torch.cuda.synchronize()
    return compiled, time.perf_counter() - started


# ---- driver ------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--tmin", type=int, default=1)
    p.add_argument("--tmax", type=int, default=4096)
    p.add_argument("--patterns", default=",".join(PATTERNS),
                   help="comma-separated subset of " + ",".join(PATTERNS))
    p.add_argument("--mode", default="max-autotune-no-cudagraphs",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("--shapes", choices=("static", "dynamic"), default="static",
                   help="static: compile per token count (dynamic=False); dynamic: token dim "
                        "marked dynamic, one compile per pattern (plus 1 token)")
    p.add_argument("--dynamic-hint", type=int, default=None,
                   help="--shapes dynamic: token count compiled and autotuned at (default tmax)")
    p.add_argument("-n", "--iters", type=int, default=100, help="calls captured per graph")
    p.add_argument("-G", "--replays", type=int, default=10, help="graph replays per repeat")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    p.add_argument("--sets", type=int, default=4, help="input buffer sets to rotate among")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no new row after this many seconds (header 'stopped' says where)")
    p.add_argument("--json", help="write the rows and a header object here (rewritten after "
                                  "every row, so a run cut short leaves what it measured)")
    args = p.parse_args(argv)
    args.patterns = [name for name in args.patterns.split(",") if name]
    for name in args.patterns:
        if name not in PATTERNS:
            p.error(f"unknown pattern '{name}' (known: {', '.join(PATTERNS)})")
        if args.hidden % PATTERNS[name][2] != 0:
            p.error(f"{name} needs hidden % {PATTERNS[name][2]} == 0; hidden is {args.hidden}")
    if not args.patterns:
        p.error("--patterns: at least one")
    if args.tmin < 1 or args.tmax < args.tmin:
        p.error("need 1 <= tmin <= tmax")
    if args.dynamic_hint is None:
        args.dynamic_hint = args.tmax
    if args.dynamic_hint < 2:
        p.error("--dynamic-hint must be >= 2 (dynamo specialises 1)")
    return args


def header_for(args, prop, copy_gbps):
    return {
        "tool": "torch_quant_baseline.py",
        "date": datetime.datetime.now().astimezone().isoformat(),
        "device": prop.name, "sm_count": prop.multi_processor_count,
        "torch_version": torch.__version__, "compile_mode": args.mode,
        "shapes": args.shapes, "dynamic": args.shapes == "dynamic",
        "dynamic_hint": args.dynamic_hint if args.shapes == "dynamic" else None,
        "hidden": args.hidden, "dtype": "bf16", "eps": args.eps, "iters": args.iters,
        "graph_replays": args.replays, "repeats": args.repeats, "input_sets": args.sets,
        "static_scale": STATIC_SCALE, "global_scale": GLOBAL_SCALE,
        "patterns": {name: {"arfusion_label": PATTERNS[name][1], "approximation": False,
                            "fidelity_notes": PATTERNS[name][5]} for name in args.patterns},
        "copy_bandwidth_gbps": copy_gbps, "copy_bytes": COPY_BYTES,
        "bytes_definition": "arfusion-bench --op quant: (3*T*H + H)*2 + quant bytes + scale bytes",
        "time_definition": "median over repeats of elapsed / (iters * replays), microseconds",
        "git_commit": os.environ.get("ARF_GIT_COMMIT") or None, "command_line": " ".join(sys.argv),
        "stopped": None,
    }


def write_json(path, header, rows):
    if not path:
        return
    with open(path + ".tmp", "w") as f:
        json.dump({"header": header, "rows": rows}, f, indent=2)
        f.write("\n")
    os.replace(path + ".tmp", path)


def over_budget(args, started, header, pattern, tokens):
    if header["stopped"] or args.budget_s is None:
        return bool(header["stopped"])
    if time.perf_counter() - started < args.budget_s:
        return False
    header["stopped"] = f"budget of {args.budget_s:.0f} s spent before {pattern} at {tokens} tokens"
    return True


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_quant_baseline: no CUDA device visible")
    tokens_list = token_sweep(args.tmin, args.tmax)
    raise_recompile_limit(len(tokens_list) + 1)
    prop = torch.cuda.get_device_properties(0)
    copy_gbps = copy_bandwidth_gbps()
    header = header_for(args, prop, copy_gbps)
    shapes_text = ("dynamic=False (one compile per token count)" if args.shapes == "static" else
                   f"token dim dynamic (compiled at {args.dynamic_hint} tokens; 1 specialised)")
    print(f"# torch_quant_baseline: torch {torch.__version__}, torch.compile mode={args.mode}, "
          f"{shapes_text}, device {prop.name} ({prop.multi_processor_count} SMs)")
    print(f"# hidden {args.hidden} bf16, CUDA graph of {args.iters} calls x {args.replays} "
          f"replays, median of {args.repeats} repeats, {args.sets} input sets")
    print(f"# D2D copy bandwidth: {copy_gbps:.1f} GB/s (copy of 1.00 GiB, read + write counted, "
          f"median of 5)")
    print(f"#{'pattern':<11} {'tokens':>7} {'time(us)':>10} {'GB/s':>9} {'%copy':>7} "
          f"{'res_bitwise':>12} {'q_steps':>8} {'q_differ':>9} {'s_differ':>9} {'first(s)':>9}")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1234)
    started_all = time.perf_counter()
    for pattern in args.patterns:
        fn, label, _, fp4, _, _ = PATTERNS[pattern]
        if over_budget(args, started_all, header, pattern, tokens_list[0]):
            break
        compiled, compile_s = compile_pattern(pattern, args, args.hidden, gen)
        if compile_s is not None:
            header.setdefault("dynamic_compile_seconds", {})[pattern] = compile_s
            print(f"# {pattern}: compiled and autotuned at {args.dynamic_hint} tokens in "
                  f"{compile_s:.1f} s", flush=True)
        for tokens in tokens_list:
            if over_budget(args, started_all, header, pattern, tokens):
                break
            call_sets = call_sets_for(pattern, tokens, args.hidden, args.sets, gen, args.eps,
                                      args.shapes)
            first = time.perf_counter()
            check = check_compiled(compiled, fn, call_sets[0], fp4)  # compiles a new shape
            torch.cuda.synchronize()
            first_s = time.perf_counter() - first
            us, samples = time_graph(compiled, call_sets, args)
            moved = quant_bytes_moved(pattern, tokens, args.hidden)
            gbps = moved / us / 1e3
            row = {"pattern": pattern, "arfusion_label": label, "tokens": tokens,
                   "hidden": args.hidden, "time_us": us, "repeats_us": samples,
                   "bytes_moved": moved, "achieved_gbps": gbps,
                   "pct_copy_bandwidth": 100 * gbps / copy_gbps, "approximation": False,
                   "first_call_s": first_s}
            row.update(check)
            rows.append(row)
            s_differ = check.get("scales_fraction_differing_vs_eager")
            print(f" {pattern:<11} {tokens:>7} {us:>10.2f} {gbps:>9.1f} "
                  f"{row['pct_copy_bandwidth']:>7.1f} "
                  f"{str(check['residual_out_bitwise_equal_eager']):>12} "
                  f"{check['quant_max_steps_vs_eager']:>8} "
                  f"{check['quant_fraction_differing_vs_eager']:>9.2g} "
                  f"{'-' if s_differ is None else format(s_differ, '.2g'):>9} {first_s:>9.1f}",
                  flush=True)
            header["wall_seconds"] = time.perf_counter() - started_all
            write_json(args.json, header, rows)
            del call_sets
        torch.cuda.empty_cache()
    header["wall_seconds"] = time.perf_counter() - started_all
    if header["stopped"]:
        print(f"# stopped: {header['stopped']}")
    print(f"# total {header['wall_seconds']:.0f} s (compiles, autotuning, checks and timing)")
    write_json(args.json, header, rows)


if __name__ == "__main__":
    main()
