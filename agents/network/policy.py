"""The masked actor-critic policy: one score per machine (a pointer head) and a pooled critic.

:class:`PlacementPolicy` extends ``sb3_contrib``'s ``MaskableActorCriticPolicy`` through its
seams only: the features extractor is :class:`agents.network.gnn.PlacementGNN` (per-machine embeddings
``z_a``), ``_build_mlp_extractor`` installs a :class:`PointerHead`, ``_build`` makes the
action net the identity (the head already returns the logits), and
``_get_action_dist_from_latent`` builds the masked categorical over however many machines the
observation has:

* actor: ``logit_a = w . ReLU(W z_a + U s + b) + sum_k beta_k signal_k(a)`` for every machine
  ``a``, where ``s`` is the pooled summary holding the current slot's embedding and the
  signals (:data:`agents.network.gnn.SIGNALS`) mark the machine of the slot's predecessor (``stay``),
  the machine of the same layer in the previous replica (``ring``), the witness completion's
  machine, the one-step lookahead's gain and fits (:mod:`agents.training.shaping`, when observed),
  ``stay`` where it leaves room for every later replica to copy the current one
  (:func:`agents.network.gnn.share_room`: replicas that share machines pay no gradient sync), and the
  stage DP plan's machine (:mod:`agents.decision.plan`, when observed).
  The ``beta`` are learnable priors (initially :data:`PRIORS`): a pipeline stage is a run of
  layers on one machine and replicas often repeat each other's machines, so exploration starts
  from pipelines; the network learns the rest. Padded machines get ``-1e8``; the env's
  ``action_masks`` are applied by the masked distribution on top;
* critic: an MLP of the pooled summary (mean and max of the machine embeddings, the current
  layer, the global features).

The same weights score every machine, so **one network places instances of any size**: more
padding gives the same logits for the real machines and relabelling the machines permutes the
logits (``tests/test_gnn.py``).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.type_aliases import Schedule
from torch import nn

from agents.network.gnn import (
    SIGNALS,
    MachineEmbeddings,
    Observation,
    PlacementGNN,
    mlp,
    split_features,
)

_PADDED_LOGIT = -1e8
# Initial weights of the per-machine signals (agents.network.gnn.SIGNALS) in the logits: the
# predecessor's machine, the previous replica's machine for this layer, the witness's machine,
# the lookahead gain, the lookahead fits, the predecessor's machine where the later replicas'
# copies still fit (staying there starts at 1 + 2, as the plain stay prior of 3 did before), the
# DP plan's machine (as strong as staying: the plan's stages are runs of stays).
PRIORS = (1.0, 1.0, 0.0, 3.0, 1.0, 2.0, 3.0)
_GAIN = SIGNALS.index("gain")


class PointerHead(nn.Module):
    """Scores every machine embedding (actor) and reads the pooled summary (critic).

    SB3 calls it as the policy's ``mlp_extractor``: ``forward(features) -> (logits, latent_vf)``
    with one logit per machine of the observation (``latent_dim_pi`` is the training padding's
    count, which SB3 only records).
    """

    def __init__(self, max_machines: int, hidden_dim: int, summary_dim: int, priors: tuple[float, ...] = PRIORS) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.summary_dim = summary_dim
        self.latent_dim_pi = max_machines
        self.latent_dim_vf = hidden_dim
        self.machine = nn.Linear(hidden_dim, hidden_dim)
        self.context = nn.Linear(summary_dim, hidden_dim, bias=False)
        self.score = nn.Linear(hidden_dim, 1)
        # Learnable priors on the per-machine signals (see the module docstring): without the
        # stay prior, PPO's per-step exploration scatters the layers over many machines and
        # learns slowly what a contiguous split is worth; every weight can go to 0 or below.
        # The gain's weight is ``priors[gain] * exp(gain_log_scale)``: a log scale lets Adam move
        # a large weight (gain_prior 100) multiplicatively -- additively, lr 1e-3 moves it ~1.6
        # in 100k steps, so PPO could not undo the lookahead where it is wrong.
        gain = priors[_GAIN]
        start = tuple(1.0 if i == _GAIN and gain > 0 else p for i, p in enumerate(priors))
        self.priors = nn.Parameter(torch.tensor(start, dtype=torch.float32))
        self.gain_log_scale = nn.Parameter(torch.tensor(float(np.log(gain)) if gain > 0 else 0.0))
        self.critic = nn.Sequential(mlp((summary_dim, hidden_dim, hidden_dim)), nn.ReLU())

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        emb = split_features(features, self.hidden_dim, self.summary_dim)  # once for both heads
        return self.logits(emb), self.critic(emb.summary)

    def forward_actor(self, features: torch.Tensor) -> torch.Tensor:
        return self.logits(split_features(features, self.hidden_dim, self.summary_dim))

    def logits(self, emb: MachineEmbeddings) -> torch.Tensor:
        """``[B, M]`` logits from the extractor's embeddings (padded machines ``-1e8``)."""
        hidden = torch.relu(self.machine(emb.z) + self.context(emb.summary).unsqueeze(1))
        priors = torch.einsum("k,bkm->bm", self.signal_weights(), emb.signals)
        logits = self.score(hidden).squeeze(-1) + priors
        return logits.masked_fill(~emb.mask, _PADDED_LOGIT)

    def signal_weights(self) -> torch.Tensor:
        """``[K]`` the signals' logit weights: the priors, the gain's times ``exp(gain_log_scale)``."""
        gain = self.priors[_GAIN : _GAIN + 1] * self.gain_log_scale.exp()
        return torch.cat((self.priors[:_GAIN], gain, self.priors[_GAIN + 1 :]))

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args, **kwargs) -> None:  # type: ignore[override]
        # Weights saved before the log scale existed (the shipped gnn-ppo) hold the gain's
        # weight in priors[gain] alone: scale 1 (log 0) makes them decide exactly as before.
        state_dict.setdefault(prefix + "gain_log_scale", torch.zeros(()))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward_critic(self, features: torch.Tensor) -> torch.Tensor:
        return self.critic(split_features(features, self.hidden_dim, self.summary_dim).summary)


