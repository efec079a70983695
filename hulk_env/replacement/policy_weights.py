"""Weights of the shipped re-placement policy (written by ``hulk_env.replacement.train_agent``)."""

FEATURES = (
    "same_as_prev", "same_as_next", "holds_state", "old_slot", "copy_log", "latency_prev_log",
    "latency_next_log", "comm_prev", "speed", "load_after", "overload", "new_to_replica",
    "other_replicas", "same_as_peer", "dp_latency_log", "dp_sync", "free_after",
)
WEIGHTS = (2.0, 1.0, 1.5, 1.0, -2.0, -3.0, -1.0, -2.0, 2.0, -1.0, -4.0, -0.5, -1.0, 2.0, -1.0, -3.0, 0.3)
TEMPERATURE = 1.0
TRAINING = {"method": "hand-set prior (untrained)"}
