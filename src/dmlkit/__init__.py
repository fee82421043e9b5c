"""dmlkit: deep metric learning components and a training tool on PyTorch.

The components (``dmlkit.losses``, ``dmlkit.pooling``, ``dmlkit.evaluation``,
``dmlkit.data``, ``dmlkit.models``) work inside any PyTorch loop; the engine
and the CLI compose them into runs driven by YAML configs.
"""

__version__ = "0.1.0"
