"""The simulated NeuronCore: targets, cost model, scheduler, profiles.

- ``targets``: the trn1/trn2/trn3 data (DEVICE.md's table, limits, cost constants).
- ``cost``: cycles of one engine instruction, seconds of one DMA (one table keyed by op).
- ``program``: a planned kernel lowered to per-instruction templates (engine, duration, accessed boxes).
- ``schedule``: in-order engine streams + 16 DMA queues, dependences on addresses, steady-state extrapolation.
- ``profile``: ``trn.Profile`` (time, MFU/MBU, per-engine busy, summary, Chrome trace, roofline).
"""
