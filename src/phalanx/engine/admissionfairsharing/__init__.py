"""Kueue's Admission Fair Sharing: ``usage`` is the LocalQueues' decayed usage,
``admissionfairsharing`` the part the engine calls to score and re-key jobs.
"""
