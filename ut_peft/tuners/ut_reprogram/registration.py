"""Make ``UT_REPROGRAM`` a real member of peft's ``PeftType`` and register the method with peft.

peft's ``register_peft_method`` only accepts names that are already ``PeftType`` members and the enum has no
extension hook, so the member is added with ``aenum.extend_enum``. A real member (not a plain string) matters:
transformers' adapter integration calls ``peft_type.value``.
"""

from __future__ import annotations

from aenum import extend_enum
from peft.utils import PeftType, register_peft_method

NAME = "ut_reprogram"


def _ensure_enum_member() -> PeftType:
    if NAME.upper() not in PeftType.__members__:
        extend_enum(PeftType, NAME.upper(), NAME.upper())
    member = PeftType[NAME.upper()]
    # Python >= 3.12 looks members up as class attributes too.
    if getattr(PeftType, NAME.upper(), None) is not member:
        setattr(PeftType, NAME.upper(), member)
    return member


def register() -> PeftType:
    """Idempotent: importing ut_peft twice (or reloading it) must not fail."""
    from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING

    from .config import UTReprogramConfig
    from .model import UTReprogramModel

    member = _ensure_enum_member()
    if member not in PEFT_TYPE_TO_CONFIG_MAPPING:
        register_peft_method(
            name=NAME, config_cls=UTReprogramConfig, model_cls=UTReprogramModel, prefix="ut_reprogram_"
        )
    return member


register()
