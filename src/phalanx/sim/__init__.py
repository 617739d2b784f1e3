"""The simulator: real cluster traces replayed through the engine, on a virtual clock.

The engine runs unchanged (:class:`phalanx.engine.Engine`): a replay feeds it the
same events the live control plane would, so what it predicts is what the live
system would do.

- :mod:`.trace`: trace jobs, the generic CSV / JSON Lines format, time-limit rules;
  :mod:`.traces`: the public traces (Philly, Alibaba openb);
- :mod:`.setup`: a cluster and a policy as the engine's configuration and objects;
- :mod:`.simulator`: the discrete-event loop; :mod:`.metrics`: what a run measured;
- :mod:`.run`: ``phalanx sim``;
- :mod:`.packing`: a pod list replayed as the FGD authors' simulator does (every
  pod placed on arrival, nothing leaving).
"""
