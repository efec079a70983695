"""Training the network: the config, the instances, shaping, imitation, PPO, run directories, sweeps, curves."""
