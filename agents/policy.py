"""The masked actor-critic policy: one score per machine (a pointer head) and a pooled critic.

:class:`PlacementPolicy` extends ``sb3_contrib``'s ``MaskableActorCriticPolicy`` through its
seams only: the features extractor is :class:`agents.gnn.PlacementGNN` (per-machine embeddings
``z_a``), ``_build_mlp_extractor`` installs a :class:`PointerHead`, and ``_build`` makes the
action net the identity, because the head already returns the logits:

* actor: ``logit_a = w . ReLU(W z_a + U s + b) + beta_stay pred_a + beta_gain gain_a +
  beta_fits fits_a`` for every machine ``a``, where ``s`` is the pooled summary holding the
  current slot's embedding (the current layer meets every machine), ``pred_a`` marks the
  machine of the slot's predecessor and ``gain_a``, ``fits_a`` are the one-step lookahead of
  :mod:`agents.shaping`. The three ``beta`` are learnable priors (initially 3, 3 and 1): they
  make PPO's first explorations look like pipelines (runs of layers on one machine, no
  machine that the cost model already knows to be bad), and the network learns the rest.
  The same weights score every machine, so the policy runs on clusters of any size up to the
  padding; padded machines get ``-1e8``, and the env's ``action_masks`` are applied by the
  masked distribution on top;
* critic: an MLP of the pooled summary (mean and max of the machine embeddings, the current
  layer, the global features).

Same weights, any instance that fits the padding; more padding gives the same logits for the
real machines and relabelling the machines permutes the logits (tests/test_gnn.py).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from agents.gnn import PlacementGNN, mlp, split_features

_PADDED_LOGIT = -1e8
STAY_PRIOR = 3.0  # initial logit bonus of the predecessor's machine (PointerHead.stay_bias)
LOOKAHEAD_PRIOR = 3.0  # initial weight of the lookahead gain in the logits
FITS_PRIOR = 1.0  # initial logit bonus of machines whose stay completion fits in memory


class PointerHead(nn.Module):
    """Scores every machine embedding (actor) and reads the pooled summary (critic).

    SB3 calls it as the policy's ``mlp_extractor``: ``forward(features) -> (logits, latent_vf)``
    with ``latent_dim_pi = max_machines`` (one logit per machine).
    """

    def __init__(self, max_machines: int, hidden_dim: int, summary_dim: int) -> None:
        super().__init__()
        self.max_machines = max_machines
        self.hidden_dim = hidden_dim
        self.latent_dim_pi = max_machines
        self.latent_dim_vf = hidden_dim
        self.machine = nn.Linear(hidden_dim, hidden_dim)
        self.context = nn.Linear(summary_dim, hidden_dim, bias=False)
        self.score = nn.Linear(hidden_dim, 1)
        # Learnable prior for "keep the layer on its predecessor's machine" (see forward_actor).
        self.stay_bias = nn.Parameter(torch.tensor(STAY_PRIOR))
        self.lookahead_gain = nn.Parameter(torch.tensor(LOOKAHEAD_PRIOR))
        self.fits_bonus = nn.Parameter(torch.tensor(FITS_PRIOR))
        self.critic = nn.Sequential(mlp((summary_dim, hidden_dim, hidden_dim)), nn.ReLU())

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.forward_actor(features), self.forward_critic(features)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        emb = split_features(features, self.max_machines, self.hidden_dim)
        hidden = torch.relu(self.machine(emb.z) + self.context(emb.summary).unsqueeze(1))
        # A pipeline stage is a run of consecutive layers on one machine, so the machine of the
        # layer's predecessor gets a learnable head start (``stay_bias``, initially 3: about
        # 30% on 47 machines instead of 2%). Without it, PPO's per-step exploration scatters
        # the 26 layers of the default model over ~20 machines and learns slowly what a
        # contiguous split is worth; the weight is learned and can go to 0 or below.
        # Likewise the one-step lookahead (agents.shaping: the log time ratio of each machine's
        # stay completion to the best one's, and whether it fits in memory) enters the logits
        # directly with learnable weights: machines whose placement would cost a lot are
        # pruned from exploration from the first update, and the network learns what the
        # one-step view misses (when a switch pays most, which choices lead to a dead end).
        priors = self.stay_bias * emb.pred + self.lookahead_gain * emb.gain + self.fits_bonus * emb.fits
        logits = self.score(hidden).squeeze(-1) + priors
        return logits.masked_fill(~emb.mask, _PADDED_LOGIT)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.critic(split_features(features, self.max_machines, self.hidden_dim).summary)


class PlacementPolicy(MaskableActorCriticPolicy):
    """``MaskableActorCriticPolicy`` with the GNN extractor and the per-machine pointer head.

    Args:
        observation_space: the env's ``Dict`` observation space.
        action_space: ``Discrete(max_machines)``.
        lr_schedule: learning-rate schedule (SB3).
        hidden_dim, machine_rounds, layer_rounds, heads: :class:`agents.gnn.PlacementGNN`.
        optimizer_kwargs: passed to Adam (``None``: SB3's ``eps=1e-5``).
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Discrete,
        lr_schedule: Schedule,
        hidden_dim: int = 64,
        machine_rounds: int = 2,
        layer_rounds: int = 2,
        heads: int = 4,
        optimizer_kwargs: dict | None = None,
    ) -> None:
        self.hidden_dim = hidden_dim
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=[],
            activation_fn=nn.ReLU,
            ortho_init=True,
            features_extractor_class=PlacementGNN,
            features_extractor_kwargs={
                "hidden_dim": hidden_dim,
                "machine_rounds": machine_rounds,
                "layer_rounds": layer_rounds,
                "heads": heads,
            },
            share_features_extractor=True,
            normalize_images=False,
            optimizer_kwargs=optimizer_kwargs,
        )

    def _build_mlp_extractor(self) -> None:
        extractor = self.features_extractor
        assert isinstance(extractor, PlacementGNN)
        self.mlp_extractor = PointerHead(extractor.max_machines, extractor.hidden_dim, extractor.summary_dim)

    def _build(self, lr_schedule: Schedule) -> None:
        """SB3's ``_build`` with the identity as action net (the head returns the logits)."""
        self._build_mlp_extractor()
        self.action_net = nn.Identity()
        self.value_net = nn.Linear(self.mlp_extractor.latent_dim_vf, 1)
        if self.ortho_init:
            # SB3's gains: sqrt(2) for hidden layers, 1 for the value. The scorer's last layer
            # gets gain 1, not SB3's 0.01 for action nets: per-machine scores differ only by
            # what distinguishes the machines, and a 0.01 scale made those differences (and
            # so the policy) move ~100x slower in the first updates.
            self.features_extractor.apply(partial(self.init_weights, gain=np.sqrt(2)))
            self.mlp_extractor.apply(partial(self.init_weights, gain=np.sqrt(2)))
            self.init_weights(self.mlp_extractor.score, gain=1.0)
            self.init_weights(self.value_net, gain=1.0)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def action_logits(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[B, max_machines]`` raw logits (before the action mask) for a tensor observation."""
        features = self.extract_features(obs)
        return self.mlp_extractor.forward_actor(features)


EXTRACTORS = ("gnn", "mlp")


def policy_class_and_kwargs(extractor: str, hidden_dim: int, machine_rounds: int, layer_rounds: int, heads: int) -> tuple[type, dict]:
    """The SB3 policy class and its keyword arguments for a policy config.

    ``gnn``: :class:`PlacementPolicy`; ``mlp``: sb3-contrib's ``MultiInputPolicy`` (SB3's
    default ``CombinedExtractor`` over the flattened observation, 64-64 actor and critic), the
    reference of ``hulk bench train``.
    """
    if extractor == "gnn":
        kwargs = {"hidden_dim": hidden_dim, "machine_rounds": machine_rounds, "layer_rounds": layer_rounds, "heads": heads}
        return PlacementPolicy, kwargs
    if extractor == "mlp":
        from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy

        return MaskableMultiInputActorCriticPolicy, {}
    from hulk_env.errors import HulkInputError

    raise HulkInputError(f"unknown policy extractor '{extractor}'; choose one of {', '.join(EXTRACTORS)}", field="policy.extractor")
