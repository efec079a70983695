"""Weights of the shipped re-placement policy (written by ``hulk_env.replacement.train_agent``)."""

FEATURES = ("same_as_prev", "stay_remaining", "same_as_next", "holds_state", "old_slot", "copy_log", "latency_prev_log", "latency_next_log", "comm_prev", "comm_next", "speed", "load_after", "overload", "new_to_replica", "revisit", "other_replicas", "same_as_peer", "dp_latency_log", "dp_sync", "free_after",)
WEIGHTS = (0.6054, -0.1316, 0.8810, 0.3662, 0.1249, 0.8115, -5.8958, -2.3397, -3.1216, -0.3718, 2.0722, -1.1565, -5.3754, -0.6749, -5.0000, 2.4709, 2.4761, -0.3846, -1.6917, 1.9305,)
TEMPERATURE = 1.0
TRAINING = {'method': 'cross-entropy method (round 2) + revisit prior'}
