"""Graph feature extractor: the machine graph and the layer DAG of a placement observation.

:class:`PlacementGNN` is an SB3 ``BaseFeaturesExtractor`` over the ``Dict`` observation of
:class:`hulk_env.env.PlacementEnv`. It reads three graphs that share the batch axis ``B``:

* the **machine graph** (``M`` padded machines, complete): dense multi-head graph attention
  over the ``[B, M, M]`` link matrix (GAT-style additive scores, as ``DenseGATConv``, plus a
  per-head term linear in the edge features latency and bandwidth). The graph is small and
  complete, so dense is the fast form on a CPU: the design measured sparse ``GATv2Conv`` at
  0.07x the throughput of an MLP, dense message passing at 0.5x;
* the **layer DAG** (``N`` padded (replica, layer) slots, sparse): the edge list of the whole
  batch is offset by ``b * N`` and scattered into a dense ``[B, N, N]`` adjacency with
  :func:`torch_geometric.utils.to_dense_adj` (one call, no per-sample loop), then torch-geometric
  :class:`~torch_geometric.nn.DenseGraphConv` passes messages forwards (from predecessors) and
  backwards (from successors);
* the **placement** (bipartite slots <-> machines, from ``layer_machine``): each machine sums
  the embeddings of the slots it holds, each placed slot reads its machine's embedding.

The machines' input features include the link features from the machines that hold the current
slot's predecessors (where its input would come from) and, when the env is wrapped by
:class:`agents.shaping.StayLookahead`, the one-step lookahead of each machine. The current slot
(``cursor``) gives a context vector (its embedding after the DAG rounds, plus the global
features) that the policy head combines with every machine embedding. The output is one
embedding per machine (for the per-machine pointer head of :mod:`agents.policy`) plus a pooled
summary (masked mean and max of the machine embeddings, the context; for the value head and the
pointer's context), flattened as ``[z (M x H) | machine_mask (M) | holds_predecessor
(M) | lookahead gain (M) | lookahead fits (M) | summary (G)]`` (the per-machine signals feed the
head's priors).

Everything is a function of the real machines and slots only: padded machines are excluded
from attention and pooling, padded slots have no edges and no machine, so more padding gives
the same embeddings for the real machines; no operation depends on a machine's index, so
relabelling the machines permutes the embeddings the same way (both tested).

Cost on 2 CPU cores (hidden 32, one round each, 47 machines, batch 256): ~37 ms for forward +
backward. What made it affordable: no MLP over the ``[B, M, M]`` edge tensor (a 2 -> 16 -> 4
edge MLP cost more than the rest together), additive instead of dot-product attention, the
key mask added to the ``[B, k, 1, M]`` scores rather than the ``[B, k, M, M]`` logits, no
feed-forward block after attention; ``hulk bench train`` measures the PPO throughput.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn
from torch_geometric.nn import DenseGraphConv
from torch_geometric.utils import to_dense_adj

from agents.shaping import LOOKAHEAD_KEY
from hulk_env.env import GLOBAL_FEATURES, LAYER_FEATURES, LINK_FEATURES, MACHINE_FEATURES

_PRED = MACHINE_FEATURES.index("holds_predecessor")
_NEG = -1e9  # attention logit of a padded machine (finite: no NaN when a row is all padding)


class Observation(NamedTuple):
    """The observation tensors the network reads (batched, float32 unless noted)."""

    machine_features: torch.Tensor  # [B, M, Fm]
    machine_mask: torch.Tensor  # [B, M] bool
    links: torch.Tensor  # [B, M, M, Fe]
    layer_features: torch.Tensor  # [B, N, Fl]
    layer_mask: torch.Tensor  # [B, N] bool
    layer_machine: torch.Tensor  # [B, N] long, -1 unplaced / padding
    edges: torch.Tensor  # [B, E, 2] long
    edge_mask: torch.Tensor  # [B, E] bool
    cursor: torch.Tensor  # [B] long
    globals_: torch.Tensor  # [B, G]
    lookahead: torch.Tensor | None  # [B, M, 2] (agents.shaping: gain, fits), when the env adds it


class MachineEmbeddings(NamedTuple):
    """What the extractor hands the policy head (flattened in between, as SB3 requires).

    Attributes:
        z: ``[B, M, H]`` machine embeddings (0 for padded machines).
        mask: ``[B, M]`` bool, real machines.
        pred: ``[B, M]`` 1.0 where the machine holds a predecessor of the current slot.
        gain: ``[B, M]`` the lookahead gain of each machine (0 without the feature).
        fits: ``[B, M]`` 1.0 where that machine's stay completion fits in memory (0 without).
        summary: ``[B, G]`` masked mean and max of ``z``, the current slot's context, globals.
    """

    z: torch.Tensor
    mask: torch.Tensor
    pred: torch.Tensor
    gain: torch.Tensor
    fits: torch.Tensor
    summary: torch.Tensor


def read_observation(obs: dict[str, torch.Tensor]) -> Observation:
    """Typed, correctly-dtyped views of SB3's preprocessed (float) observation dict."""
    n = obs["layer_features"].shape[1]
    return Observation(
        machine_features=obs["machine_features"],
        machine_mask=obs["machine_mask"] > 0.5,
        links=obs["links"],
        layer_features=obs["layer_features"],
        layer_mask=obs["layer_mask"] > 0.5,
        layer_machine=obs["layer_machine"].round().long(),
        edges=obs["edges"].round().long(),
        edge_mask=obs["edge_mask"] > 0.5,
        cursor=obs["cursor"].reshape(-1).round().long().clamp(0, max(n - 1, 0)),
        globals_=obs["globals"],
        lookahead=obs.get(LOOKAHEAD_KEY),
    )


