"""Named built-in clusters and models (no files needed)."""
# ---- clusters ---- (owned by cluster engineer)

# ---- models ---- (owned by workload engineer)
