"""The simulator: real cluster traces replayed through the engine, on a virtual clock.

The engine runs unchanged (:class:`phalanx.engine.Engine`): a replay feeds it the
same events the live control plane would, so what it predicts is what the live
system would do. :mod:`.packing` replays a pod list the way the FGD authors'
simulator does (every pod placed on arrival, nothing leaving); :mod:`.traces`
reads public traces.
"""
