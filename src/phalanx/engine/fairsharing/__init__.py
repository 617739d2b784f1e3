"""Kueue's fair sharing: ``shares`` has the dominant-resource-share arithmetic,
``fairsharing`` the tournament that orders a round's heads across a cohort.
"""
