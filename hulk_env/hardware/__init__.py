"""Hardware facts every instance is built from: GPUs, cities and cloud regions.

:mod:`hulk_env.hardware.gpus` maps a GPU name or CUDA compute capability to its peak FLOP/s and
memory; :mod:`hulk_env.hardware.geo` holds the city table and the models that turn distance
into latency and bandwidth; :mod:`hulk_env.hardware.cloud_regions` maps cloud providers' GPU
regions to their metros' coordinates.
"""
