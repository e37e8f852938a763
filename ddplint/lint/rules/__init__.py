"""The rule registry: every rule class, in catalog order, one module per rule."""

from ddplint.diagnostics import RuleInfo
from ddplint.lint.rules.base import Rule
from ddplint.lint.rules.ddp001_syntax_error import SyntaxErrorRule
from ddplint.lint.rules.ddp101_hard_coded_cuda_index import HardCodedCudaIndex
from ddplint.lint.rules.ddp102_cuda_before_set_device import CudaBeforeSetDevice
from ddplint.lint.rules.ddp103_missing_set_device import MissingSetDevice
from ddplint.lint.rules.ddp104_set_device_after_init import SetDeviceAfterInit
from ddplint.lint.rules.ddp105_device_from_global_rank import DeviceFromGlobalRank
from ddplint.lint.rules.ddp106_local_rank_argument import LocalRankArgument
from ddplint.lint.rules.ddp201_dataloader_without_distributed_sampler import (
    DataloaderWithoutDistributedSampler,
)
from ddplint.lint.rules.ddp202_missing_set_epoch import MissingSetEpoch
from ddplint.lint.rules.ddp203_shuffle_with_sampler import ShuffleWithSampler
from ddplint.lint.rules.ddp204_constant_set_epoch import ConstantSetEpoch
from ddplint.lint.rules.ddp205_sampler_before_init import SamplerBeforeInit
from ddplint.lint.rules.ddp301_unguarded_checkpoint_save import UnguardedCheckpointSave
from ddplint.lint.rules.ddp302_unguarded_log_writer import UnguardedLogWriter
from ddplint.lint.rules.ddp303_load_without_map_location import LoadWithoutMapLocation
from ddplint.lint.rules.ddp304_makedirs_race import MakedirsRace
from ddplint.lint.rules.ddp401_collective_in_rank_branch import CollectiveInRankBranch
from ddplint.lint.rules.ddp402_missing_destroy_process_group import (
    MissingDestroyProcessGroup,
)
from ddplint.lint.rules.ddp403_hard_coded_master_port import HardCodedMasterPort

# Rules that check a parsed module, run by the engine in this order.
ALL_RULES: list[type[Rule]] = [
    HardCodedCudaIndex,
    CudaBeforeSetDevice,
    MissingSetDevice,
    SetDeviceAfterInit,
    DeviceFromGlobalRank,
    LocalRankArgument,
    DataloaderWithoutDistributedSampler,
    MissingSetEpoch,
    ShuffleWithSampler,
    ConstantSetEpoch,
    SamplerBeforeInit,
    UnguardedCheckpointSave,
    UnguardedLogWriter,
    LoadWithoutMapLocation,
    MakedirsRace,
    CollectiveInRankBranch,
    MissingDestroyProcessGroup,
    HardCodedMasterPort,
]

# Every code a user can select, ignore, list or explain.
CATALOG: list[type[Rule]] = [SyntaxErrorRule, *ALL_RULES]
RULES_BY_CODE = {rule.code: rule for rule in CATALOG}
# The same catalog as plain data, for selection and listing (and the cache of them).
KNOWN_RULES: tuple[RuleInfo, ...] = tuple(RuleInfo(rule.code, rule.name, rule.severity) for rule in CATALOG)
