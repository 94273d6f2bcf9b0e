"""Permutation algebra and weight matching on exact constructions."""

from __future__ import annotations

import pytest
import torch

from lmc.config import LmcError
from lmc.models import build
from lmc.perm import (
    PermutationSpec,
    SimilarityMatrices,
    WeightMatchingResult,
    apply_permutation,
    compose_permutations,
    identity_permutation,
    invert_permutation,
    linear_assignment,
    matching_objective,
    random_permutation,
    spec_from_model,
    weight_matching,
)
from lmc.perm.lap import lapx_problem, resolve_solver
from lmc.perm.ops import permute_tensor


def _mlp_spec():
    model = build("mlp", seed=0, input_size=5, width=4, depth=2, num_classes=3)
    return model, spec_from_model(model, torch.zeros(2, 5))


def test_apply_convention_is_w_p_p_prev():
    model, spec = _mlp_spec()
    state = model.state_dict()
    perm = random_permutation(spec, 7)
    out = apply_permutation(spec, perm, state)
    p1, p2 = perm["fc1"], perm["fc2"]
    assert torch.equal(out["fc1.weight"], state["fc1.weight"][p1])  # new unit i = old p[i]
    assert torch.equal(out["fc1.bias"], state["fc1.bias"][p1])
    assert torch.equal(out["fc2.weight"], state["fc2.weight"][p2][:, p1])
    assert torch.equal(out["out.weight"], state["out.weight"][:, p2])
    assert torch.equal(out["out.bias"], state["out.bias"])
    # P W Pprevᵀ with P[i, p[i]] = 1
    P2 = torch.eye(4)[p2]
    P1 = torch.eye(4)[p1]
    assert torch.allclose(out["fc2.weight"], P2 @ state["fc2.weight"] @ P1.T)


def test_apply_returns_new_tensors_and_never_mutates():
    model, spec = _mlp_spec()
    state = model.state_dict()
    before = {k: v.clone() for k, v in state.items()}
    out = apply_permutation(spec, identity_permutation(spec), state)
    assert out is not state
    for k in state:
        assert torch.equal(state[k], before[k])
        assert out[k].data_ptr() != state[k].data_ptr()
    out["out.bias"].add_(1.0)
    assert torch.equal(state["out.bias"], before["out.bias"])


def test_compose_and_invert():
    model, spec = _mlp_spec()
    state = model.state_dict()
    p, q = random_permutation(spec, 1), random_permutation(spec, 2)
    twice = apply_permutation(spec, q, apply_permutation(spec, p, state))
    once = apply_permutation(spec, compose_permutations(p, q), state)
    for k in state:
        assert torch.equal(twice[k], once[k])
    back = apply_permutation(spec, invert_permutation(p), apply_permutation(spec, p, state))
    for k in state:
        assert torch.equal(back[k], state[k])
    ident = compose_permutations(p, invert_permutation(p))
    assert all(torch.equal(v, torch.arange(v.numel())) for v in ident.values())


def test_random_permutation_is_seeded_and_uniform():
    spec = PermutationSpec.from_dict({"w": ("P",)}, {"w": (3,)})
    assert torch.equal(random_permutation(spec, 5)["P"], random_permutation(spec, 5)["P"])
    counts: dict[tuple, int] = {}
    for seed in range(1200):
        key = tuple(random_permutation(spec, seed)["P"].tolist())
        counts[key] = counts.get(key, 0) + 1
    assert len(counts) == 6  # all 3! permutations occur, each about 200 times
    assert min(counts.values()) > 140 and max(counts.values()) < 260


def test_bad_permutations_are_refused():
    model, spec = _mlp_spec()
    state = model.state_dict()
    with pytest.raises(LmcError, match="lacks group"):
        apply_permutation(spec, {"fc1": torch.arange(4)}, state)
    bad = identity_permutation(spec)
    bad["fc1"] = torch.tensor([0, 0, 1, 2])
    with pytest.raises(LmcError, match="not a permutation"):
        apply_permutation(spec, bad, state)


def test_linear_assignment_maximises():
    s = torch.tensor([[1.0, 5.0, 0.0], [4.0, 1.0, 0.0], [0.0, 0.0, 3.0]])
    assert linear_assignment(s).tolist() == [1, 0, 2]


