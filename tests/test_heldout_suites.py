"""unseen-v0, unseen-v1, val-v0 and val-x-v0: held-out cities, the sizes and models the issue names, fixed draws."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hulk_env.cluster import get_cluster
from hulk_env.evaluation import load_suite
from hulk_env.evaluation.search_reference import instance_fingerprint, load_reference
from hulk_env.evaluation.suites import (
    HELDOUT_TIGHTNESS,
    TRAINING_CITIES,
    UNSEEN_CITIES,
    VALIDATION_CITIES,
)
from hulk_env.feasibility import memory_tightness
from hulk_env.hardware import geo
from hulk_env.instance import Instance
from hulk_env.reference import reference_fits


def continents(cities):
    return {geo.get_city(c).continent for c in cities}


def test_the_city_split_is_disjoint_and_spans_every_continent():
    train, val, unseen = set(TRAINING_CITIES), set(VALIDATION_CITIES), set(UNSEEN_CITIES)
    assert not (train & val) and not (train & unseen) and not (val & unseen)
    assert train | val | unseen == set(geo.CITIES)
    everywhere = continents(geo.CITIES)
    for pool in (train, val, unseen):
        assert continents(pool) == everywhere
    # the built-in default cluster (the paper's 12 cities, `make run`'s instance) trains
    assert set(get_cluster("default").regions) <= train


@pytest.fixture(scope="module")
def unseen():
    return load_suite("unseen-v0")


@pytest.fixture(scope="module")
def val():
    return load_suite("val-v0")


def test_unseen_v0_covers_what_the_issue_names(unseen):
    assert len(unseen) == 22
    machines = [i.num_machines for i in unseen]
    assert min(machines) == 8 and max(machines) == 512
    models = {i.workload.name for i in unseen}
    assert {"gpt3-1.3b", "gpt3-175b", "llama-65b"} <= models
    assert {i.data_parallel for i in unseen} == {1, 2, 4}
    tight = [i for i in unseen if HELDOUT_TIGHTNESS[0] <= memory_tightness(i) <= HELDOUT_TIGHTNESS[1]]
    assert len(tight) >= 9
    assert any(i.workload.name == "gpt3-1.3b" and i.data_parallel == 4 and i.num_machines == 8 for i in tight)


@pytest.fixture(scope="module")
def val_x():
    return load_suite("val-x-v0")


@pytest.fixture(scope="module")
def unseen_v1():
    return load_suite("unseen-v1")


@pytest.mark.parametrize(
    "suite, cities",
    [("unseen-v0", UNSEEN_CITIES), ("unseen-v1", UNSEEN_CITIES), ("val-v0", VALIDATION_CITIES), ("val-x-v0", VALIDATION_CITIES)],
)
def test_heldout_clusters_use_only_their_cities_and_fit(suite, cities, unseen, unseen_v1, val, val_x):
    instances = {"unseen-v0": unseen, "unseen-v1": unseen_v1, "val-v0": val, "val-x-v0": val_x}[suite]
    for inst in instances:
        assert set(inst.cluster.regions) <= set(cities), inst.instance_id
        assert not set(inst.cluster.regions) & set(TRAINING_CITIES)
        assert reference_fits(inst)
        assert inst.instance_id.startswith(suite + "/")


def test_val_v0_is_smaller_and_disjoint_from_unseen(unseen, val):
    assert len(val) == 12 and max(i.num_machines for i in val) == 256
    assert not {instance_fingerprint(i) for i in val} & {instance_fingerprint(i) for i in unseen}


def test_val_x_v0_has_unseen_v0s_cases_on_other_clusters(unseen, val_x):
    """Validation at the reported suite's sizes: the same (machines, model, replicas) cases,
    other cities, no shared instance with unseen-v0 or val-v0."""
    assert [(i.num_machines, i.workload.name, i.data_parallel) for i in val_x] == [
        (i.num_machines, i.workload.name, i.data_parallel) for i in unseen
    ]
    assert not {instance_fingerprint(i) for i in val_x} & {instance_fingerprint(i) for i in unseen}


def test_unseen_v1_is_a_fresh_draw_of_unseen_v0s_cases(unseen, unseen_v1, val_x):
    """The second test draw: the same cases over the same unseen cities, other clusters, with a
    shipped search reference (so ``hulk bench agent --suite unseen-v1`` runs in minutes)."""
    assert [(i.num_machines, i.workload.name, i.data_parallel) for i in unseen_v1] == [
        (i.num_machines, i.workload.name, i.data_parallel) for i in unseen
    ]
    prints = {instance_fingerprint(i) for i in unseen_v1}
    assert len(prints) == 22 and not prints & {instance_fingerprint(i) for i in unseen + val_x}
    assert sorted(load_reference("unseen-v1", instances=unseen_v1)) == sorted(i.instance_id for i in unseen_v1)


def test_heldout_suites_never_drift(unseen):
    again = load_suite("unseen-v0")
    assert [instance_fingerprint(i) for i in again] == [instance_fingerprint(i) for i in unseen]


def test_the_shipped_search_reference_matches_the_suite(unseen):
    """The cached reference must load wherever the package runs (``hulk bench agent`` reads it)."""
    refs = load_reference("unseen-v0", instances=unseen)
    assert sorted(refs) == sorted(i.instance_id for i in unseen)


def test_fingerprints_ignore_last_bit_noise_but_not_changes(unseen):
    """Another CPU's math library may round a generated number differently in its last bit:
    the same instance. A change of one number by 1e-4 is another instance."""
    inst = unseen[3]
    c = inst.cluster
    noisy = dataclasses.replace(c, bandwidth_bps=np.nextafter(c.bandwidth_bps, np.inf))
    assert instance_fingerprint(Instance(noisy, inst.workload, inst.instance_id)) == instance_fingerprint(inst)
    changed = c.bandwidth_bps.copy()
    changed[0, 1] *= 1 + 1e-4
    changed[1, 0] = changed[0, 1]
    other = dataclasses.replace(c, bandwidth_bps=changed)
    assert instance_fingerprint(Instance(other, inst.workload, inst.instance_id)) != instance_fingerprint(inst)


def test_val_xl_v0_is_three_more_draws_of_val_x_v0s_cases(unseen, val_x):
    """The larger validation pool: unseen-v0's cases three times over, on other clusters of the
    validation cities (none of val-x-v0's or unseen-v0's), each fitting."""
    pool = load_suite("val-xl-v0")
    assert [(i.num_machines, i.workload.name, i.data_parallel) for i in pool] == 3 * [
        (i.num_machines, i.workload.name, i.data_parallel) for i in val_x
    ]
    assert [i.instance_id for i in pool] == [f"val-xl-v0/{k}" for k in range(66)]
    for inst in pool:
        assert set(inst.cluster.regions) <= set(VALIDATION_CITIES) and reference_fits(inst)
    prints = [instance_fingerprint(i) for i in pool]
    assert len(set(prints)) == 66
    assert not set(prints) & {instance_fingerprint(i) for i in val_x + unseen}


def test_one_instance_is_the_suites_own(unseen, val_x):
    """suite_instance draws one held-out instance alone (tests use it instead of a whole suite):
    the same instance as the suite's, id included; other suites index the suite; bad index says so."""
    from hulk_env.errors import HulkInputError
    from hulk_env.evaluation import suite_instance

    for suite, pool in (("unseen-v0", unseen), ("val-x-v0", val_x)):
        for index in (0, 5, len(pool) - 1):
            one = suite_instance(suite, index)
            assert one.instance_id == pool[index].instance_id
            assert instance_fingerprint(one) == instance_fingerprint(pool[index])
    assert instance_fingerprint(suite_instance("tiny-v0", 3)) == instance_fingerprint(load_suite("tiny-v0")[3])
    with pytest.raises(HulkInputError, match="unseen-v0 has 22 instances; index 22 is out of range"):
        suite_instance("unseen-v0", 22)
