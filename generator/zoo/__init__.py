"""certify-zoo: the paper's statistics (Table 1, Figures 3-5) for a zoo of models.

Trains (paper recipe) or loads a directory of Max-of-K models, runs every
proof strategy the project registers on each, checks every certificate with
check-cert in a separate process, and writes a report directory.  Work runs
as whole (model, strategy) jobs on Dask; results are cached so a rerun does
only what is missing.

Modules: paper (the paper's published numbers), catalog (which strategies
exist and which Table 1 row each is), jobs (the work one Dask task does),
cache (atomic per-job result files), cluster (the Dask client and the retrying
job loop), resources (peak memory), report / plots (the report directory),
cli (the command).
"""
