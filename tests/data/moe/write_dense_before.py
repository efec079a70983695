"""Write the dense before-values (run on the unchanged model)."""
import json
from dataclasses import replace

from hulk_env import cost
from hulk_env.simulate import MOE_VALIDATION_MODELS, validation_cases

cases = validation_cases(12, seed=7)  # dense models
moe_cases = validation_cases(12, seed=7, models_drawn=MOE_VALIDATION_MODELS)
rows = []
def record(label, c, w):
    bd = cost.evaluate(c.cluster, w, c.placement)
    fast = cost.iteration_times(c.cluster, w, c.placement[None]).iteration_time_s[0]
    rows.append({"case": label, "cluster": c.cluster.name, "model": w.name, "data_parallel": w.data_parallel,
                 "schedule": w.schedule, "tensor_parallel": w.tensor_parallel, "zero": w.zero, "placement": c.placement.tolist(),
                 **{k: float(getattr(bd, k)).hex() for k in ("iteration_time_s", "pipeline_s", "dp_sync_s", "first_micro_batch_s", "bottleneck_s")},
                 "memory_bytes": [float(x).hex() for x in bd.memory_bytes], "fast_iteration_time_s": float(fast).hex()})
for i, c in enumerate(cases):
    record(f"dense {i}", c, c.workload)
for i, c in enumerate(moe_cases[:6]):  # MoE models without their experts
    record(f"moe=None {i}", c, replace(c.workload, moe=None))
for i, c in enumerate(cases[:4]):  # plan settings: tensor parallel, ZeRO-3
    record(f"plan {i}", c, c.workload.with_training(tensor_parallel=2, zero=3 if i % 2 else 0))
json.dump(rows, open("tests/data/moe/dense_before.json", "w"), indent=0)
print(len(rows))
