import numpy as np
from agents.bench_learn import bench_instance
from agents.inference import instance_env
inst = bench_instance("default")
envs = {c: instance_env(inst, c if c != "stay" else True) for c in ("stay", "pipeline")}
rng = np.random.default_rng(0)
for ep in range(3):
    obs = {c: e.reset(options={"instance": inst})[0] for c, e in envs.items()}
    steps = 0
    while True:
        for k in obs["stay"]:
            if not np.array_equal(obs["stay"][k], obs["pipeline"][k]): d = np.flatnonzero((obs["stay"][k] != obs["pipeline"][k]).reshape(-1)); print(ep, steps, k, d[:6], obs["stay"][k].reshape(-1)[d[:6]], obs["pipeline"][k].reshape(-1)[d[:6]])
        mask = envs["stay"].action_masks(); assert np.array_equal(mask, envs["pipeline"].action_masks())
        a = int(rng.choice(np.flatnonzero(mask)))
        outs = {c: e.step(a) for c, e in envs.items()}
        obs = {c: o[0] for c, o in outs.items()}
        assert outs["stay"][1] == outs["pipeline"][1]
        steps += 1
        if outs["stay"][2] or outs["stay"][3]: break
    print("episode", ep, "steps", steps, "identical obs/rewards", outs["stay"][4].get("iteration_time_s"))