@pytest.mark.parametrize("fraction", [1.0, 0.1])
def test_incremental_similarity_equals_a_fresh_one(fraction):
    model = build("resnet20", seed=0, in_channels=1, width=0.5, norm="layer")
    spec = spec_from_model(model, torch.zeros(2, 1, 8, 8))
    state_a = model.state_dict()
    state_b = build("resnet20", seed=1, in_channels=1, width=0.5, norm="layer").state_dict()
    first, second = random_permutation(spec, 0), random_permutation(spec, 1)
    gen = torch.Generator().manual_seed(0)
    for g, p in second.items():  # move only a fraction of the units the second time
        keep = torch.rand(p.numel(), generator=gen) > fraction
        if keep.any():
            idx = torch.nonzero(~keep).squeeze(1)
            second[g] = first[g].clone()
            second[g][idx] = first[g][idx][torch.randperm(idx.numel(), generator=gen)]
    inc = SimilarityMatrices(spec, state_a, state_b)
    fresh = SimilarityMatrices(spec, state_a, state_b)
    for g in spec.group_sizes:
        inc.update(g, first)
    for g in spec.group_sizes:
        inc.update(g, second)
        fresh.update(g, second)
        assert torch.allclose(inc.matrix(g), fresh.matrix(g), rtol=1e-5, atol=1e-5)


def test_a_partial_similarity_completed_later_equals_a_fresh_one():
    """``within`` leaves out the terms on other groups; a full update then adds just those."""
    model = build("resnet20", seed=0, in_channels=1, width=0.5, norm="layer")
    spec = spec_from_model(model, torch.zeros(2, 1, 8, 8))
    state_a = model.state_dict()
    state_b = build("resnet20", seed=1, in_channels=1, width=0.5, norm="layer").state_dict()
    perm = random_permutation(spec, 3)
    part = SimilarityMatrices(spec, state_a, state_b)
    fresh = SimilarityMatrices(spec, state_a, state_b)
    groups = list(spec.group_sizes)
    for g in groups:
        part.update(g, perm, within={g})
        left_out = [t for t in part.terms[g] if not t.built]
        assert all(any(d != g for d in t.deps) for t in left_out)
        assert all(t.built for t in part.terms[g] if set(t.deps) <= {g})
    assert any(not t.built for g in groups for t in part.terms[g])
    for g in groups:
        assert part.update(g, perm)  # the left-out terms arrive: S changed
        fresh.update(g, perm)
        assert torch.allclose(part.matrix(g), fresh.matrix(g), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name,options,shape", [
    ("mlp", dict(input_size=16, width=24, depth=1), (16,)),
    ("mlp", dict(input_size=16, width=24, depth=3), (16,)),
    ("resnet20", dict(in_channels=1, width=0.5, norm="batch"), (1, 8, 8)),
])  # fmt: skip
def test_the_onepass_start_reuses_its_products_without_changing_the_answer(name, options, shape):
    """``init="onepass"`` continues from the one-pass products: the same descent as starting
    afresh from the one-pass permutation, without solving again a group whose one-pass
    assignment saw its whole similarity (the last layer's; a one-layer MLP's only one)."""
    from lmc.perm import one_pass_matching

    example = torch.zeros(2, *shape)
    model = build(name, seed=1, **options)
    spec = spec_from_model(model, example)
    a, b = model.state_dict(), build(name, seed=2, **options).state_dict()
    reused = weight_matching(spec, a, b, init="onepass", seed=3)
    afresh = weight_matching(spec, a, b, init_perm=one_pass_matching(spec, a, b).perm, seed=3)
    assert all(torch.equal(reused.perm[g], afresh.perm[g]) for g in spec.group_sizes)
    assert reused.objective_after == pytest.approx(afresh.objective_after, rel=1e-9)
    assert reused.passes == afresh.passes and reused.assignments <= afresh.assignments
    if len(spec.group_sizes) == 1:  # its one-pass answer is already optimal: nothing to solve
        assert (reused.assignments, afresh.assignments) == (0, 1)


CASES = [
    ("mlp", dict(input_size=64, width=48, depth=3, norm="batch"), (1, 8, 8)),
    ("mlp", dict(input_size=64, width=48, depth=3, norm="layer"), (1, 8, 8)),
    ("vgg11", dict(in_channels=1, width=0.25, norm="batch"), (1, 8, 8)),
    ("vgg11", dict(in_channels=1, width=0.25, norm="layer"), (1, 8, 8)),
    ("resnet20", dict(in_channels=1, width=1.0, norm="batch"), (1, 8, 8)),
    ("resnet20", dict(in_channels=1, width=1.0, norm="layer"), (1, 8, 8)),
]


