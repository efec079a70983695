"""Placing with a trained network: rollouts, the stage DP's plan, start ranking and bounds, the agent methods."""
