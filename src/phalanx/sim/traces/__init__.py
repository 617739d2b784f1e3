"""Readers of public cluster traces (node lists, job and pod lists)."""
