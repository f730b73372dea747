"""Graph rewriting of AllReduceFusionPass (arfusion.torch.compile): the fused arfusion op inserted
in place of a matched all-reduce -> (views) -> residual add -> RMSNorm (-> FP8 tail), its outputs
rerouted to the users of the nodes it replaces, and the fake-tensor metadata of every node it adds.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from . import ops as _ops
from ._graph import NoMatch, describe, shape, val

aten = torch.ops.aten


def insert_fused(graph, x, site, quant, comm, algorithm: str) -> None:
    """Inserts the fused op reading x (the all-reduce's input, reshaped to the site's shape when
    views follow the all-reduce), the residual, the norm's weight (a ones tensor when it has none),
    quant's static scale and, for a sandwich site, the post-norm's weight (post_weight) after its
    last input, and reroutes the users of site.y (to residual_out), of the norm and of quant's
    outputs to it. NoMatch when no position keeps the
    graph ordered or no fake mode gives the fused op's metadata (the graph is then unchanged, but
    for inputs moved ahead, which keeps it ordered)."""
    norm, residual, y = site.norm, site.residual, site.y
    xv = val(x)
    act = xv.dtype
    hidden = site.shape[-1]
    shape_nodes = [a for a in (site.shape_arg or []) if isinstance(a, fx.Node)]
    post = site.post  # a sandwich call: the norm before the residual add
    inputs = [x] + shape_nodes + [n for n in (residual, norm.weight,
                                              quant.scale_in if quant else None,
                                              post.weight if post else None)
                                  if isinstance(n, fx.Node)]
    replaced_outputs = [y, norm.out] + ([quant.q, quant.scale_out] if quant else [])
    users = [u for o in replaced_outputs if o is not None for u in o.users]
    mode = _fake_mode([xv])
    if mode is None:
        raise NoMatch("no fake mode to compute the fused op's metadata")
    last_input = _place_inputs_before_users(graph, inputs, users)

    new_nodes = []
    with graph.inserting_after(last_input):
        if site.views:
            # the fused op runs in the shape the residual add sees: the all-reduce's input viewed so
            x_new = graph.call_function(aten.reshape.default, (x, list(site.shape_arg)))
            with mode:
                x_new.meta["val"] = xv.reshape(site.shape)
            new_nodes.append(x_new)
            x = x_new

    def weight_or_ones(weight):
        if weight is not None:
            return weight
        with graph.inserting_after(new_nodes[-1] if new_nodes else last_input):
            ones = graph.call_function(aten.full.default, ([hidden], 1.0),
                                       {"dtype": act, "device": xv.device, "pin_memory": False})
            with mode:
                ones.meta["val"] = torch.empty((hidden,), dtype=act, device=xv.device)
        new_nodes.append(ones)
        return ones

    weight_arg = weight_or_ones(norm.weight)
    post_args = (weight_or_ones(post.weight),) if post else ()
    with graph.inserting_after(new_nodes[-1] if new_nodes else last_input):
        if quant is None:
            target = _ops.op("fused_add_rms_norm_out")
            fargs = (x, residual, weight_arg, norm.eps, comm.name, norm.gamma_plus_one,
                     norm.rounding, algorithm) + post_args
            with_norm = True
        else:
            with_norm = bool(set(norm.out.users) - quant.internal)
            target = _ops.op("fused_add_rms_norm_quant")
            # scale_rule: the dynamic tails' torch arithmetic (_match_quant), so the fused scales
            # are the bits the replaced nodes computed
            fargs = (x, residual, weight_arg, quant.scale_in, norm.eps, comm.name, quant.kind,
                     "row_major", "fp32", with_norm, norm.gamma_plus_one, norm.rounding,
                     algorithm, 0, quant.scale_rule) + post_args
        vals = [val(a) if isinstance(a, fx.Node) else a for a in fargs]
        with mode:
            fused_val = target(*vals)
        fused = graph.call_function(target, fargs)
        fused.meta["val"] = fused_val
        getters = []
        with graph.inserting_after(fused):
            for i in reversed(range(len(fused_val))):
                g = graph.call_function(operator.getitem, (fused, i))
                g.meta["val"] = fused_val[i]
                getters.append(g)
        getters.reverse()

    if quant is None:
        norm_new, res_new = getters
        if norm.out is not None:
            norm.out.replace_all_uses_with(norm_new)
    else:
        q_new, s_new, res_new, norm_new = getters
        _replace_with_view(graph, quant.q, q_new)
        if quant.scale_out is not None:
            _replace_with_view(graph, quant.scale_out, s_new)
        if with_norm:
            for u in list(norm.out.users):
                if u not in quant.internal:
                    u.replace_input_with(norm.out, norm_new)
    y.replace_all_uses_with(res_new)


def _place_inputs_before_users(graph, inputs, users):
    """The node after which the fused op can go: after every input (and after the graph's
    placeholders when an input is one), before every user of the outputs it replaces. An input
    defined after such a user (Inductor's post-grad passes reorder for locality) is moved ahead of
    that user together with every node it depends on that sits after it, provided none of them
    has side effects (collectives, copies, mutations: their order is kept). NoMatch otherwise,
    with the graph unchanged."""
    def last_of_inputs():
        order = {node: i for i, node in enumerate(graph.nodes)}
        last = max(inputs, key=lambda n: order[n])
        if last.op == "placeholder":  # keep the graph's inputs ahead of every computation
            last = [n for n in graph.nodes if n.op == "placeholder"][-1]
        return last, order

    last_input, order = last_of_inputs()
    if not users:
        return last_input
    first_user = min(users, key=lambda u: order[u])
    if order[last_input] < order[first_user]:
        return last_input
    # the nodes the late inputs need that sit at or after the first user
    move, todo = set(), [n for n in inputs if order[n] >= order[first_user]]
    while todo:
        n = todo.pop()
        if n in move or order[n] < order[first_user]:
            continue
        if n.op != "call_function" or n.is_impure() or n in users:
            raise NoMatch(
                f"graph order: the fused op's input {describe(last_input)} is defined after "
                f"{describe(first_user)}, which reads one of its outputs, and depends on "
                f"{describe(n)}, which cannot move ahead of it")
        move.add(n)
        todo.extend(a for a in n.all_input_nodes)
    for n in sorted(move, key=lambda n: order[n]):
        first_user.prepend(n)
    last_input, order = last_of_inputs()
    assert order[last_input] < order[first_user]
    return last_input


def _fake_mode(vals):
    from torch._guards import detect_fake_mode

    return detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])


def _replace_with_view(graph, old: fx.Node, new: fx.Node) -> None:
    """Reroute old's users to new, through a view when the shapes differ (same numel)."""
    old_shape, new_shape = shape(old), shape(new)
    if old_shape == new_shape:
        old.replace_all_uses_with(new)
        return
    with graph.inserting_after(new):
        v = graph.call_function(aten.view.default, (new, list(old_shape)))
        with _fake_mode([val(new)]):
            v.meta["val"] = val(new).view(old_shape)
    old.replace_all_uses_with(v)
