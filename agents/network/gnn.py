"""Graph feature extractor over the ``hulk/Placement-v1`` observation, at any size.

:class:`PlacementGNN` is an SB3 ``BaseFeaturesExtractor`` over the ``Dict`` observation of
:class:`hulk_env.env.PlacementEnvV1` (the sparse layout of ``docs/architecture.md``, "Placement-v1
observation"). It reads three graphs that share the batch axis ``B``:

* the **machine graph** (``M`` machines): each machine attends over its ``K`` listed
  neighbours (its nearest machines and a gateway per nearby region, ``neighbours``), GAT-style
  additive scores plus a per-head term linear in the link features (latency, bandwidth), then
  reads the pooled mean and max of all machines (a global view: ``O(M)``). Memory grows as
  ``B M K H``: the neighbour sums take a dense ``[M, M]`` form only while it is the smaller
  (:func:`neighbour_sums`, up to ~128 machines at the default widths);
* the **layer DAG** (``N`` (replica, layer) slots): mean messages from predecessors and from
  successors along the edge list, scattered with ``index_add`` (``O(B E H)``, no ``[N, N]``
  adjacency);
* the **placement** (slots <-> machines, from ``layer_machine``): each machine sums the
  embeddings of the slots it holds, each placed slot reads its machine's embedding (gathers).

The current slot (``cursor``) gives a context vector (its embedding after the DAG rounds, plus
the global features and :func:`instance_features`: the number of replicas and how much of the
cluster's memory the model needs) that is added to every machine before the machine rounds (so machines
attend with the layer at hand in mind) and that the policy head combines with every machine
embedding. The machines' own features (v1's 15 columns) include the links from the machine of
the slot's predecessor and from the machine of the same layer in the previous replica, the
witness completion's machine and its memory slack; the network adds :func:`share_room` (is
there room for every later replica to copy this one?); with :class:`agents.training.shaping.StayLookahead`
also the one-step lookahead (gain, fits) of every machine, with :class:`agents.decision.plan.PlanHint` the
stage DP's plan for the slot (a machine column and a signal).

Output: one embedding per machine for the per-machine pointer head of :mod:`agents.network.policy`,
the per-machine signals its priors read, and a pooled summary for the critic, flattened as
``[z (M x H) | mask | pred | ring | witness | gain | fits | stay_shared | plan (M each) | summary (G)]``.
:func:`split_features` undoes it and infers ``M`` from the length, so **one network places any
number of machines, layers and replicas**: the weights never depend on the padding.

Everything is a function of the real machines and slots only (padded machines are excluded
from attention and pooling, padded slots have no edges and no machine), and no operation
depends on a machine's index, so relabelling the machines permutes the embeddings the same way
(both tested in ``tests/test_gnn.py``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from agents.decision.plan import PLAN_KEY
from agents.training.shaping import LOOKAHEAD_KEY
from hulk_env.env import GLOBAL_FEATURES, LAYER_FEATURES, LINK_FEATURES, MACHINE_FEATURES_V1
from hulk_env.env.observation import CLIP

_PRED = MACHINE_FEATURES_V1.index("holds_predecessor")
_RING_BW = MACHINE_FEATURES_V1.index("ring_bandwidth")
_WITNESS = MACHINE_FEATURES_V1.index("witness")
_LAYER_DEPTH = LAYER_FEATURES.index("depth")
_LAYER_MEMORY = LAYER_FEATURES.index("memory_rel")
_MACHINE_MEMORY = MACHINE_FEATURES_V1.index("memory_rel")
_FREE_MEMORY = MACHINE_FEATURES_V1.index("free_memory")
_LAYER_REPLICA = LAYER_FEATURES.index("replica")
_MACHINE_DERIVED = 1  # machine columns computed by the network: share_room
_INSTANCE_FEATURES = 2  # read off the observation by instance_features: log2(D) / 3, memory need / memory
_SUM_SCALE = 1.0 / 8  # the link-gated neighbour sum over K_0 = 8 (half the default neighbour list)
_NEG = -1e9  # attention logit of a padded neighbour (finite: no NaN when a row is all padding)
SIGNALS = ("pred", "ring", "witness", "gain", "fits", "stay_shared", "plan")  # per-machine signals for the head's priors


class EdgeList(NamedTuple):
    """The batch's layer DAG as flat slot indices ``b * N + slot`` (the PyG batching convention)."""

    src: torch.Tensor  # [E'] source slots of the real edges
    dst: torch.Tensor  # [E'] destination slots
    inv_in: torch.Tensor  # [B * N, 1] 1 / in-degree (1 where none)
    inv_out: torch.Tensor  # [B * N, 1] 1 / out-degree


