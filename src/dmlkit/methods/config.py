"""The ``methods:`` section of an experiment config: one sub-section per configurable training method.

Each sub-section is the dataclass its method owns, defined beside the method's code, and each says
whether its method is on with one derived property, ``active``: the method's ``from_config`` builds it only
then, and ``dmlkit.config.config_differences`` skips the options of a method both configs leave off.

=============  ==========================================  ======================  ==============================
section        dataclass                                   on when                 old key
=============  ==========================================  ======================  ==============================
``sft``        ``dmlkit.augment.sft_config.SFTConfig``     ``name`` is set         ``augment:``
``ccp``        ``dmlkit.proxies.config.CCPConfig``         ``enabled``             ``ccp:``
``zero_shot``  ``methods.zero_shot_config.ZeroShotConfig``  ``weight > 0``          ``loss.zero_shot_weight/params``
``warmup``     ``methods.warmup_config.WarmupConfig``      ``steps > 0``           ``train.warmup_steps``
=============  ==========================================  ======================  ==============================

A method with settings adds its dataclass (with ``active``) as a field here; ``dmlkit.config_migration``
maps the old keys.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from dmlkit.augment.sft_config import SFTConfig
from dmlkit.methods.warmup_config import WarmupConfig
from dmlkit.methods.zero_shot_config import ZeroShotConfig
from dmlkit.proxies.config import CCPConfig

__all__ = ["MethodsConfig"]


@dataclass
class MethodsConfig:
    """The settings of the training methods; a method whose section is not ``active`` is off."""

    sft: SFTConfig = field(default_factory=SFTConfig)
    ccp: CCPConfig = field(default_factory=CCPConfig)
    zero_shot: ZeroShotConfig = field(default_factory=ZeroShotConfig)
    warmup: WarmupConfig = field(default_factory=WarmupConfig)

    def enabled_sections(self) -> list[str]:
        """The names of the sections whose method is on, in field order."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name).active]
