"""The gain prior's log scale (agents.network.policy.PointerHead.gain_log_scale): weights saved before it
existed decide exactly as before, and a new network starts at its
gain_prior with a weight Adam moves multiplicatively."""

from __future__ import annotations

import math

import torch

from agents.decision.methods import PRETRAINED_DIR, pretrained_policy
from agents.network.files import safe_torch_load
from agents.network.gnn import SIGNALS, MachineEmbeddings
from agents.network.policy import PRIORS, PointerHead
from agents.network.saved_policy import pad_new_globals

GAIN = SIGNALS.index("gain")


def _embeddings(head: PointerHead, batch: int = 3, machines: int = 9) -> MachineEmbeddings:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(batch, machines, dtype=torch.bool)
    mask[:, -2:] = False  # padded machines
    return MachineEmbeddings(
        z=torch.randn(batch, machines, head.hidden_dim, generator=g),
        mask=mask,
        signals=torch.rand(batch, len(SIGNALS), machines, generator=g),
        summary=torch.randn(batch, head.summary_dim, generator=g),
    )


def test_weights_saved_before_the_scale_give_the_logits_of_the_stored_priors():
    """The shipped weights with their gain_log_scale removed (as every policy saved before the
    scale existed) load with scale 1 and give ``score + sum_k priors_k signal_k``."""
    stored = safe_torch_load(PRETRAINED_DIR / "weights.pt", "policy weights")
    legacy = {k: v for k, v in stored.items() if not k.endswith("gain_log_scale")}
    net = pretrained_policy().policy
    net.load_state_dict(pad_new_globals(legacy, net.state_dict()))
    head = net.mlp_extractor
    assert head.gain_log_scale.item() == 0.0
    emb = _embeddings(head)
    # the formula before the scale: score + sum_k priors_k signal_k, with the stored priors
    hidden = torch.relu(head.machine(emb.z) + head.context(emb.summary).unsqueeze(1))
    before = head.score(hidden).squeeze(-1) + torch.einsum("k,bkm->bm", legacy["mlp_extractor.priors"], emb.signals)
    with torch.no_grad():
        assert torch.equal(head.logits(emb)[emb.mask], before[emb.mask])


def test_new_network_starts_at_its_gain_prior_on_a_log_scale():
    head = PointerHead(9, 8, 8, tuple(100.0 if i == GAIN else p for i, p in enumerate(PRIORS)))
    weights = head.signal_weights().detach()
    assert math.isclose(weights[GAIN].item(), 100.0, rel_tol=1e-6)
    assert torch.equal(weights[torch.arange(len(PRIORS)) != GAIN], torch.tensor(PRIORS)[torch.arange(len(PRIORS)) != GAIN])
    # d weight / d log-scale = weight: a step on the log scale moves the weight by a fraction of itself
    head.signal_weights()[GAIN].backward()
    assert math.isclose(head.gain_log_scale.grad.item(), 100.0, rel_tol=1e-5)
    zero = PointerHead(9, 8, 8, tuple(0.0 if i == GAIN else p for i, p in enumerate(PRIORS)))
    assert zero.signal_weights()[GAIN].item() == 0.0  # gain_prior 0 (allowed by the schema): no log