def edge_list(edges: torch.Tensor, edge_mask: torch.Tensor, num_slots: int) -> EdgeList:
    """The real edges of every sample, offset by ``b * N``, with the degrees for mean messages."""
    b = edges.shape[0]
    offsets = (torch.arange(b, device=edges.device) * num_slots).view(b, 1)
    keep = edge_mask.reshape(-1)
    src = (edges[..., 0] + offsets).reshape(-1)[keep]
    dst = (edges[..., 1] + offsets).reshape(-1)[keep]
    ones = torch.ones(len(src), device=edges.device)
    zeros = torch.zeros(b * num_slots, device=edges.device)
    inv_in = zeros.index_add(0, dst, ones).clamp(min=1.0).reciprocal().unsqueeze(-1)
    inv_out = zeros.index_add(0, src, ones).clamp(min=1.0).reciprocal().unsqueeze(-1)
    return EdgeList(src, dst, inv_in, inv_out)


class Totals(NamedTuple):
    """Per-instance numbers read off the static features, once per episode on the fast path."""

    replicas: torch.Tensor  # [B] D: real slots at topological position 0 (one per replica)
    need: torch.Tensor  # [B] sum of the slots' memory_rel (state + one stashed micro-batch)
    memory: torch.Tensor  # [B] sum of the real machines' memory_rel


def totals(layer_features: torch.Tensor, layer_mask: torch.Tensor, machine_features: torch.Tensor, machine_mask: torch.Tensor) -> Totals:
    """:class:`Totals` of a batch (the layer and machine columns they read never change in an episode)."""
    lf, real = layer_features, layer_mask
    replicas = (real & (lf[..., _LAYER_DEPTH] < 1e-6)).sum(1).clamp(min=1).float()
    need = (lf[..., _LAYER_MEMORY] * real).sum(1)
    memory = (machine_features[..., _MACHINE_MEMORY] * machine_mask).sum(1).clamp(min=1e-6)
    return Totals(replicas, need, memory)


class Observation(NamedTuple):
    """The observation tensors the network reads (batched; float32 unless noted)."""

    machine_features: torch.Tensor  # [B, M, Fm]
    machine_mask: torch.Tensor  # [B, M] bool
    neighbours: torch.Tensor  # [B, M, K] long (padding clamped to 0, see neighbour_mask)
    neighbour_links: torch.Tensor  # [B, M, K, Fe]
    neighbour_mask: torch.Tensor  # [B, M, K] bool
    layer_features: torch.Tensor  # [B, N, Fl]
    layer_mask: torch.Tensor  # [B, N] bool
    layer_machine: torch.Tensor  # [B, N] long, -1 unplaced / padding
    edges: torch.Tensor  # [B, E, 2] long
    edge_mask: torch.Tensor  # [B, E] bool
    cursor: torch.Tensor  # [B] long
    globals_: torch.Tensor  # [B, G]
    lookahead: torch.Tensor | None  # [B, M, 2] (agents.training.shaping: gain, fits), when the env adds it
    plan: torch.Tensor | None  # [B, M] (agents.decision.plan: 1 at the DP plan's machine for the slot), when the env adds it
    dag: EdgeList  # the layer DAG as flat slot indices (from edges, edge_mask)
    totals: Totals  # per-instance sums (from the static features)


