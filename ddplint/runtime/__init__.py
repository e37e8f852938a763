"""Runtime audit: run the user's script under torchrun with a probe in every rank.

Importing this package must stay cheap; torch is imported only inside the probe and the
rank-side checks, never by the launcher's import.
"""