@pytest.mark.parametrize(
    "name,options,shape,init",
    [(*case, "identity") for case in CASES] + [(*case, "onepass") for case in CASES[1::2]],
)
def test_weight_matching_recovers_a_known_permutation(name, options, shape, init):
    """From both starts (the one-pass one, the default, also on the other cases in
    test_every_solver_and_option_recovers_a_known_permutation)."""
    model = build(name, seed=11, **options)
    spec = spec_from_model(model, torch.zeros(2, *shape))
    state_a = model.state_dict()
    pi = random_permutation(spec, 3)
    state_b = apply_permutation(spec, pi, state_a)  # B = pi(A)
    info = weight_matching(spec, state_a, state_b, seed=0, init=init)
    assert info.start == init
    assert isinstance(info, WeightMatchingResult)
    perm = info.perm
    expected = invert_permutation(pi)
    for g in spec.group_sizes:
        assert torch.equal(perm[g], expected[g]), g
    recovered = apply_permutation(spec, perm, state_b)
    for k, v in state_a.items():
        assert torch.equal(recovered[k], v), k
        if v.is_floating_point():
            assert torch.equal((v + recovered[k]) / 2, v)  # the merged midpoint is A
    assert info.passes <= 5
    assert info.converged
    assert info.objective_after == pytest.approx(
        matching_objective(spec, state_a, state_a), rel=1e-12
    )
    assert info.objective_per_pass[-1] == pytest.approx(info.objective_after, rel=1e-6)
    assert info.objective_before < info.objective_per_pass[-1]
    if init == "identity":
        assert info.objective_init == info.objective_before
    else:  # the one-pass answer is the start, and the descent never goes below it
        assert info.objective_before < info.objective_init <= info.objective_after + 1e-9


def test_the_default_start_is_the_one_pass_answer_and_init_perm_needs_no_init():
    a = build("mlp", seed=1, input_size=16, width=24, depth=3)
    spec = spec_from_model(a, torch.zeros(2, 16))
    sa = a.state_dict()
    sb = build("mlp", seed=2, input_size=16, width=24, depth=3).state_dict()
    default = weight_matching(spec, sa, sb, seed=2)
    onepass = weight_matching(spec, sa, sb, seed=2, init="onepass")
    identity = weight_matching(spec, sa, sb, seed=2, init="identity")
    assert default.start == "onepass" and identity.start == "identity"
    assert all(torch.equal(default.perm[g], onepass.perm[g]) for g in spec.group_sizes)
    assert default.objective_init == onepass.objective_init > identity.objective_init
    given = weight_matching(spec, sa, sb, seed=2, init_perm=identity.perm)
    assert given.start == "given" and given.passes == 1
    assert given.objective_init == pytest.approx(identity.objective_after, rel=1e-12)


def test_weight_matching_recovers_through_cat_and_flatten(extra_models):
    model = extra_models.ResidualCNN()
    spec = spec_from_model(model, torch.zeros(2, 1, 8, 8))
    state_a = model.state_dict()
    pi = random_permutation(spec, 9)
    state_b = apply_permutation(spec, pi, state_a)
    perm = weight_matching(spec, state_a, state_b).perm
    recovered = apply_permutation(spec, perm, state_b)
    for k, v in state_a.items():
        assert torch.equal(recovered[k], v), k


def test_weight_matching_is_deterministic_and_improves():
    options = dict(in_channels=1, width=0.5, norm="batch")
    a = build("resnet20", seed=1, **options)
    b = build("resnet20", seed=2, **options)
    spec = spec_from_model(a, torch.zeros(2, 1, 8, 8))
    sa, sb = a.state_dict(), b.state_dict()
    info = weight_matching(spec, sa, sb, seed=4)
    p1, p2 = info.perm, weight_matching(spec, sa, sb, seed=4).perm
    assert all(torch.equal(p1[g], p2[g]) for g in p1)
    per_pass = info.objective_per_pass
    assert len(per_pass) == info.passes
    assert all(x <= y + 1e-9 for x, y in zip(per_pass, per_pass[1:]))
    assert per_pass[-1] > info.objective_before
    assert per_pass[-1] == pytest.approx(info.objective_after, rel=1e-6)  # tracked ~ exact
    assert info.converged
    assert info.assignments >= len(spec.group_sizes)  # every group solved at least once
    # tol=0 follows the same steps and goes on until a pass changes nothing
    full = weight_matching(spec, sa, sb, seed=4, tol=0.0)
    assert full.passes >= info.passes
    assert full.objective_per_pass[: info.passes] == pytest.approx(per_pass, rel=1e-12)
    assert full.objective_after >= info.objective_after - 1e-9
    # coordinate-wise optimal: no single group's assignment can raise the objective
    again = weight_matching(spec, sa, sb, seed=5, init_perm=p1)
    assert again.passes == 1
    assert again.objective_after == pytest.approx(info.objective_after, rel=1e-12)
    assert again.objective_init == pytest.approx(info.objective_after, rel=1e-12)
    assert again.objective_before == pytest.approx(info.objective_before, rel=1e-12)
    # a result is not a permutation: passing one where a permutation goes says so
    with pytest.raises(LmcError, match=r"WeightMatchingResult.*\.perm"):
        apply_permutation(spec, info, sb)


