"""DDP201: a training DataLoader that every rank reads whole."""

from __future__ import annotations

from collections.abc import Iterator

from ddplint.diagnostics import Severity
from ddplint.lint.context import LintContext
from ddplint.lint.loaders import (
    NO,
    beside_a_split_loader,
    bound_names,
    chosen_sampler,
    dataset_shards,
    evaluation_only,
    helper_calls,
    is_training,
    loaders,
    options_known,
    read_by_one_process,
    read_one_batch,
    sharding,
    trained_on,
    whole_loaders_of_helper,
)
from ddplint.lint.names import arg
from ddplint.lint.rules.base import Finding, Inside, Rule
from ddplint.lint.summaries import Effect


class DataloaderWithoutDistributedSampler(Rule):
    """Finds a training DataLoader that nothing splits by rank, so every rank reads all the data."""

    code = "DDP201"
    severity = Severity.ERROR
    data_parallel = True

    def check(self, ctx: LintContext) -> Iterator[Finding]:
        facts = ctx.facts
        if not ctx.summaries.sites_with(Effect.DATA_PARALLEL):
            return  # rpc or custom schemes: no data-parallel training here
        backward = any(c.method == "backward" for c in facts.calls)
        for site in loaders(facts):
            call = site.node
            dataset = arg(call, 0, "dataset")
            chosen = chosen_sampler(facts, site)
            if chosen is not None:
                if sharding(chosen, facts, site) != NO:
                    continue
            elif dataset_shards(ctx, dataset, site) or not options_known(facts, site):
                continue
            if not is_training(facts, site, dataset, backward) or ctx.guards.main_only(site):
                continue
            if evaluation_only(ctx, site) or read_one_batch(ctx, site) or read_by_one_process(ctx, site):
                continue  # read only where no gradient is computed, however it shuffles, for one batch, or by one process
            if beside_a_split_loader(site, facts) and not trained_on(ctx, site):
                continue  # built whole beside a split one (a validation loader) and no loop seen to train on it
            label = (bound_names(facts, call) or ["DataLoader"])[0]
            yield Finding(call, _message(label))
        # a loader a helper of another module builds whole (`create_dataloader(...)` with
        # `sampler = None`): reported at the call when this module trains on what it returns
        for site, resolved in helper_calls(ctx):
            for label, loader in whole_loaders_of_helper(ctx, site, resolved):
                if ctx.guards.main_only(site) or not trained_on(ctx, site, label):
                    continue
                built = Inside(resolved.path, loader.node, "the DataLoader is built here, with no sampler that splits it by rank")
                yield Finding(site.node, _message(label), inside=(built,))


def _message(label: str) -> str:
    return (
        f"training loader '{label}' has no DistributedSampler: every rank reads the whole "
        "dataset in the same order (duplicated batches, no speed-up); pass "
        "sampler=DistributedSampler(dataset) and call sampler.set_epoch(epoch) each epoch"
    )
