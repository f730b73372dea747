"""What AllReduceFusionPass did (arfusion.torch.compile): counts per graph and cumulated, the outcome
of every all-reduce site (fused, left with its reason, already fused), and the summary the pass
logs."""

from __future__ import annotations

import collections
import dataclasses


@dataclasses.dataclass
class FusionStats:
    """``rejected`` holds (node name, reason) for every all-reduce site left alone; ``prefused``
    (node name, op) for ops that already fuse an all-reduce; ``notes`` remarks on replaced sites
    (a quantization tail that stayed unfused, a post-norm site); ``sites`` one (node name, op,
    outcome) per all-reduce site in graph order, the outcome "fused <kind>", "left: <reason>" or
    "already fused"; ``graphs_without_all_reduce`` the graphs in which the pass found none."""

    graphs: int = 0
    graphs_without_all_reduce: int = 0
    all_reduces: int = 0
    matched: int = 0
    replaced: int = 0
    kinds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rejected: list = dataclasses.field(default_factory=list)
    prefused: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    sites: list = dataclasses.field(default_factory=list)

    def merge(self, other: "FusionStats") -> None:
        self.graphs += other.graphs
        self.graphs_without_all_reduce += other.graphs_without_all_reduce
        self.all_reduces += other.all_reduces
        self.matched += other.matched
        self.replaced += other.replaced
        self.kinds.update(other.kinds)
        self.rejected.extend(other.rejected)
        self.prefused.extend(other.prefused)
        self.notes.extend(other.notes)
        self.sites.extend(other.sites)

    def summary(self) -> str:
        lines = [f"arfusion pass: {self.graphs} graph(s), {self.all_reduces} all-reduce(s), "
                 f"{self.matched} matched, {self.replaced} replaced"]
        if self.graphs_without_all_reduce:
            lines.append(f"  {self.graphs_without_all_reduce} graph(s) without any all-reduce")
        for kind, n in sorted(self.kinds.items()):
            lines.append(f"  replaced {n} x {kind}")
        for node, op in self.prefused:
            lines.append(f"  already fused: {node}: {op}")
        for node, reason in self.rejected:
            lines.append(f"  not replaced: {node}: {reason}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.graphs == 0:
            lines.append("  note: the pass has not run in this process: nothing compiled yet, or every "
                         "graph came from Inductor's FX graph cache (a cached graph is the one the pass "
                         "produced when it was compiled; the pass is not run again and counts nothing)")
        return "\n".join(lines)
