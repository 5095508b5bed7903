"""The statistics: from rows to n_50, the slope, their intervals and the bounds.

- :mod:`.fit`: the per-m fits of the paper (a sigmoid per m, then a line), with intervals
- :mod:`.pooled`: one model across m (n_50(m) = a m + b), its fits, information and sandwich standard errors
- :mod:`.calibrate`: the early-abandon rule calibrated on full-cap trajectories
- :mod:`.coverage`: how far the intervals can be trusted (coverage measured by simulation)
- :mod:`.simulator`: cramming simulated at a known truth, to judge designs and intervals by their error
- :mod:`.bounds`, :mod:`.published_bounds`: the theoretical slope bounds, from the model's measured support, and as
  the paper's code estimates them
"""
