"""Non-strided layouts on ``trn``: nested tensors (jagged and strided) and sparse COO/CSR tensors.

Both are metadata over dense ``trn`` tensors (a jagged tensor's ``values`` + ``offsets``, a sparse tensor's
``indices`` + ``values``), so their ops compose dense ``trn`` ops; see ``docs/trn_device.md``, section
"Nested and sparse tensors".
"""
