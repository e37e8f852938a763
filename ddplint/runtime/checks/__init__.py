"""Every check of the runtime audit, one module per area.

Host checks (host.py) run in the launcher before torchrun starts and need neither torch nor a
GPU. Rank checks (rank.py) collect facts inside every rank and judge them after the merge. The
script's own audit judges the ranks' records of it: data.py (shards, epochs), writers.py (one
writer per path), perf.py (steps, scaling, memory peaks, checkpoints), restart.py (resume),
containment.py (the sandbox, leftover processes) and run.py (how the run ended).
Every check returns a `CheckResult` with evidence and, when something is wrong, a one-line fix.
"""
