"""Fair-share usage: the decaying ledger of what tenants and their users have run.

The live control plane keeps it in the store; the simulator keeps it in memory
(:class:`~phalanx.usage.ledger.MemoryBook`). Neither database nor control loop is
needed to import it.
"""
