"""Recurrent cells that run any dropout scheme's masks: one module per cell, each with its layer function and its
reference loop, on a ``torch.nn`` layer's weights (W_ih, W_hh, b_ih, b_hh).

A layer whose recurrence carries no mask runs the stock kernel (cuDNN on CUDA); a masked one runs, by ``impl``:

- ``reference``: the cell's step loop (``lstm_reference``, ``gru_reference``, ``rnn_reference``), slow and
  obviously correct: it defines what every faster path must compute;
- ``fast``: the fused Triton kernels of :mod:`vdrnn.kernels` (the LSTM and the GRU);
- ``auto``: ``fast`` on CUDA, the reference on the CPU.

Tied vs untied gates (Gal eq. 7 vs eq. 5) changes the noise, not the parameters: untied gates get a separate mask per
gate, so one [x; h] product per step becomes G, one per gate. The modules that hold the weights and draw the masks
are :mod:`vdrnn.nn`'s.
"""

IMPLS = ("auto", "fast", "reference")  # how a masked recurrence runs, as above
