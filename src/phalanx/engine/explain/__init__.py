"""Explanations: why a job waits, in the engine's words.

``reasons`` are the reason codes and records; ``waiting`` builds a pending
reason from the flavor assigner's attempt record; ``report`` answers for one job
what ``explain`` shows (its reason, the reservation ahead, its estimate).
"""