def test_parameters_that_require_grad_match_as_their_detached_values():
    """``dict(model.named_parameters())`` (tensors that require grad) gives the same answer and
    objectives as the state dict: matching reads values, it is not differentiated."""
    a = build("mlp", seed=1, input_size=5, width=16, depth=2, num_classes=3)
    b = build("mlp", seed=2, input_size=5, width=16, depth=2, num_classes=3)
    spec = spec_from_model(a, torch.zeros(2, 5))
    grads = weight_matching(spec, dict(a.named_parameters()), dict(b.named_parameters()))
    plain = weight_matching(spec, a.state_dict(), b.state_dict())
    assert all(torch.equal(grads.perm[g], plain.perm[g]) for g in plain.perm)
    assert grads.objective_after == plain.objective_after
    value = matching_objective(
        spec, dict(a.named_parameters()), dict(b.named_parameters()), plain.perm
    )
    assert value == plain.objective_after


def test_the_objective_rounds_each_product_once_whatever_the_matmul_precision():
    """Each float32 product rounded once, summed in float64: the float64 objective to within
    that rounding, and the same number under every ``set_float32_matmul_precision`` (a float32
    matrix product would follow it: bfloat16 on CPUs that have it)."""
    # width 768: the 768² weight goes through _inner's chunks (2¹⁸ values), the rest whole
    a = build("mlp", seed=1, input_size=64, width=768, depth=2, num_classes=3)
    b = build("mlp", seed=2, input_size=64, width=768, depth=2, num_classes=3)
    spec = spec_from_model(a, torch.zeros(2, 64))
    sa, sb = a.state_dict(), b.state_dict()
    perm = random_permutation(spec, seed=3)
    wide_a = {k: v.double() for k, v in sa.items()}
    wide_b = {k: v.double() for k, v in sb.items()}
    exact = matching_objective(spec, wide_a, wide_b, perm)
    # each float32 product is within 2^-24 of its float64 value: the sum within that of Σ|ab|
    bound = 2.0**-24 * matching_objective(
        spec, {k: v.abs() for k, v in wide_a.items()}, {k: v.abs() for k, v in wide_b.items()}, perm
    )
    before = torch.get_float32_matmul_precision()
    try:
        values = []
        for precision in ("highest", "high", "medium"):
            torch.set_float32_matmul_precision(precision)
            values.append(matching_objective(spec, sa, sb, perm))
    finally:
        torch.set_float32_matmul_precision(before)
    assert values[0] == values[1] == values[2]
    assert abs(values[0] - exact) <= bound


def test_permute_tensor_skips_an_axis_whose_group_is_not_given():
    spec = PermutationSpec.from_dict({"w": ("P", "Q")}, {"w": (3, 4)})
    w = torch.randn(3, 4)
    q = torch.tensor([3, 2, 1, 0])
    assert torch.equal(permute_tensor(spec, {"Q": q}, "w", w, skip_axis=0), w[:, q])


def test_a_memory_limit_on_the_similarities_changes_the_work_not_the_answer():
    """similarity_bytes: matrices are released least recently used first and rebuilt at
    their next visit; the descent takes the same steps to the same permutation."""
    options = dict(in_channels=1, width=0.5, norm="batch")
    a, b = build("resnet20", seed=1, **options), build("resnet20", seed=2, **options)
    spec = spec_from_model(a, torch.zeros(2, 1, 8, 8))
    sa, sb = a.state_dict(), b.state_dict()
    free = weight_matching(spec, sa, sb, seed=4)
    sizes = spec.group_sizes
    limit = 2 * max(n * n * 8 for n in sizes.values())
    for bound in (limit, 1):
        held = weight_matching(spec, sa, sb, seed=4, similarity_bytes=bound)
        assert all(torch.equal(free.perm[g], held.perm[g]) for g in sizes), bound
        assert held.objective_after == pytest.approx(free.objective_after, rel=1e-12)
    sim = SimilarityMatrices(spec, sa, sb, max_bytes=limit)
    fresh = SimilarityMatrices(spec, sa, sb)
    perm = random_permutation(spec, 0)
    for _ in range(2):
        for g in sizes:
            sim.update(g, perm)
            fresh.update(g, perm)
            assert torch.allclose(sim.matrix(g), fresh.matrix(g), rtol=1e-6, atol=1e-6)
            assert sim._bytes <= limit
    assert sim.evictions > 0 and fresh.evictions == 0


