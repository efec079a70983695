"""Weights of the shipped re-placement policy (written by ``hulk_env.replacement.train_agent``)."""

FEATURES = ("same_as_prev", "stay_remaining", "same_as_next", "holds_state", "old_slot", "copy_log", "latency_prev_log", "latency_next_log", "comm_prev", "comm_next", "speed", "load_after", "overload", "new_to_replica", "revisit", "other_replicas", "same_as_peer", "dp_latency_log", "dp_sync", "free_after",)
WEIGHTS = (0.7689, 1.6782, -0.6764, -0.2424, 0.0051, -1.3078, -1.6451, -0.7305, -1.7474, 0.9583, 2.3495, -0.9593, -0.3533, 0.1392, -2.0615, -0.9300, 3.3005, -0.7935, -3.9343, 4.8808,)
TEMPERATURE = 0.5
TRAINING = {'method': 'imitation + cross-entropy', 'teacher': 'search, budget 4000', 'imitation_accuracy': 0.9462, 'generations': 10, 'population': 32, 'samples': 8, 'seed': 0, 'train_problems': 96, 'validation_problems': 32, 'validation_log_ratio': 0.555, 'seconds': 628}
