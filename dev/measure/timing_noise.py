"""The noise rule the world-1 comparisons share (compare_world1.py, compare_world1_quant.py):
arfusion at least as fast as torch.compile means a median no slower, or a slower median whose
fastest repeat still beats torch's slowest (the repeats' ranges overlap: the difference is within
the run's measured noise). Without repeats on both sides the noise is unknown and only a median
no slower passes."""


def span(samples):
    """(fastest, slowest) of repeated timed regions, or None with fewer than two."""
    samples = [v for v in (samples or []) if v is not None]
    return (min(samples), max(samples)) if len(samples) >= 2 else None


def speed_verdict(arf_us, torch_us, arf_range, torch_range):
    """faster | within noise | slower | unmeasured."""
    if arf_us is None or torch_us is None:
        return "unmeasured"
    if arf_us <= torch_us:
        return "faster"
    if arf_range and torch_range and arf_range[0] <= torch_range[1]:
        return "within noise"
    return "slower"


def fmt_range(r):
    return "-" if not r else f"{r[0]:.2f}..{r[1]:.2f}"