class PlacementPolicy(MaskableActorCriticPolicy):
    """``MaskableActorCriticPolicy`` with the GNN extractor and the per-machine pointer head.

    Args:
        observation_space: the env's ``Dict`` observation space.
        action_space: ``Discrete(max_machines)``.
        lr_schedule: learning-rate schedule (SB3).
        hidden_dim, machine_rounds, layer_rounds, heads: :class:`agents.network.gnn.PlacementGNN`.
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
        gain_prior: float = PRIORS[SIGNALS.index("gain")],
        optimizer_kwargs: dict | None = None,
    ) -> None:
        self.hidden_dim = hidden_dim
        self.initial_priors = tuple(gain_prior if s == "gain" else p for s, p in zip(SIGNALS, PRIORS, strict=True))
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
        self.mlp_extractor = PointerHead(extractor.max_machines, extractor.hidden_dim, extractor.summary_dim, self.initial_priors)

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

    def forward(
        self, obs: dict[str, torch.Tensor], deterministic: bool = False, action_masks: np.ndarray | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """SB3's forward (actions, values, log-probabilities); without gradients (PPO's rollouts)
        under ``torch.inference_mode``: the same numbers, ~15% less per-op overhead on the
        rollouts' 4-observation batches."""
        if torch.is_grad_enabled():
            return super().forward(obs, deterministic, action_masks)
        with torch.inference_mode():
            return super().forward(obs, deterministic, action_masks)

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> MaskableCategoricalDistribution:
        """The masked categorical over the machines of this observation (any number of them)."""
        return MaskableCategoricalDistribution(latent_pi.shape[-1]).proba_distribution(action_logits=latent_pi)

    def action_logits(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """``[B, M]`` raw logits (before the action mask) for a tensor observation of ``M`` machines."""
        features = self.extract_features(obs)
        return self.mlp_extractor.forward_actor(features)

    def observation_logits(self, obs: Observation) -> torch.Tensor:
        """Same as :meth:`action_logits` for an already-read observation (no flattening; the
        inference fast path, :func:`agents.network.gnn.read_observation` with ``static``)."""
        return self.mlp_extractor.logits(self.features_extractor.embed(obs))


EXTRACTORS = ("gnn", "mlp")


def policy_class_and_kwargs(
    extractor: str, hidden_dim: int, machine_rounds: int, layer_rounds: int, heads: int, gain_prior: float | None = None
) -> tuple[type, dict]:
    """The SB3 policy class and its keyword arguments for a policy config.

    ``gnn``: :class:`PlacementPolicy`; ``mlp``: sb3-contrib's ``MultiInputPolicy`` (SB3's
    default ``CombinedExtractor`` over the flattened observation, 64-64 actor and critic), the
    reference of ``hulk bench train``.
    """
    if extractor == "gnn":
        kwargs = {"hidden_dim": hidden_dim, "machine_rounds": machine_rounds, "layer_rounds": layer_rounds, "heads": heads}
        if gain_prior is not None:
            kwargs["gain_prior"] = float(gain_prior)
        return PlacementPolicy, kwargs
    if extractor == "mlp":
        from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy

        return MaskableMultiInputActorCriticPolicy, {}
    from hulk_env.errors import HulkInputError

    raise HulkInputError(f"unknown policy extractor '{extractor}'; choose one of {', '.join(EXTRACTORS)}", field="policy.extractor")
