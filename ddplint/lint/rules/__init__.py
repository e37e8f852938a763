"""The rule registry: every rule class, in catalog order."""

from ddplint.lint.rules.device_binding import (
    BareCudaBeforeSetDevice,
    DeviceFromGlobalRank,
    HardCodedCudaIndex,
    LocalRankArgument,
    NoDeviceBinding,
    SetDeviceAfterCollective,
)
from ddplint.lint.rules.syntax import SyntaxErrorRule

# Rules that check a parsed module, run by the engine in this order.
ALL_RULES = [
    HardCodedCudaIndex,
    BareCudaBeforeSetDevice,
    NoDeviceBinding,
    SetDeviceAfterCollective,
    DeviceFromGlobalRank,
    LocalRankArgument,
]

# Every code a user can select, ignore, list or explain.
CATALOG = [SyntaxErrorRule, *ALL_RULES]
RULES_BY_CODE = {rule.code: rule for rule in CATALOG}
