"""The rule registry: every rule class, in catalog order."""

from ddplint.lint.rules.collectives import CollectiveUnderRankGuard
from ddplint.lint.rules.data_loading import (
    ConstantSetEpoch,
    SamplerBeforeInit,
    SamplerWithoutSetEpoch,
    ShuffleWithSampler,
    UnshardedDataLoader,
)
from ddplint.lint.rules.device_binding import (
    BareCudaBeforeSetDevice,
    DeviceFromGlobalRank,
    HardCodedCudaIndex,
    LocalRankArgument,
    NoDeviceBinding,
    SetDeviceAfterCollective,
)
from ddplint.lint.rules.process_group import HardCodedRendezvous, NoDestroyProcessGroup
from ddplint.lint.rules.side_effects import (
    CheckpointOnEveryRank,
    LoadWithoutMapLocation,
    LogWriterOnEveryRank,
    MakedirsRace,
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
    UnshardedDataLoader,
    SamplerWithoutSetEpoch,
    ShuffleWithSampler,
    ConstantSetEpoch,
    SamplerBeforeInit,
    CheckpointOnEveryRank,
    LogWriterOnEveryRank,
    LoadWithoutMapLocation,
    MakedirsRace,
    CollectiveUnderRankGuard,
    NoDestroyProcessGroup,
    HardCodedRendezvous,
]

# Every code a user can select, ignore, list or explain.
CATALOG = [SyntaxErrorRule, *ALL_RULES]
RULES_BY_CODE = {rule.code: rule for rule in CATALOG}