def layer_adjacency(edges: torch.Tensor, edge_mask: torch.Tensor, num_slots: int) -> torch.Tensor:
    """``[B, N, N]`` adjacency ``A[b, u, v] = 1`` for each real edge ``u -> v`` of sample ``b``.

    The batch's edge lists are concatenated with node offsets ``b * N`` (the PyG batching
    convention) and scattered in one :func:`to_dense_adj` call.
    """
    b, e, _ = edges.shape
    offsets = (torch.arange(b, device=edges.device) * num_slots).view(b, 1, 1)
    flat = (edges + offsets).reshape(b * e, 2)[edge_mask.reshape(-1)]
    batch = torch.arange(b, device=edges.device).repeat_interleave(num_slots)
    adj = to_dense_adj(flat.t(), batch=batch, max_num_nodes=num_slots, batch_size=b)
    return adj.clamp_(max=1.0)


def placement_matrix(layer_machine: torch.Tensor, num_machines: int) -> torch.Tensor:
    """``[B, N, M]`` one-hot of each placed slot's machine (zero rows for unplaced/padding)."""
    placed = layer_machine >= 0
    one_hot = nn.functional.one_hot(layer_machine.clamp(min=0), num_machines).float()
    return one_hot * placed.unsqueeze(-1).float()


def edge_bias(links: torch.Tensor, linear: nn.Linear) -> torch.Tensor:
    """``[B, heads, M, M]`` bias ``W links_ab + c``, built in that layout by broadcasting.

    Same as ``linear(links).permute(0, 3, 1, 2)``, 4x faster: a ``[B*M*M, 2] x [2, heads]``
    matrix product is slow on a CPU, and the permute would copy.
    """
    w, c = linear.weight, linear.bias  # [heads, F], [heads]
    heads = w.shape[0]
    out = c.view(1, heads, 1, 1) + links[..., 0].unsqueeze(1) * w[:, 0].view(1, heads, 1, 1)
    for f in range(1, links.shape[-1]):
        out = out + links[..., f].unsqueeze(1) * w[:, f].view(1, heads, 1, 1)
    return out


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


