"""Writing certificates: rigorous float64 interval arithmetic (intervals.py),
the trace of model quantities (trace.py), and proof strategies (strategies/)."""