def test_weight_matching_refuses_mismatched_states():
    model, spec = _mlp_spec()
    other = build("mlp", seed=0, input_size=5, width=6, depth=2, num_classes=3)
    with pytest.raises(LmcError, match="fc1.weight"):
        weight_matching(spec, model.state_dict(), other.state_dict())


OPTIONS = [
    dict(solver="sparse"),
    dict(solver="scipy"),
    dict(solver="lapx"),
    dict(init="identity"),
    dict(restarts=3),
    dict(solver="sparse", init="identity", restarts=2),
    dict(similarity_bytes=1),  # every similarity released between visits
]


@pytest.mark.parametrize(
    "kwargs", OPTIONS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items())
)
@pytest.mark.parametrize("name,options,shape", CASES[::2])
def test_every_solver_and_option_recovers_a_known_permutation(
    name, options, shape, kwargs, monkeypatch
):
    if kwargs.get("solver") == "lapx" and lapx_problem() is not None:
        pytest.skip(f"lapx cannot run here: {lapx_problem()}")
    # the sparse solver normally answers only groups of >= 1024 units: force it on every group
    monkeypatch.setattr("lmc.perm.weight_match._SPARSE_MIN", 1)
    model = build(name, seed=11, **options)
    spec = spec_from_model(model, torch.zeros(2, *shape))
    state_a = model.state_dict()
    pi = random_permutation(spec, 5)
    state_b = apply_permutation(spec, pi, state_a)
    info = weight_matching(spec, state_a, state_b, seed=0, **kwargs)
    expected = invert_permutation(pi)
    for g in spec.group_sizes:
        assert torch.equal(info.perm[g], expected[g]), g
    restarts = kwargs.get("restarts", 1)
    assert len(info.restart_objectives) == restarts == len(info.restart_seconds)
    assert info.solver == resolve_solver(kwargs.get("solver", "auto"))
    assert info.start == kwargs.get("init", "onepass")
    assert info.objective_after == max(info.restart_objectives)


def test_restarts_keep_the_best_visiting_order_and_never_end_lower():
    """Two unrelated random MLPs: each restart r is exactly the single run with seed r, and the
    result is the first of the best of them."""
    a = build("mlp", seed=1, input_size=16, width=24, depth=3).state_dict()
    b = build("mlp", seed=2, input_size=16, width=24, depth=3).state_dict()
    spec = spec_from_model(
        build("mlp", seed=1, input_size=16, width=24, depth=3), torch.zeros(2, 16)
    )
    singles = [weight_matching(spec, a, b, seed=s).objective_after for s in range(4)]
    info = weight_matching(spec, a, b, seed=0, restarts=4)
    assert list(info.restart_objectives) == pytest.approx(singles, rel=1e-12)
    assert info.best_restart == singles.index(max(singles))
    assert info.objective_after == pytest.approx(max(singles), rel=1e-12)
    assert info.objective_after >= singles[0]


def test_onepass_start_is_reported_and_bad_options_are_refused():
    model = build("mlp", seed=1, input_size=16, width=24, depth=2)
    spec = spec_from_model(model, torch.zeros(2, 16))
    a = model.state_dict()
    b = build("mlp", seed=2, input_size=16, width=24, depth=2).state_dict()
    from lmc.perm import one_pass_matching

    start = one_pass_matching(spec, a, b)
    info = weight_matching(spec, a, b, init="onepass")
    assert info.objective_init == pytest.approx(matching_objective(spec, a, b, start.perm))
    assert info.objective_after >= info.objective_init - 1e-9
    for bad, match in (
        (dict(restarts=0), "restarts"),
        (dict(init="random"), "init"),
        (dict(solver="auction"), "solver"),
        (dict(init="onepass", init_perm=start.perm), "not both"),
    ):
        with pytest.raises(LmcError, match=match):
            weight_matching(spec, a, b, **bad)
