"""Moved bytes and migration time of a change of placement, against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from hulk_env import cost
from hulk_env.errors import HulkInputError
from hulk_env.replacement.migration import (
    CHECKPOINT,
    CheckpointStore,
    horizon_totals,
    migration,
    migrations,
    sources,
)
from tests.replacement_cases import GBS, three_region, two_stage


def test_two_stage_lost_layer_comes_from_the_checkpoint() -> None:
    c, w, old, failed = two_stage()
    src = sources(c, w, old, failed)  # default store: one per region, next to A (X's first machine)
    mig = migration(c, src, np.array([[2, 1]]))
    # Layer 0 lived only on A: read from the checkpoint over A's link to C (1 ms, 1 GB/s, under
    # the 10 Gbps = 1.25 GB/s egress): 0.001 + 16e9 / 1e9 = 16.001 s. The store's egress:
    # 0.001 + 16e9 / 1.25e9 = 12.801 s. Layer 1 stays on B: nothing.
    assert mig.moved_bytes == pytest.approx(16e9)
    assert mig.checkpoint_bytes == pytest.approx(16e9)
    assert mig.lost_layers == (0,)
    assert mig.migration_s == pytest.approx(16.001)
    assert mig.transfers == ((0, CHECKPOINT, 2, 16e9),)
    assert {(x.source, x.dest): x.seconds for x in mig.links} == pytest.approx(
        {("checkpoint@X", "m2"): 16.001, ("checkpoint@X", "*"): 12.801}
    )


def test_two_stage_parallel_links_take_the_slowest() -> None:
    c, w, old, failed = two_stage()
    src = sources(c, w, old, failed)
    # Layer 0 -> B from the checkpoint (A's link to B: 0.001 + 16 = 16.001 s), layer 1 -> C from
    # B (0.001 + 32e9 / 2e9 = 16.001 s): in parallel, 16.001 s; 48 GB moved.
    mig = migration(c, src, np.array([[1, 2]]))
    assert mig.moved_bytes == pytest.approx(48e9)
    assert mig.checkpoint_bytes == pytest.approx(16e9)
    assert mig.migration_s == pytest.approx(16.001)
    assert sorted(mig.transfers) == [(0, CHECKPOINT, 1, 16e9), (1, 1, 2, 32e9)]


def test_two_stage_store_in_another_region_and_a_shared_egress() -> None:
    c, w, old, failed = two_stage()
    # A store slower than the links: 0.5 GB/s egress caps each read and is shared by all.
    store = CheckpointStore(region="x", egress_bps=0.5 * GBS)
    src = sources(c, w, old, failed, store)
    mig = migration(c, src, np.array([[2, 1]]))
    # One read of 16 GB at 0.5 GB/s: 0.001 + 32 s on the link and the same on the egress.
    assert mig.migration_s == pytest.approx(32.001)
    with pytest.raises(HulkInputError, match="unknown checkpoint region"):
        sources(c, w, old, failed, CheckpointStore(region="Atlantis"))


def test_three_region_copies_come_from_the_surviving_replica() -> None:
    c, w, old, failed = three_region()
    src = sources(c, w, old, failed)
    # r0 moves to m2 (Y); r1 stays. m2 needs all three layers; layer 0 only on m3, layers 1
    # and 2 on m4. Link m3 -> m2: 0.05 + 16e9 / 0.5e9 = 32.05 s; link m4 -> m2 carries 32 + 48
    # = 80 GB serialised: 0.05 + 80e9 / 2e9 = 40.05 s. In parallel: 40.05 s. Nothing from the
    # checkpoint: every layer survived in r1.
    mig = migration(c, src, np.array([[2, 2, 2], [3, 4, 4]]))
    assert mig.moved_bytes == pytest.approx(96e9)
    assert mig.checkpoint_bytes == 0.0
    assert mig.lost_layers == ()
    assert mig.migration_s == pytest.approx(40.05)
    assert {(x.source, x.dest): x.seconds for x in mig.links} == pytest.approx(
        {("m3", "m2"): 32.05, ("m4", "m2"): 40.05}
    )


def test_three_region_fastest_holder_is_chosen() -> None:
    c, w, _, failed = three_region()
    # Layer 2 held by both m3 and m4: to m2, m4's 2 GB/s link (0.05 + 24 s) beats m3's 0.5 GB/s.
    old = np.array([[0, 0, 3], [3, 4, 4]])
    src = sources(c, w, old, failed)
    mig = migration(c, src, np.array([[3, 3, 2], [3, 4, 4]]))
    # m3 gets layer 1 (from m4: 0.005 + 32 s); m2 gets layer 2 from m4: 0.05 + 48e9 / 2e9.
    assert sorted(mig.transfers) == [(1, 4, 3, 32e9), (2, 4, 2, 48e9)]
    assert mig.migration_s == pytest.approx(32.005)


def test_replica_swap_and_kept_slots_move_nothing() -> None:
    c, w, old, _ = three_region()
    none_failed = np.zeros(5, dtype=bool)
    src = sources(c, w, old, none_failed)
    for new in (old, old[::-1]):
        mig = migration(c, src, new)
        assert mig.moved_bytes == 0.0 and mig.migration_s == 0.0 and mig.links == ()


def test_a_machine_needs_one_copy_however_many_replicas_it_takes() -> None:
    c, w, old, failed = three_region()
    src = sources(c, w, old, failed)
    one = migration(c, src, np.array([[2, 2, 2], [3, 4, 4]]))
    both = migration(c, src, np.array([[2, 2, 2], [2, 2, 2]]))
    assert both.moved_bytes == one.moved_bytes


def test_batch_matches_single_and_horizon_total() -> None:
    c, w, old, failed = three_region()
    src = sources(c, w, old, failed)
    rng = np.random.default_rng(0)
    batch = rng.integers(2, 5, size=(40, 2, 3))
    many = migrations(src, batch)
    for i in range(len(batch)):
        one = migration(c, src, batch[i])
        assert many.migration_s[i] == pytest.approx(one.migration_s)
        assert many.moved_bytes[i] == pytest.approx(one.moved_bytes)
    totals = horizon_totals(c, w, src, batch, 1000)
    expected = many.migration_s + 1000 * cost.iteration_times(c, w, batch).iteration_time_s
    np.testing.assert_allclose(totals.total_s, np.where(totals.memory_feasible, expected, np.inf))


def test_state_on_a_stale_machine_is_not_a_source() -> None:
    c, w, old, failed = two_stage()
    stale = np.array([False, True, False])  # B came back after a failure: its state is gone
    src = sources(c, w, old, failed, stale=stale)
    mig = migration(c, src, np.array([[2, 1]]))
    assert mig.lost_layers == (0, 1)
    assert mig.checkpoint_bytes == pytest.approx(48e9)