class MachineAttention(nn.Module):
    """One round of dense multi-head graph attention over the complete machine graph.

    GAT-style additive attention with an edge term (DenseGATConv plus edge features):
    ``alpha^k_ab = softmax_b(LeakyReLU(s^k_a + t^k_b + e^k_ab))`` over the real machines ``b``,
    ``h'_a = h_a + ReLU(W_o [sum_b alpha^k_ab v^k_b]_k)`` with pre-LayerNorm, where ``s, t, v``
    are linear in ``h`` and ``e^k_ab`` is the edge bias from the link features (latency,
    bandwidth), shared by all rounds. Additive scores cost ``O(M^2)`` per head instead of the
    ``O(M^2 d)`` of dot-product attention, which matters on 2 CPU cores.
    """

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden_dim {hidden} is not a multiple of heads {heads}")
        self.heads, self.head_dim = heads, hidden // heads
        self.norm = nn.LayerNorm(hidden)
        self.proj = nn.Linear(hidden, hidden + 2 * heads)  # values | source scores | target scores
        self.out = nn.Linear(hidden, hidden)

    def forward(self, h: torch.Tensor, edge_bias: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        """``h [B, M, H]``, ``edge_bias [B, heads, M, M]``, ``key_mask [B, 1, 1, M]`` (0 or -1e9).

        The key mask is added to the small ``[B, heads, 1, M]`` target scores, not to the
        ``[B, heads, M, M]`` logits: ``LeakyReLU(x - 1e9)`` is still about ``-2e8``, which the
        softmax turns into an exact 0.
        """
        b, m, hidden = h.shape
        k = self.heads
        proj = self.proj(self.norm(h))
        v = proj[..., :hidden].view(b, m, k, self.head_dim).transpose(1, 2)  # [B, k, M, d]
        src = proj[..., hidden : hidden + k].transpose(1, 2).unsqueeze(-1)  # [B, k, M, 1]
        dst = proj[..., hidden + k :].transpose(1, 2).unsqueeze(-2) + key_mask  # [B, k, 1, M]
        logits = nn.functional.leaky_relu(edge_bias + src + dst, 0.2)
        agg = torch.softmax(logits, dim=-1) @ v  # [B, k, M, d]
        return h + torch.relu(self.out(agg.transpose(1, 2).reshape(b, m, hidden)))


class LayerDagConv(nn.Module):
    """One round over the layer DAG: ``y' = y + ReLU(conv_fwd(y, A^T) + conv_bwd(y, A))``.

    ``A^T`` sums each slot's predecessors, ``A`` its successors; both are torch-geometric
    :class:`DenseGraphConv` layers (mean aggregation keeps the scale of fan-in nodes sane).
    """

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fwd = DenseGraphConv(hidden, hidden, aggr="mean")
        self.bwd = DenseGraphConv(hidden, hidden, aggr="mean", bias=False)

    def forward(self, y: torch.Tensor, adj: torch.Tensor, adj_t: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = self.norm(y)
        return y + torch.relu(self.fwd(z, adj_t, mask) + self.bwd(z, adj, mask))


class PlacementGNN(BaseFeaturesExtractor):
    """Per-machine embeddings of a placement observation (see the module docstring).

    Args:
        observation_space: the env's ``Dict`` observation space (gives the padding ``M``).
        hidden_dim: embedding width ``H`` of machines and slots.
        machine_rounds: attention rounds over the machine graph.
        layer_rounds: message-passing rounds over the layer DAG (and the placement).
        heads: attention heads (``hidden_dim`` must be a multiple).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        hidden_dim: int = 64,
        machine_rounds: int = 2,
        layer_rounds: int = 2,
        heads: int = 4,
    ) -> None:
        max_machines = int(observation_space["machine_mask"].shape[0])
        summary_dim = 3 * hidden_dim + len(GLOBAL_FEATURES)
        super().__init__(observation_space, max_machines * (hidden_dim + 4) + summary_dim)
        self.max_machines = max_machines
        self.hidden_dim = hidden_dim
        self.summary_dim = summary_dim
        h = hidden_dim
        # Machine input: its features + the mean link from the predecessors' machines (+ the
        # lookahead gain of placing the current slot there, when the env provides it).
        self.use_lookahead = LOOKAHEAD_KEY in observation_space.spaces
        self.machine_in = mlp((len(MACHINE_FEATURES) + len(LINK_FEATURES) + 2 * int(self.use_lookahead), h, h))
        self.layer_in = mlp((len(LAYER_FEATURES), h, h))
        # Edge bias: linear in the link features (an MLP over the [B, M, M] link tensor cost
        # more than the rest of the network put together; the LeakyReLU adds the nonlinearity).
        self.edge_bias = nn.Linear(len(LINK_FEATURES), heads)
        self.machine_rounds = nn.ModuleList(MachineAttention(h, heads) for _ in range(machine_rounds))
        self.layer_rounds = nn.ModuleList(LayerDagConv(h) for _ in range(layer_rounds))
        self.to_machine = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(layer_rounds))
        self.to_layer = nn.ModuleList(nn.Linear(h, h, bias=False) for _ in range(layer_rounds))
        self.current = nn.Linear(h + len(GLOBAL_FEATURES), h)
        self.head_norm = nn.LayerNorm(h)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        out = self.embed(read_observation(observations))
        b = out.z.shape[0]
        parts = [out.z.reshape(b, -1), out.mask.float(), out.pred, out.gain, out.fits, out.summary]
        return torch.cat(parts, dim=1)

    def embed(self, obs: Observation) -> MachineEmbeddings:
        """Per-machine embeddings and the pooled summary of a batch of observations."""
        b, m = obs.machine_mask.shape
        n = obs.layer_features.shape[1]
        mmask = obs.machine_mask

        # Where the current layer's input would come from: links from the predecessors' machines.
        pred = obs.machine_features[..., _PRED] * mmask.float()  # [B, M]
        pred_links = torch.einsum("bp,bpaf->baf", pred / pred.sum(1, keepdim=True).clamp(min=1.0), obs.links)
        parts = [obs.machine_features, pred_links]
        if self.use_lookahead:
            parts.append(obs.lookahead)
        h = self.machine_in(torch.cat(parts, dim=-1))

        y = self.layer_in(obs.layer_features)
        adj = layer_adjacency(obs.edges, obs.edge_mask, n)
        adj_t = adj.transpose(1, 2)
        assign = placement_matrix(obs.layer_machine, m)  # [B, N, M]
        for conv, to_m, to_l in zip(self.layer_rounds, self.to_machine, self.to_layer, strict=True):
            y = conv(y, adj, adj_t, obs.layer_mask) + to_l(assign @ h)
            h = h + to_m(assign.transpose(1, 2) @ y)

        if len(self.machine_rounds):
            bias = edge_bias(obs.links, self.edge_bias)  # [B, heads, M, M]
            key_mask = torch.where(mmask, 0.0, _NEG).view(b, 1, 1, m)
            for block in self.machine_rounds:
                h = block(h, bias, key_mask)

        current = y.gather(1, obs.cursor.view(b, 1, 1).expand(b, 1, y.shape[-1])).squeeze(1)
        c = torch.relu(self.current(torch.cat([current, obs.globals_], dim=-1)))  # [B, H]
        z = self.head_norm(h) * mmask.unsqueeze(-1).float()
        summary = torch.cat([masked_mean(z, mmask), masked_max(z, mmask), c, obs.globals_], dim=-1)
        valid = mmask.float()
        if obs.lookahead is not None:
            gain, fits = obs.lookahead[..., 0] * valid, obs.lookahead[..., 1] * valid
        else:
            gain = fits = torch.zeros_like(pred)
        return MachineEmbeddings(z, mmask, (pred > 0).float(), gain, fits, summary)


def split_features(features: torch.Tensor, max_machines: int, hidden_dim: int) -> MachineEmbeddings:
    """Undo :meth:`PlacementGNN.forward`'s flattening ``[z | mask | pred | gain | fits | summary]``."""
    b, m = features.shape[0], max_machines
    cut = m * hidden_dim
    z = features[:, :cut].view(b, m, hidden_dim)
    mask, pred, gain, fits = (features[:, cut + i * m : cut + (i + 1) * m] for i in range(4))
    return MachineEmbeddings(z, mask > 0.5, pred, gain, fits, features[:, cut + 4 * m :])