class MachineEmbeddings(NamedTuple):
    """What the extractor hands the policy head (flattened in between, as SB3 requires).

    Attributes:
        z: ``[B, M, H]`` machine embeddings (0 for padded machines).
        mask: ``[B, M]`` bool, real machines.
        signals: ``[B, 7, M]`` per-machine signals :data:`SIGNALS`: holds the slot's
            predecessor; holds the same layer in the previous replica; is the witness's
            machine; lookahead gain; lookahead fits (both 0 without the lookahead); holds the
            predecessor and staying leaves room for the later replicas (:func:`share_room`);
            is the DP plan's machine (0 without the plan).
        summary: ``[B, G]`` masked mean and max of ``z``, the current slot's context, globals.
    """

    z: torch.Tensor
    mask: torch.Tensor
    signals: torch.Tensor
    summary: torch.Tensor


def read_observation(obs: dict[str, torch.Tensor], static: Observation | None = None) -> Observation:
    """Typed, correctly-dtyped views of SB3's preprocessed (float) observation dict.

    ``static``: an earlier observation of the same episode and batch size, whose per-instance
    parts (masks, neighbour lists, layer graph) are reused instead of converted again -- the
    per-step fast path of :mod:`agents.decision.inference`.
    """
    n = obs["layer_features"].shape[1]
    if static is None:
        edges, edge_mask = obs["edges"].round().long(), obs["edge_mask"] > 0.5
        machine_mask, layer_mask = obs["machine_mask"] > 0.5, obs["layer_mask"] > 0.5
        static = Observation(
            machine_features=None, machine_mask=machine_mask,
            neighbours=obs["neighbours"].round().long().clamp(min=0), neighbour_links=obs["neighbour_links"],
            neighbour_mask=obs["neighbour_mask"] > 0.5, layer_features=None, layer_mask=layer_mask,
            layer_machine=None, edges=edges, edge_mask=edge_mask, cursor=None, globals_=None, lookahead=None, plan=None,
            dag=edge_list(edges, edge_mask, n),
            totals=totals(obs["layer_features"], layer_mask, obs["machine_features"], machine_mask),
        )  # fmt: skip
    return static._replace(
        machine_features=obs["machine_features"],
        layer_features=obs["layer_features"],
        layer_machine=obs["layer_machine"].round().long(),
        cursor=obs["cursor"].reshape(-1).round().long().clamp(0, max(n - 1, 0)),
        globals_=obs["globals"],
        lookahead=obs.get(LOOKAHEAD_KEY),
        plan=obs.get(PLAN_KEY),
    )


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x [B, M, H]`` at ``index [B, M, K]`` (rows of the same sample) -> ``[B, M, K, H]``."""
    b, m, h = x.shape
    k = index.shape[-1]
    flat = (index + (torch.arange(b, device=index.device) * m).view(b, 1, 1)).reshape(-1)
    return x.reshape(b * m, h).index_select(0, flat).view(b, m, k, h)  # 4-5x faster than gather on CPU


class Assignment(NamedTuple):
    """Which machine holds each placed slot, as flat indices (``b * N + slot``, ``b * M + machine``)."""

    slots: torch.Tensor
    machines: torch.Tensor


def assignment(layer_machine: torch.Tensor, num_machines: int) -> Assignment:
    """The placed slots of a batch and their machines (unplaced and padded slots left out)."""
    b, n = layer_machine.shape
    placed = (layer_machine >= 0).reshape(-1)
    slots = torch.arange(b * n, device=layer_machine.device)[placed]
    machines = (layer_machine.clamp(min=0) + (torch.arange(b, device=layer_machine.device) * num_machines).view(b, 1))
    return Assignment(slots, machines.reshape(-1)[placed])


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x [B, K, H]`` over the rows where ``mask [B, K]`` is set (0 if none)."""
    w = mask.float().unsqueeze(-1)
    return (x * w).sum(1) / w.sum(1).clamp(min=1.0)


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max of ``x [B, K, H]`` over the rows where ``mask [B, K]`` is set (0 if none)."""
    out = x.masked_fill(~mask.unsqueeze(-1), -torch.inf).amax(1)
    return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


def mlp(sizes: tuple[int, ...]) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class NeighbourAttention(nn.Module):
    """One round of multi-head attention of every machine over its listed neighbours.

    ``alpha^k_ij = softmax_j(LeakyReLU(s^k_i + t^k_{n(i,j)} + e^k_ij))`` over the real
    neighbours ``n(i, j)`` of machine ``i``, ``e^k_ij`` linear in the link features;
    ``h'_i = h_i + ReLU(W_o [sum_j alpha^k_ij v^k_{n(i,j)}]_k + W_s [sum_j g^k_ij v^k_{n(i,j)} / K_0]_k)``
    with pre-LayerNorm, then the pooled mean and max of all real machines are added back
    (``W_g``): the neighbour lists give the local structure, the pooling what lies beyond them.
    The second sum is gated by the link alone (``g^k_ij = sigmoid`` of a linear function of the
    link features) and not normalised: attention weights sum to one, so they can say what the
    neighbours are like but not how many there are -- how much compute and memory lie within a
    few milliseconds, which decides where a pipeline should start. Additive scores cost ``O(K)``
    per machine and head; the weighted sums ``O(K H)`` (:func:`neighbour_sums`).
    """

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden_dim {hidden} is not a multiple of heads {heads}")
        self.heads, self.head_dim = heads, hidden // heads
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, hidden + 2 * heads)  # values | target scores | source scores
        self.edge = nn.Linear(len(LINK_FEATURES), heads)
        self.gate = nn.Linear(len(LINK_FEATURES), heads)
        self.out = nn.Linear(hidden, hidden)
        self.sum_out = nn.Linear(hidden, hidden, bias=False)
        self.pooled = nn.Linear(2 * hidden, hidden, bias=False)

    def forward(self, h: torch.Tensor, obs: Observation) -> torch.Tensor:
        b, m, hidden = h.shape
        k = self.heads
        proj = self.proj(self.norm(h))
        src = proj[..., hidden + k :]  # [B, M, heads]
        dst = gather_rows(proj[..., hidden : hidden + k].contiguous(), obs.neighbours)  # [B, M, K, heads] target scores
        logits = nn.functional.leaky_relu(src.unsqueeze(2) + dst + self.edge(obs.neighbour_links), 0.2)
        logits = logits.masked_fill(~obs.neighbour_mask.unsqueeze(-1), _NEG)
        # Softmax over the neighbours, taken along the last axis (~3x faster than over axis 2).
        alpha = torch.softmax(logits.transpose(2, 3).contiguous(), dim=-1).transpose(2, 3)
        gate = torch.sigmoid(self.gate(obs.neighbour_links)) * obs.neighbour_mask.unsqueeze(-1)
        # Both weighted sums of the neighbours' values at once ([alpha | gate / K_0]; x 1/8 is
        # exact), then W_o agg + W_s total as one linear of [agg | total].
        sums = neighbour_sums(proj[..., :hidden], torch.cat([alpha, gate * _SUM_SCALE], dim=-1), obs.neighbours, k)
        out_w = torch.cat([self.out.weight, self.sum_out.weight], dim=1)
        h = h + torch.relu(nn.functional.linear(sums, out_w, self.out.bias))
        pooled = torch.cat([masked_mean(h, obs.machine_mask), masked_max(h, obs.machine_mask)], -1)
        return h + self.pooled(pooled).unsqueeze(1)


def neighbour_sums(
    values: torch.Tensor, weights: torch.Tensor, neighbours: torch.Tensor, heads: int, dense: bool | None = None
) -> torch.Tensor:
    """``[B, M, T H]``: the ``T`` sums ``sum_j weights[b, i, j, t heads + head] values[b, n(i, j), head]``
    side by side, for ``values [B, M, H]`` (``heads`` blocks of ``H / heads``), ``weights
    [B, M, K, T heads]`` and ``neighbours [B, M, K]`` (a repeated neighbour counts as often as
    it is listed).

    The same sums two ways, chosen by memory: the weights scattered into a ``[B, heads, T, M, M]``
    matrix times the values (one batched matmul; smaller while ``T heads M <= K H``, i.e. up to
    ~128 machines at the default widths: no ``[B, M, K, H]`` tensor, forward and backward 5x
    faster at 47 machines, 2.7x at 128), else the values gathered per neighbour (``O(B M K H)``:
    memory linear in ``M``).
    ``dense`` forces one way (tests).
    """
    b, m, hidden = values.shape
    k, c = neighbours.shape[-1], weights.shape[-1]
    t, width = c // heads, hidden // heads
    per_t = weights.view(b, m, k, t, heads)
    if dense if dense is not None else c * m <= k * hidden:
        matrix = torch.zeros(b, heads, t, m, m, dtype=values.dtype, device=values.device)
        matrix.scatter_add_(4, neighbours.view(b, 1, 1, m, k).expand(b, heads, t, m, k), per_t.permute(0, 4, 3, 1, 2))
        per_head = values.view(b, m, heads, width).transpose(1, 2).reshape(b * heads, m, width)
        out = torch.bmm(matrix.view(b * heads, t * m, m), per_head).view(b, heads, t, m, width)
        return out.permute(0, 3, 2, 1, 4).reshape(b, m, t * hidden)
    gathered = gather_rows(values, neighbours).view(b, m, k, heads, width)  # broadcast products: ~1.5x faster than einsum
    return torch.cat([(per_t[..., i, :].unsqueeze(-1) * gathered).sum(2).reshape(b, m, hidden) for i in range(t)], dim=-1)


class LayerDagConv(nn.Module):
    """One round over the layer DAG: ``y' = y + ReLU(W_f mean_pred(y) + W_b mean_succ(y) + W_r y)``."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fwd = nn.Linear(hidden, hidden)
        self.bwd = nn.Linear(hidden, hidden, bias=False)
        self.root = nn.Linear(hidden, hidden, bias=False)

    def forward(self, y: torch.Tensor, dag: EdgeList) -> torch.Tensor:
        b, n, hidden = y.shape
        z = self.norm(y).reshape(b * n, hidden)
        from_pred = torch.zeros_like(z).index_add_(0, dag.dst, z[dag.src]) * dag.inv_in
        from_succ = torch.zeros_like(z).index_add_(0, dag.src, z[dag.dst]) * dag.inv_out
        return y + torch.relu(self.fwd(from_pred) + self.bwd(from_succ) + self.root(z)).view(b, n, hidden)


