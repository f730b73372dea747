"""The sandwich form of AllReduceFusionPass (arfusion.torch.compile, post_norm="sandwich"): a
first-layer match whose norm output joins the residual stream and is normalized again (Gemma 2/3's
post-attention / post-feedforward norm, the residual add, the next pre-norm) becomes one call with
post_weight (arfFusedArgs_t::post_gamma):

    h = round(RMSNorm(all_reduce(x)) * post_weight)     (the first norm; not an output)
    residual_out = round(h + residual)                  (the residual add)
    norm_out = RMSNorm(residual_out) * weight           (the second norm, then any FP8 tail)

which is the unfused graph's rounding, step for step, provided h is read by the add alone (the
fused op never writes h), the all-reduce by the first norm alone (the fused op returns the
residual sum, not the bare all-reduce), and both norms share eps, gamma_plus_one, rounding and
the weights' dtype (the library reads both with one set). Each condition that fails is a NoMatch
naming it; the pass then fuses the site as the first-layer call it already is.
"""

from __future__ import annotations

import dataclasses

from ._graph import NoMatch, describe, dtype
from ._match import Site, _residual_adds, match_norm


def _chain(start, end) -> set:
    """The nodes on some path from start to end (both excluded): end's ancestors that depend on
    start."""
    up, todo = set(), [end]
    while todo:
        n = todo.pop()
        for a in n.all_input_nodes:
            if a is not start and a not in up:
                up.add(a)
                todo.append(a)
    down, todo = set(), [start]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in up and u not in down:
                down.add(u)
                todo.append(u)
    return down


def _read_only_by(node, allowed, what: str) -> None:
    others = [u for u in node.users if u not in allowed]
    if others:
        raise NoMatch(f"{what} is read by {', '.join(describe(u) for u in others)} too: the "
                      "sandwich call does not return it")


def sandwich_site(site: Site, ar_val, hidden: int, act, order: dict) -> Site:
    """The sandwich call for a first-layer site marked post_norm="sandwich": site.norm becomes the
    post-norm (Site.post), the add after it the residual add, the norm after that the site's norm.
    NoMatch naming the condition that fails."""
    post = site.norm
    if site.form != "first_layer" or site.post_norm != "sandwich" or post.out is None:
        raise NoMatch("not a sandwich site")
    adds = _residual_adds(post.out, ar_val, act, site.shape, order)
    if len(adds) != 1:
        raise NoMatch("no single residual add after the post-norm")
    add, residual = adds[0]
    # nothing outside the first norm may read the all-reduce, its views or the norm's steps
    internal = _chain(site.y, post.out)
    path = [ar_val] + list(site.views)
    for a, b in zip(path, path[1:]):
        _read_only_by(a, {b}, f"the all-reduce value {describe(a)}")
    _read_only_by(site.y, internal | {post.out}, "the all-reduce value")
    for n in internal:
        _read_only_by(n, internal | {post.out}, f"the post-norm's step {describe(n)}")
    _read_only_by(post.out, {add}, f"the post-norm's output {describe(post.out)}")
    norm = match_norm(add, hidden, act)
    if norm.out is None:
        raise NoMatch(f"the norm after the residual add is read unrounded in fp32 (by "
                      f"{norm.unrounded_reader})")
    differ = [f"{k} {getattr(post, k)!r} vs {getattr(norm, k)!r}"
              for k in ("eps", "gamma_plus_one", "rounding") if getattr(post, k) != getattr(norm, k)]
    post_wdt = dtype(post.weight) if post.weight is not None else act
    norm_wdt = dtype(norm.weight) if norm.weight is not None else act
    if post_wdt != norm_wdt:
        differ.append(f"weight dtype {post_wdt} vs {norm_wdt}")
    if differ:
        raise NoMatch("the two norms differ (" + "; ".join(differ) + "): the library reads both "
                      "with one eps, gamma_plus_one, rounding and weight dtype")
    return dataclasses.replace(site, norm=norm, residual=residual, y=add, form="sandwich",
                               post_norm=None, post=post)


__all__ = ["sandwich_site"]
