"""The agent's benchmarks: `hulk bench agent`, `hulk bench learn`, and a run against the baselines."""
