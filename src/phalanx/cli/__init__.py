"""The ``phalanx`` command line."""