class PlacementGNN(BaseFeaturesExtractor):
    """Per-machine embeddings of a Placement-v1 observation (see the module docstring).

    Args:
        observation_space: the env's ``Dict`` observation space (its padding only sizes SB3's
            ``features_dim``; the network runs on observations of any size).
        hidden_dim: embedding width ``H`` of machines and slots.
        machine_rounds: attention rounds over the machine neighbourhoods.
        layer_rounds: message-passing rounds over the layer DAG (and the placement).
        heads: attention heads (``hidden_dim`` must be a multiple).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        hidden_dim: int = 32,
        machine_rounds: int = 1,
        layer_rounds: int = 1,
        heads: int = 2,
    ) -> None:
        max_machines = int(observation_space["machine_mask"].shape[0])
        summary_dim = 3 * hidden_dim + len(GLOBAL_FEATURES) + _INSTANCE_FEATURES
        super().__init__(observation_space, max_machines * (hidden_dim + 1 + len(SIGNALS)) + summary_dim)
        self.max_machines = max_machines
        self.hidden_dim = hidden_dim
        self.summary_dim = summary_dim
        h = hidden_dim
        self.use_lookahead = LOOKAHEAD_KEY in observation_space.spaces
        self.use_plan = PLAN_KEY in observation_space.spaces
        inputs = len(MACHINE_FEATURES_V1) + _MACHINE_DERIVED + 2 * int(self.use_lookahead) + int(self.use_plan)
        self.machine_in = mlp((inputs, h, h))
        self.layer_in = mlp((len(LAYER_FEATURES), h, h))
        self.layer_rounds = nn.ModuleList(LayerDagConv(h) for _ in range(layer_rounds))
        self.to_machine = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(layer_rounds))
        self.to_layer = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(layer_rounds))
        self.current = nn.Linear(h + len(GLOBAL_FEATURES) + _INSTANCE_FEATURES, h)
        self.current_to_machine = nn.Linear(h, h, bias=False)
        self.machine_rounds = nn.ModuleList(NeighbourAttention(h, heads) for _ in range(machine_rounds))
        self.head_norm = nn.LayerNorm(h)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.embed(read_observation(observations))
        b = out.z.shape[0]
        return torch.cat([out.z.reshape(b, -1), out.mask.float(), out.signals.reshape(b, -1), out.summary], dim=1)

    def embed(self, obs: Observation) -> MachineEmbeddings:
        """Per-machine embeddings, signals and the pooled summary of a batch of observations."""
        b, m = obs.machine_mask.shape
        n = obs.layer_features.shape[1]
        room = share_room(obs)
        columns = [obs.machine_features, room.unsqueeze(-1)]
        if self.use_lookahead:
            columns.append(obs.lookahead)
        if self.use_plan:
            columns.append(obs.plan.unsqueeze(-1))
        h = self.machine_in(torch.cat(columns, dim=-1))
        hidden = h.shape[-1]

        y = self.layer_in(obs.layer_features)
        dag = obs.dag
        held = assignment(obs.layer_machine, m)
        for conv, to_m, to_l in zip(self.layer_rounds, self.to_machine, self.to_layer, strict=True):
            read = torch.zeros(b * n, hidden, device=h.device).index_copy_(0, held.slots, h.reshape(b * m, hidden)[held.machines])
            y = conv(y, dag) + to_l(read.view(b, n, hidden))
            holds = torch.zeros(b * m, hidden, device=h.device).index_add_(0, held.machines, y.reshape(b * n, hidden)[held.slots])
            h = h + to_m(holds.view(b, m, hidden))

        current = y.gather(1, obs.cursor.view(b, 1, 1).expand(b, 1, hidden)).squeeze(1)
        globals_ = torch.cat([obs.globals_, instance_features(obs)], dim=-1)
        c = torch.relu(self.current(torch.cat([current, globals_], dim=-1)))  # [B, H]
        h = h + self.current_to_machine(c).unsqueeze(1)
        for block in self.machine_rounds:
            h = block(h, obs)

        mmask = obs.machine_mask
        valid = mmask.float()
        z = self.head_norm(h) * valid.unsqueeze(-1)
        summary = torch.cat([masked_mean(z, mmask), masked_max(z, mmask), c, globals_], dim=-1)
        mf = obs.machine_features
        pred = (mf[..., _PRED] > 0.5).float()
        ring = (mf[..., _RING_BW] >= CLIP - 1e-4).float()  # own machine: infinite bandwidth, clipped
        witness = (mf[..., _WITNESS] > 0.5).float()
        if obs.lookahead is not None:
            gain, fits = obs.lookahead[..., 0], obs.lookahead[..., 1]
        else:
            gain = fits = torch.zeros_like(pred)
        stay_shared = pred * (room >= 0).float()  # staying leaves room for the later replicas' copies
        plan = obs.plan if self.use_plan else torch.zeros_like(pred)
        signals = torch.stack([pred, ring, witness, gain, fits, stay_shared, plan], dim=1) * valid.unsqueeze(1)
        return MachineEmbeddings(z, mmask, signals, summary)


def instance_features(obs: Observation) -> torch.Tensor:
    """``[B, 2]`` what the whole instance asks, read off the observation: ``log2(D) / 3`` and
    the memory all slots need over the memory of all machines (clipped to 2).

    Placing replica 0 well needs both (shared by all replicas, or one chain per replica?), and
    neither the current slot nor the global features say them: ``D`` is the number of real
    slots at topological position 0 (one per replica), the need the sum of the slots'
    ``memory_rel`` (state + one micro-batch of stash, over the largest machine's memory), the
    memory the sum of the machines' ``memory_rel``.
    """
    t = obs.totals
    return torch.stack([torch.log2(t.replicas) / 3.0, (t.need / t.memory).clamp(max=2.0)], dim=-1)


def share_room(obs: Observation) -> torch.Tensor:
    """``[B, M]`` the memory each machine would have left, over its memory (clipped to
    ``[-1, 1]``), if the current slot went there and every later replica copied the current
    replica's layers on it: ``free - need - (D - 1 - r) (held + need)``, with ``held`` the current
    replica ``r``'s slots on the machine so far and ``need`` the current slot's memory.

    Replicas that share machines pay no data-parallel sync (the fastest layout wherever memory
    allows, and the teacher's usual one), but only if replica 0 left room for the others: a
    stage boundary is a memory decision the free memory alone does not show (replica 0 can fill
    a machine that ``D`` copies of its stage would overflow). Units of the largest machine's
    memory, as ``memory_rel``; one micro-batch of stash per layer, as there.
    """
    b, m = obs.machine_mask.shape
    lf, mf = obs.layer_features, obs.machine_features
    memory = mf[..., _MACHINE_MEMORY]
    replicas = obs.totals.replicas  # [B]
    cur = obs.cursor.view(b, 1)
    need = lf[..., _LAYER_MEMORY].gather(1, cur)  # [B, 1]
    replica_now = lf[..., _LAYER_REPLICA].gather(1, cur)  # [B, 1], r / max(D - 1, 1)
    own = (lf[..., _LAYER_REPLICA] - replica_now).abs() < 1e-4
    weight = lf[..., _LAYER_MEMORY] * (own & (obs.layer_machine >= 0) & obs.layer_mask).float()
    held = torch.zeros(b, m, device=memory.device).scatter_add_(1, obs.layer_machine.clamp(min=0), weight)
    later = (replicas.view(b, 1) - 1) * (1 - replica_now)  # D - 1 - r
    room = mf[..., _FREE_MEMORY] * memory - need - later * (held + need)
    return (room / memory.clamp(min=1e-6)).clamp(-1.0, 1.0) * obs.machine_mask.float()


def split_features(features: torch.Tensor, hidden_dim: int, summary_dim: int) -> MachineEmbeddings:
    """Undo :meth:`PlacementGNN.forward`'s flattening; ``M`` follows from the length."""
    b = features.shape[0]
    s = len(SIGNALS)
    m = (features.shape[1] - summary_dim) // (hidden_dim + 1 + s)
    # One split, not four slices: its backward is one concatenation, where each slice's
    # allocates and fills a zero gradient of the whole width.
    z, mask, signals, summary = features.split([m * hidden_dim, m, s * m, features.shape[1] - m * (hidden_dim + 1 + s)], dim=1)
    return MachineEmbeddings(z.view(b, m, hidden_dim), mask > 0.5, signals.view(b, s, m), summary)
