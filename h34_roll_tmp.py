import sys, numpy as np, torch
from agents.bench_learn import bench_instance
from agents.config import load_config, lookahead_mode
from agents.train import build_model, make_vec_env, seed_everything
from agents.inference import instance_env, masked_logits
from agents.gnn import SIGNALS
from hulk_env.feasibility import Padding
from hulk_env.generators import InstanceListGenerator
name, completion = sys.argv[1], sys.argv[2]
cfg = load_config(None, (f"env.completion={completion}",) + tuple(sys.argv[3:]))
seed_everything(0, 1)
inst = bench_instance(name)
gen = InstanceListGenerator((inst,))
pad = Padding(gen.max_machines, gen.max_slots, max(1, gen.max_edges))
venv = make_vec_env(gen, pad, cfg, 1)
model = build_model(cfg, venv, None)
pol = model.policy; pol.set_training_mode(False)
head = pol.mlp_extractor
env = instance_env(inst, lookahead_mode(cfg), plan=cfg.env.plan) if 'plan' in instance_env.__code__.co_varnames else None
obs, _ = env.reset(options={"instance": inst})
static = None; acts = []
w = head.signal_weights().detach()
while True:
    logits, static = masked_logits(pol, obs, env.action_masks(), static)
    with torch.no_grad():
        emb = pol.features_extractor.embed(static if False else __import__('agents.gnn',fromlist=['x']).read_observation({k: torch.from_numpy(np.asarray(v,dtype=np.float32)[None]) for k,v in obs.items()}))
        sig = emb.signals[0]  # [K, M]
    a = int(torch.argmax(logits)); top = torch.topk(logits, min(3, int(torch.isfinite(logits).sum()))).indices.tolist()
    if len(acts) == 0: print("gain*w", [round(float(w[3]*sig[3,m]),2) for m in range(sig.shape[1])], "logits", [round(float(x),1) for x in logits]); break
    desc = " ".join(f"m{m}:{logits[m]:.1f}(gain {float(w[3]*sig[3,m]):.1f} fits {float(sig[4,m]):.0f} pred {float(sig[0,m]):.0f} wit {float(sig[2,m]):.0f})" for m in top)
    print(len(acts), "allowed", int(env.action_masks().sum()), "->", a, "|", desc)
    acts.append(a)
    obs, _, term, trunc, info = env.step(a)
    if term or trunc: print(info.get("iteration_time_s"), info.get("placement")); break
