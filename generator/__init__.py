"""The untrusted side: training, model files, ground truth and proof search.

Nothing here is trusted by the checker; every claim the generator makes ends
up in a certificate that `checker/` re-verifies from the model file alone.
"""
