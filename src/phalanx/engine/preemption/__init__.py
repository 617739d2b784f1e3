"""Preemption: ``preemptor`` finds the workloads to evict for a head (Kueue's
``Preemptor``); ``preemption`` is what the cycle calls for a head that does not
fit: preempt, admit part of it, or hold quota for it.
"""
