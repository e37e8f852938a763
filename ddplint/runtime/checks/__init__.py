"""Machine checks of the runtime audit.

Host checks (host.py) run in the launcher before torchrun starts and need neither torch nor a
GPU. Rank checks (rank.py) collect facts inside every rank and judge them after the merge.
Every check returns a `CheckResult` with evidence and, when something is wrong, a one-line fix.
"""
