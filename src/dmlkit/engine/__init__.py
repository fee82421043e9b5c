"""The training engine: one loop on Lightning Fabric, the objective of named terms, checkpoints, callbacks."""
