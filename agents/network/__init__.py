"""The network: the GNN feature extractor, the pointer-head policy, saved policies and tensor-only files."""
